"""Hostile ONNX files for the fuzz test: seeded mutations of small models, and a driver that runs CLI commands on
them in one process, one result line per (file, command).

    python -m tests.helpers.fuzzing RESULTS.jsonl WORKDIR FILE...  # the driver (the test starts it under a memory cap)

Each result line is written before the next command starts, and a ``start`` line before each command, so a signal or
a hang of the driver is still attributed to the file and command that caused it.
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


# --- small models ---------------------------------------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset=17, name="g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    return _model(nodes, [_f32("x", ["batch", 4])], [_f32("y", ["batch", 3])], [w1, b1, w2])


def cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["flat"], name="reshape"),
             helper.make_node("Softmax", ["flat"], ["y"], name="softmax", axis=-1)]
    return _model(nodes, [_f32("x", [1, 3, 8, 8])], [_f32("y", [1, 64])], [w, shape], opset=13)


def branchy() -> onnx.ModelProto:
    """If whose branches hold a Loop: nested subgraphs."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _f32("acc_in", [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _f32("acc_out", [2])])
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    then = helper.make_graph([helper.make_node("Loop", ["trips", "yes", "x"], ["looped"], name="loop", body=body)],
                             "then", [], [_f32("looped", [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["negated"], name="neg")], "else", [],
                              [_f32("negated", [2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["positive"], name="gt"),
             helper.make_node("If", ["positive"], ["y"], name="if", then_branch=then, else_branch=other)]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    return _model(nodes, [_f32("x", [2])], [_f32("y", [2])], [one, trips, yes, zero], opset=15)


def shaped() -> onnx.ModelProto:
    """Shapes computed from constants: ConstantOfShape, Expand, Range."""
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="cos",
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Expand", ["x", "shape"], ["xe"], name="expand"),
             helper.make_node("Mul", ["xe", "ones"], ["y"], name="mul")]
    return _model(nodes, [_f32("x", [1, 3])], [_f32("y", [2, 3])], [shape], opset=17)


SEEDS = {"mlp": mlp, "cnn": cnn, "branchy": branchy, "shaped": shaped}


# --- mutations ------------------------------------------------------------------------------------------------------

def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)


def _pick(rng: random.Random, graph: onnx.GraphProto) -> onnx.GraphProto:
    return rng.choice(list(_graphs(graph)))


def _dims(rng, m):
    vi = rng.choice(list(m.graph.input) + list(m.graph.output))
    dims = vi.type.tensor_type.shape.dim
    if dims:
        d = rng.choice(list(dims))
        d.Clear()
        d.dim_value = rng.choice([0, -1, -(2**62), 60000, 2**40, 2**63 - 1, 7])


def _every_dim(rng, m):
    for vi in m.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            d.Clear()
            d.dim_value = rng.choice([60000, 100000, 2**31])


def _dtype(rng, m):
    vi = rng.choice(list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info) or list(m.graph.input))
    vi.type.tensor_type.elem_type = rng.choice([0, 99, -1, TensorProto.STRING, TensorProto.COMPLEX128,
                                                TensorProto.FLOAT8E4M3FN, TensorProto.INT4, TensorProto.BOOL])


def _init_dtype(rng, m):
    if m.graph.initializer:
        rng.choice(list(m.graph.initializer)).data_type = rng.choice([0, 99, -1, TensorProto.STRING, 23, 16])


def _init_dims(rng, m):
    if m.graph.initializer:
        t = rng.choice(list(m.graph.initializer))
        del t.dims[:]
        t.dims.extend(rng.choice([[25000, 50000], [-1], [0], [2**33], [3, 3, 3, 3, 3, 3, 3, 3], []]))


def _drop_init(rng, m):
    if m.graph.initializer:
        del m.graph.initializer[rng.randrange(len(m.graph.initializer))]


def _cycle(rng, m):
    nodes = m.graph.node
    if len(nodes) > 1:
        first, last = nodes[0], nodes[len(nodes) - 1]
        first.input[0] = last.output[0]


def _duplicate(rng, m):
    nodes = m.graph.node
    if len(nodes) > 1:
        a, b = rng.sample(range(len(nodes)), 2)
        nodes[a].output[0] = nodes[b].output[0]
        nodes[a].name = nodes[b].name


def _duplicate_io(rng, m):
    if m.graph.input:
        m.graph.input.append(m.graph.input[0])
    m.graph.output.append(m.graph.output[0])


def _empty(rng, m):
    g = _pick(rng, m.graph)
    del g.node[:]
    if rng.random() < 0.5:
        del g.output[:]


def _opset(rng, m):
    m.opset_import[0].version = rng.choice([0, 1, 6, 10000, -1, 2**40])
    if rng.random() < 0.3:
        m.opset_import.add(domain=rng.choice(["com.evil", "ai.onnx.ml", "com.microsoft"]), version=rng.choice([1, 99]))


def _ir(rng, m):
    m.ir_version = rng.choice([0, 1, 3, 99, -1])


def _op_type(rng, m):
    g = _pick(rng, m.graph)
    if g.node:
        node = rng.choice(list(g.node))
        node.op_type = rng.choice(["NoSuchOp", "", "Conv", "Loop", "If", "Scan", "ConstantOfShape", "Gather"])
        if rng.random() < 0.3:
            node.domain = rng.choice(["com.evil", "com.microsoft", "ai.onnx.ml"])


def _attr(rng, m):
    g = _pick(rng, m.graph)
    if g.node:
        node = rng.choice(list(g.node))
        attr = node.attribute.add()
        attr.name = rng.choice(["axis", "pads", "kernel_shape", "to", "then_branch", "body", "perm", "value"])
        kind = rng.choice(["int", "ints", "float", "string", "graph", "bad"])
        if kind == "int":
            attr.type, attr.i = onnx.AttributeProto.INT, rng.choice([-(2**63), 2**62, 999, -5])
        elif kind == "ints":
            attr.type = onnx.AttributeProto.INTS
            attr.ints.extend([rng.choice([-1, 0, 2**40]) for _ in range(rng.randrange(0, 9))])
        elif kind == "float":
            attr.type, attr.f = onnx.AttributeProto.FLOAT, float("nan")
        elif kind == "string":
            attr.type, attr.s = onnx.AttributeProto.STRING, b"\xff\x00" * 10
        elif kind == "graph":
            attr.type = onnx.AttributeProto.GRAPH
            attr.g.CopyFrom(helper.make_graph([], "empty", [], []))
        else:
            attr.type = onnx.AttributeProto.SPARSE_TENSOR  # declared, but nothing set


def _no_inputs(rng, m):
    g = _pick(rng, m.graph)
    if g.node:
        del rng.choice(list(g.node)).input[:]


def _unproduced_output(rng, m):
    m.graph.output[0].name = rng.choice(["nowhere", "", m.graph.input[0].name if m.graph.input else "x"])


def _constant_of_shape(rng, m):
    size = rng.choice([[25000, 50000], [10**6, 10**6], [2**31], [0], [-3]])
    shape = numpy_helper.from_array(np.array(size, np.int64), "huge_shape")
    m.graph.initializer.append(shape)
    m.graph.node.append(helper.make_node("ConstantOfShape", ["huge_shape"], ["huge"], name="huge_cos"))
    m.graph.output.append(helper.make_tensor_value_info("huge", TensorProto.FLOAT, [f"d{i}" for i in range(len(size))]))


def _raw_data(rng, m):
    if m.graph.initializer:
        t = rng.choice(list(m.graph.initializer))
        data = t.raw_data or np.array(t.float_data or t.int64_data or [0], np.float32).tobytes()
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.raw_data = data[: rng.randrange(0, max(1, len(data)))] if rng.random() < 0.7 else data * 3


def _external(rng, m):
    if m.graph.initializer:
        t = rng.choice(list(m.graph.initializer))
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        loc = rng.choice(["/proc/self/environ", "../../etc/passwd", "a\0b", "missing.bin", "/etc/hostname", ""])
        for k, v in (("location", loc), ("offset", str(rng.choice([0, -5, 2**40]))), ("length", "16")):
            e = t.external_data.add()
            e.key, e.value = k, v


def _metadata(rng, m):
    size = rng.choice([100_000, 1_000_000])
    m.metadata_props.add(key="blob", value="x" * size)
    for i in range(rng.choice([1, 2000])):
        m.metadata_props.add(key=f"k{i}", value="[red]" * 3)


def _sparse(rng, m):
    s = m.graph.sparse_initializer.add()
    s.values.CopyFrom(numpy_helper.from_array(np.ones(3, np.float32), "sp"))
    s.indices.CopyFrom(numpy_helper.from_array(np.array([0, 5, 2**40], np.int64), "sp_idx"))
    s.dims.extend(rng.choice([[4], [2**40], [-1]]))


def _nested(rng, m):
    """A Loop whose body is itself nested 30 levels deep, or an If with a broken branch."""
    leaf = inner = helper.make_graph([], "leaf", [], [])
    for i in range(rng.choice([3, 30])):
        node = helper.make_node("If", ["cond"], [f"o{i}"], name=f"if{i}", then_branch=inner, else_branch=leaf)
        inner = helper.make_graph([node], f"level{i}", [], [_f32(f"o{i}", [1])])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    m.graph.node.append(helper.make_node("If", ["cond"], ["deep"], name="deep_if", then_branch=inner,
                                         else_branch=leaf))
    m.graph.output.append(_f32("deep", [1]))


def _function(rng, m):
    f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")],
                             [helper.make_opsetid("", 17)])
    m.functions.append(f)  # a function calling itself
    m.opset_import.add(domain="local", version=1)
    if m.graph.node:
        m.graph.node[0].domain, m.graph.node[0].op_type = "local", "F"


def _loop_bomb(rng, m):
    """A Loop whose constant trip count (10^15, or none at all) and always-true condition never stop it."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
        "spin", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), _f32("v_in", [1])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), _f32("v_out", [1])])
    trip = rng.choice(["bomb_trip", ""])
    m.graph.initializer.extend([numpy_helper.from_array(np.array(10**15, np.int64), "bomb_trip"),
                                numpy_helper.from_array(np.array(True), "bomb_cond"),
                                numpy_helper.from_array(np.zeros(1, np.float32), "bomb_v")])
    m.graph.node.append(helper.make_node("Loop", [trip, "bomb_cond", "bomb_v"], ["bomb_out"], name="bomb", body=body))
    m.graph.output.append(_f32("bomb_out", [1]))


def _weights(rng, m):
    """Valid but hostile numbers: NaN, inf, extremes in a weight."""
    if m.graph.initializer:
        t = rng.choice(list(m.graph.initializer))
        if t.data_type == TensorProto.FLOAT:
            value = numpy_helper.to_array(t).copy()
            value.reshape(-1)[rng.randrange(value.size)] = rng.choice([np.nan, np.inf, -np.inf, 3e38, 1e-45])
            t.CopyFrom(numpy_helper.from_array(value, t.name))


def _rename(rng, m):
    """Valid but unusual names: long, markup-like, non-ASCII, shell-like."""
    old = m.graph.input[0].name if m.graph.input else None
    if old is None:
        return
    new = rng.choice(["[bold red]x[/]", "x" * 5000, "входной тензор", "$(rm -rf ~)", "a:b/c\\d", "\t"])
    for node in (n for g in _graphs(m.graph) for n in g.node):
        node.input[:] = [new if i == old else i for i in node.input]
        node.name = rng.choice([node.name, "", "[link=file:///etc/passwd]n[/link]"])
    m.graph.input[0].name = new


def _regular_opset(rng, m):
    """Another opset the model may well be valid at (the adapters then move it)."""
    m.opset_import[0].version = rng.choice([11, 13, 14, 15, 17, 18, 19, 21])


def _symbolic(rng, m):
    for vi in [*m.graph.input, *m.graph.output]:
        for d in vi.type.tensor_type.shape.dim:
            if rng.random() < 0.5:
                d.Clear()
                d.dim_param = rng.choice(["n", "", "batch size", "N" * 300])


def _doc(rng, m):
    m.doc_string = "\x1b[31m" * 1000
    m.producer_name, m.producer_version = "[red]evil[/red]", "\n" * 50
    if m.graph.node:
        m.graph.node[0].doc_string = "x" * 100_000


PROTO_MUTATIONS = [_dims, _every_dim, _dtype, _init_dtype, _init_dims, _drop_init, _cycle, _duplicate, _duplicate_io,
                   _empty, _opset, _ir, _op_type, _attr, _no_inputs, _unproduced_output, _constant_of_shape,
                   _raw_data, _external, _metadata, _sparse, _nested, _function, _loop_bomb]
VALID_MUTATIONS = [_weights, _rename, _regular_opset, _symbolic, _doc, _metadata]


def _bytes(rng: random.Random, data: bytes) -> bytes:
    kind = rng.choice(["truncate", "flip", "flip", "splice", "zero"])
    buf = bytearray(data)
    if kind == "truncate":
        return bytes(buf[: rng.randrange(0, len(buf))])
    if kind == "flip":
        for _ in range(rng.choice([1, 2, 8, 32])):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if kind == "splice":
        i, j = sorted(rng.randrange(len(buf)) for _ in range(2))
        return bytes(buf[:i] + buf[j:] + buf[i:j])
    i = rng.randrange(len(buf))
    return bytes(buf[:i] + b"\0" * rng.randrange(1, 64) + buf[i + 64:])


def mutate(seed: int) -> tuple[str, bytes]:
    """The ``seed``-th hostile file: (a name saying what was done, its bytes)."""
    rng = random.Random(seed)
    base = rng.choice(sorted(SEEDS))
    model = SEEDS[base]()
    if rng.random() < 0.25:
        return f"{seed:03d}-{base}-bytes", _bytes(rng, model.SerializeToString())
    names = []
    pool = VALID_MUTATIONS if rng.random() < 0.3 else PROTO_MUTATIONS
    for mutation in rng.sample(pool, rng.choice([1, 1, 2, 3])):
        mutation(rng, model)
        names.append(mutation.__name__.strip("_"))
    return f"{seed:03d}-{base}-{'+'.join(names)}", model.SerializeToString()


def write_corpus(folder: Path, count: int, start: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in range(start, start + count):
        name, data = mutate(seed)
        path = folder / f"{name}.onnx"
        path.write_bytes(data)
        paths.append(path)
    return paths


# --- the driver -----------------------------------------------------------------------------------------------------

def commands(path: Path, out: Path) -> list[list[str]]:
    """What each file goes through: inspect (both forms), check for every backend, adapt, convert."""
    opset = 11 + len(path.name) % 10
    return [["inspect", str(path)], ["inspect", "--json", str(path)],
            ["check", str(path), "--targets", "coreml,dlc,tensorrt", "--opset", str(opset)],
            ["adapt", str(path), "-o", str(out / "adapted.onnx"), "--opset", str(opset)],
            ["convert", str(path), "-o", str(out / "converted.onnx"), "--report", str(out / "report.json")]]


def run_cli(args: list[str], capture: Path) -> int:
    """One CLI command in this process, its stdout and stderr (file descriptors, native output too) in ``capture``."""
    from onnxbridge.cli.main import cli

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(capture, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        code = cli.main(args, prog_name="onnxbridge", standalone_mode=False) or 0  # ctx.exit(n) returns n
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - what escaped the CLI's handler is what this test looks for
        print(f"Traceback: escaped the CLI: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 99
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(fd)
        for s in saved:
            os.close(s)
    return code


def main(results: str, workdir: str, files: list[str]) -> None:
    os.environ.setdefault("NO_COLOR", "1")
    with open(results, "a") as log:
        for name in files:
            path = Path(name)
            with tempfile.TemporaryDirectory(dir=workdir) as out:
                for args in commands(path, Path(out)):
                    log.write(json.dumps({"start": [path.name, args[0]]}) + "\n")
                    log.flush()
                    t = time.perf_counter()
                    capture = Path(out) / "captured.txt"
                    code = run_cli(args, capture)
                    text = capture.read_text(errors="replace")
                    log.write(json.dumps({"file": path.name, "command": " ".join(a if a != str(path) else "FILE"
                                                                                  for a in args[:2]),
                                          "code": code, "seconds": round(time.perf_counter() - t, 3),
                                          "output": text[-2000:]}) + "\n")
                    log.flush()


def _limit_memory(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def supervise(files: list[Path], workdir: Path, *, jobs: int = 2, timeout: float = 60.0,
              memory: int = 8 << 30, worker_memory: int = 3 << 30) -> list[dict]:
    """Run the driver over ``files`` in ``jobs`` processes under an address-space cap of ``memory`` bytes (and
    onnxbridge's own limit on its worker's resident memory, ``worker_memory``); a driver
    that dies (signal) or runs one command past ``timeout`` s is recorded against that file and command (``code``
    "signal N" or "timeout") and restarted on the files after it. Returns every result."""
    import subprocess

    queues = [list(files[i::jobs]) for i in range(jobs)]
    results: list[dict] = []
    running: dict[int, tuple] = {}

    def start(slot: int) -> None:
        if not queues[slot]:
            return
        log = workdir / f"results-{slot}-{len(results)}-{time.monotonic_ns()}.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.fuzzing", str(log), str(workdir),
                                 *map(str, queues[slot])], cwd=Path(__file__).resolve().parents[2],
                                env={**os.environ, "ONNXBRIDGE_MAX_MEMORY_MB": str(worker_memory >> 20)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=lambda: _limit_memory(memory))
        running[slot] = (proc, log)

    def read(log: Path) -> tuple[list[dict], list | None, float]:
        # only whole lines: the child may be writing the last one while this reads
        lines = [json.loads(line) for line in log.read_text().split("\n")[:-1] if line] if log.exists() else []
        done = [r for r in lines if "file" in r]
        started = [r["start"] for r in lines if "start" in r]
        pending = started[-1] if len(started) > len(done) else None
        return done, pending, log.stat().st_mtime if log.exists() else time.time()

    workdir.mkdir(parents=True, exist_ok=True)
    for slot in range(jobs):
        start(slot)
    while running:
        time.sleep(0.2)
        for slot, (proc, log) in list(running.items()):
            done, pending, changed = read(log)
            code = proc.poll()
            stuck = pending is not None and time.time() - changed > timeout
            if code is None and not stuck:
                continue
            if code is None:
                proc.kill()
                proc.wait()
            del running[slot]
            results += done
            finished = {r["file"] for r in done} - ({pending[0]} if pending else set())
            if pending is not None:
                results.append({"file": pending[0], "command": pending[1], "output": "",
                                "code": "timeout" if stuck else f"signal {-code}" if code < 0 else f"exit {code}",
                                "seconds": round(time.time() - changed, 1)})
                finished.add(pending[0])
            queues[slot] = [f for f in queues[slot] if f.name not in finished]
            if code not in (0, None) or stuck:
                start(slot)
    return results


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
