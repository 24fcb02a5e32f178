"""Hostile inputs to the Core ML backend: crafted and fuzzed ``.mlpackage`` folders (``inspect``, ``validate``) and
malformed ONNX models (``check --targets coreml``) end in exit 2 (or another true verdict) with one line, never an
internal error, a traceback, a signal, a hang or unbounded memory. Every command goes through the CLI in a driver
process under an address-space limit that the worker inherits; the driver logs a line before and after each
command, so a crash or a hang is pinned to its file."""
from __future__ import annotations

import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnxbridge.errors import BadInputError
from tests.conftest import ROOT
from tests.helpers.extras import require

require("coremltools")
MEMORY_LIMIT = 4 << 30  # address space of the driver and its worker (a check needs about 1 GB)
COMMAND_LIMIT_S = 20
ONNX_MUTANTS = 60
PACKAGE_MUTANTS = 20


# --- the driver: one process runs every command of a batch through the CLI --------------------------------------

def drive(plan: str, results: str) -> None:
    """Run each ``[label, args]`` of the JSON file ``plan`` through the CLI in this process; append a ``start`` line
    before and a result line (code, seconds, output) after each to ``results``."""
    os.environ["NO_COLOR"] = "1"
    with open(results, "a") as log:
        for i, (label, args) in enumerate(json.loads(Path(plan).read_text())):
            log.write(json.dumps({"start": label}) + "\n")
            log.flush()
            t = time.perf_counter()
            code, output = _run_cli(args, Path(results).with_name(f"output{i}.txt"))
            log.write(json.dumps({"label": label, "code": code, "seconds": time.perf_counter() - t,
                                  "output": output[-3000:]}) + "\n")
            log.flush()


def _run_cli(args: list[str], capture: Path) -> tuple[int, str]:
    """Exit code and output (file descriptors 1 and 2, native writes included) of one CLI command."""
    from tests.helpers.fuzzing import run_cli

    return run_cli(args, capture), capture.read_text(errors="replace")


def run_batch(commands: list[tuple[str, list]], folder: Path, timeout: float = 300) -> dict[str, dict]:
    """Results by label of ``commands`` run by one driver under ``MEMORY_LIMIT``; a dead or stuck driver fails the
    test naming the command it was running."""
    plan, results = folder / "plan.json", folder / "results.jsonl"
    plan.write_text(json.dumps([[label, [str(a) for a in args]] for label, args in commands]))
    code = ("import sys; from tests.backends.coreml.test_hostile import drive; drive(sys.argv[1], sys.argv[2])")
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))  # noqa: E731
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(plan), str(results)], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, preexec_fn=limit)
        died = None if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-1500:]}"
    except subprocess.TimeoutExpired:
        died = f"no answer within {timeout} s"
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    done = {r["label"]: r for r in lines if "label" in r}
    started = [r["start"] for r in lines if "start" in r]
    assert died is None, f"the driver died ({died}) while running {started[-1] if started else 'nothing'}"
    assert len(done) == len(commands), [label for label, _ in commands if label not in done]
    return done


def assert_clean(result: dict, codes: tuple[int, ...]) -> None:
    """An allowed exit code, within the time limit, no traceback and no internal error."""
    where = f"{result['label']}: {result['output'][-600:]}"
    assert result["code"] in codes, where
    assert "Traceback" not in result["output"] and "internal error" not in result["output"], where
    assert result["seconds"] < COMMAND_LIMIT_S, (result["seconds"], where)


def error_line(result: dict) -> str:
    lines = [ln for ln in result["output"].splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, result
    return lines[0]


# --- ONNX models ---------------------------------------------------------------------------------------------------

def small_model(opset: int = 17) -> onnx.ModelProto:
    """Conv, Relu, a constant Reshape, MatMul and a Constant: converts to Core ML as it is."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((64, 5)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
             helper.make_node("MatMul", ["flat", "w2"], ["m"], name="matmul"),
             helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.ones(5, np.float32))),
             helper.make_node("Add", ["m", "k"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _edit(fn) -> onnx.ModelProto:
    model = small_model()
    fn(model)
    return model


def _init(model, name: str) -> onnx.TensorProto:
    return next(t for t in model.graph.initializer if t.name == name)


def _subgraph(nodes, outputs) -> onnx.GraphProto:
    return helper.make_graph(nodes, "branch", [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 5])
                                                   for o in outputs])


def _with_if(model, then_branch, else_branch) -> None:
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    model.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then_branch,
                                             else_branch=else_branch))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 5]))


def _set(obj, **fields):
    for k, v in fields.items():
        setattr(obj, k, v)


def _conv_relu(opset: int) -> onnx.ModelProto:
    model = small_model(opset)
    del model.graph.node[2:]
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4, 4, 4]))
    return model


def _gru(steps: int) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in (("W", (1, 6, 2)), ("R", (1, 6, 2)))]
    graph = helper.make_graph([helper.make_node("GRU", ["x", "W", "R"], ["y"], name="gru", hidden_size=2)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 1, 1, 2])], w)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _huge_constant(model) -> None:
    model.graph.initializer.append(numpy_helper.from_array(np.array([12000, 12000], np.int64), "huge_shape"))
    model.graph.node.append(helper.make_node("ConstantOfShape", ["huge_shape"], ["huge"], name="cos"))
    model.graph.node.append(helper.make_node("Add", ["huge", "x2"], ["z"], name="add_huge"))
    model.graph.input.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 1]))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [12000, 12000]))


def _constant_float(model) -> None:
    k = model.graph.node[4]
    del k.attribute[:]
    k.attribute.append(helper.make_attribute("value_float", 2.0))


def _custom_relu(model) -> None:
    model.graph.node[1].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))


def _broken_loop_in_if(model) -> None:
    body = helper.make_graph([helper.make_node("Add", ["a"], ["b"])], "body", [], [])
    _with_if(model, _subgraph([helper.make_node("Loop", ["", ""], ["z"], body=body)], ["z"]),
             _subgraph([helper.make_node("Identity", ["y"], ["z"])], ["z"]))


def _wrong_attribute_type(model) -> None:
    pads = model.graph.node[0].attribute[0]
    del pads.ints[:]
    _set(pads, type=AttributeProto.STRING, s=b"\xff")


# name -> the model (ONNX check must refuse it: exit 2 and one error line naming the file)
MALFORMED = {
    "init_dtype_0": lambda m: _set(_init(m, "w"), data_type=0),
    "init_dtype_99": lambda m: _set(_init(m, "w"), data_type=99),
    "init_dtype_minus1": lambda m: _set(_init(m, "w"), data_type=-1),
    "init_dtype_float8": lambda m: _set(_init(m, "w"), data_type=TensorProto.FLOAT8E4M3FN),
    "input_dtype_99": lambda m: _set(m.graph.input[0].type.tensor_type, elem_type=99),
    "output_dtype_minus1": lambda m: _set(m.graph.output[0].type.tensor_type, elem_type=-1),
    "init_dims_negative": lambda m: _init(m, "w").dims.__setitem__(0, -4),
    "init_dims_huge": lambda m: _init(m, "w").dims.__setitem__(0, 2**40),
    "init_raw_short": lambda m: _set(_init(m, "w"), raw_data=b"\0" * 7),
    "input_dims_negative": lambda m: _set(m.graph.input[0].type.tensor_type.shape.dim[0], dim_value=-3),
    "missing_initializer": lambda m: m.graph.initializer.remove(_init(m, "w")),
    "cycle": lambda m: m.graph.node[0].input.__setitem__(0, "y"),
    "duplicate_output_name": lambda m: m.graph.node[1].output.__setitem__(0, "c"),
    "duplicate_initializer": lambda m: m.graph.initializer.append(_init(m, "w2")),
    "empty_graph": lambda m: m.graph.ClearField("node"),
    "opset_0": lambda m: _set(m.opset_import[0], version=0),
    "opset_10000": lambda m: _set(m.opset_import[0], version=10000),
    "attribute_wrong_type": _wrong_attribute_type,
    "node_without_inputs": lambda m: m.graph.node[1].ClearField("input"),
    "if_with_bad_branch": lambda m: _with_if(m, _subgraph([helper.make_node("Relu", ["nowhere"], ["z"])], ["z"]),
                                             _subgraph([], [])),
    "loop_in_if_broken": _broken_loop_in_if,
    "constant_without_value": lambda m: m.graph.node[4].ClearField("attribute"),
    "ir_version_0": lambda m: _set(m, ir_version=0),
}
# name -> (the model, the exit code a check gives, what its output says): valid models Core ML cannot (all) take
UNSUPPORTED = {
    "opset_1": (lambda: _conv_relu(1), 0, "can convert"),
    "if_with_valid_branches": (lambda: _edit(lambda m: _with_if(
        m, _subgraph([helper.make_node("Identity", ["y"], ["z"])], ["z"]),
        _subgraph([helper.make_node("Neg", ["y"], ["z"])], ["z"]))), 2, "(If): no Core ML lowering"),
    "huge_constant_of_shape": (lambda: _edit(_huge_constant), 2, "would fold to a constant of 144,000,000"),
    "gru_5000_steps": (lambda: _gru(5000), 2, "too long to unroll"),
    "constant_value_float": (lambda: _edit(_constant_float), 0, "can convert"),
    "custom_domain_relu": (lambda: _edit(_custom_relu), 2, "(Relu): no Core ML lowering"),
}


def write_external(folder: Path, location: str, offset: int = 0) -> Path:
    """``folder/model.onnx`` whose weight 'w' is read from ``location`` (relative to ``folder``)."""
    model = small_model()
    w = _init(model, "w")
    data = w.raw_data
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
        w.external_data.add(key=k, value=v)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    target = Path(os.path.normpath(folder / location))
    if not location.startswith("/") and not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return path


def external_cases(tmp: Path) -> dict[str, Path]:
    """External data: beside the model (valid), and leading out of its folder or past the end of its file."""
    good = write_external(tmp / "good", "weights/w.bin")
    outside = write_external(tmp / "dotdot", "../outside.bin")
    link = write_external(tmp / "link", "w.bin")
    (tmp / "link" / "w.bin").rename(tmp / "linked.bin")
    (tmp / "link" / "w.bin").symlink_to(tmp / "linked.bin")
    past_end = write_external(tmp / "past_end", "w.bin", offset=10_000)
    absolute = write_external(tmp / "absolute", "/etc/hostname")
    return {"external_good": good, "external_dotdot": outside, "external_symlink_out": link,
            "external_past_end": past_end, "external_absolute": absolute}


def mutate_onnx(seed: int) -> tuple[str, bytes]:
    """The ``seed``-th hostile variant of ``small_model``: its bytes damaged, or one to three of its fields
    tampered with through the onnx classes."""
    rng = random.Random(seed)
    model = small_model()
    if rng.random() < 0.3:
        data = bytearray(model.SerializeToString())
        kind = rng.choice(["truncate", "flip", "splice"])
        if kind == "truncate":
            data = data[:rng.randrange(len(data))]
        elif kind == "flip":
            for _ in range(rng.choice([1, 4, 32])):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        else:
            i, j = sorted(rng.randrange(len(data)) for _ in range(2))
            data = data[:i] + data[j:] + data[i:j]
        return f"bytes_{kind}", bytes(data)
    picked = rng.sample(sorted(TAMPER), rng.choice([1, 1, 2, 3]))
    for name in picked:
        TAMPER[name](rng, model)
    return "+".join(picked), model.SerializeToString()


def _tamper_value_info(rng, m):
    vi = rng.choice([*m.graph.input, *m.graph.output])
    if rng.random() < 0.5:
        vi.type.tensor_type.elem_type = rng.choice([0, 99, -1, TensorProto.STRING, TensorProto.INT4,
                                                    TensorProto.COMPLEX64, TensorProto.BOOL, TensorProto.DOUBLE])
    else:
        dim = rng.choice(list(vi.type.tensor_type.shape.dim))
        dim.dim_value = rng.choice([0, -1, -(2**62), 2**40, 60000, 2**31])


def _tamper_initializer(rng, m):
    t = rng.choice(list(m.graph.initializer))
    choice = rng.randrange(4)
    if choice == 0:
        t.data_type = rng.choice([0, 99, -1, TensorProto.STRING, TensorProto.BFLOAT16, TensorProto.INT4, 16])
    elif choice == 1:
        del t.dims[:]
        t.dims.extend(rng.choice([[-1], [2**40], [0], [], [3, 3, 3, 3, 3, 3, 3], [25000, 50000]]))
    elif choice == 2:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)] if rng.random() < 0.6 else t.raw_data * 2
    else:
        m.graph.initializer.remove(t)


def _tamper_names(rng, m):
    """A value made twice, a node fed by itself or a later node (a cycle), or an initializer given twice."""
    nodes = [n for n in m.graph.node if n.input and n.output]
    kind = rng.randrange(3)
    if kind < 2 and len(nodes) > 1:
        a, b = rng.sample(nodes, 2)
        if kind == 0:
            a.output[0] = b.output[0]
        else:
            a.input[0] = rng.choice([a, b]).output[0]
    elif m.graph.initializer:
        m.graph.initializer.append(rng.choice(list(m.graph.initializer)))


def _tamper_attribute(rng, m):
    """An attribute of a node replaced, or one added, with a value of a wrong type or an extreme one."""
    if not m.graph.node:
        return
    node = rng.choice(list(m.graph.node))
    existing = list(node.attribute)
    attr = rng.choice(existing) if existing and rng.random() < 0.5 else node.attribute.add()
    name = attr.name or rng.choice(["pads", "strides", "kernel_shape", "group", "axis", "value", "to"])
    attr.Clear()
    attr.name = name
    kind = rng.randrange(5)
    if kind == 0:
        _set(attr, type=AttributeProto.INT, i=rng.choice([0, -(2**63), 2**62, 999]))
    elif kind == 1:
        attr.type = AttributeProto.INTS
        attr.ints.extend(rng.choice([-1, 0, 2**40]) for _ in range(rng.randrange(9)))
    elif kind == 2:
        _set(attr, type=AttributeProto.STRING, s=b"\xff\x00" * 4)
    elif kind == 3:
        _set(attr, type=AttributeProto.FLOAT, f=float("nan"))
    else:
        attr.type = AttributeProto.SPARSE_TENSOR  # declared, nothing set


def _tamper_graph(rng, m):
    kind = rng.randrange(6)
    if not m.graph.node:
        return
    if kind == 0:
        m.graph.ClearField("node")
    elif kind == 1:
        rng.choice(list(m.graph.node)).ClearField("input")
    elif kind == 2:
        rng.choice(list(m.graph.node)).op_type = rng.choice(["NoSuchOp", "", "If", "Loop", "ConstantOfShape"])
    elif kind == 3:
        m.graph.output[0].name = rng.choice(["nowhere", "", "x", "k"])
    elif kind == 4:
        _with_if(m, _subgraph([helper.make_node(rng.choice(["Relu", "Loop", "If"]), ["nowhere"], ["z"])], ["z"]),
                 _subgraph([helper.make_node("Identity", ["y"], ["z"])], ["z"]))
    else:
        for node in m.graph.node:
            if node.op_type == "Constant":
                node.ClearField("attribute")


def _tamper_model(rng, m):
    if rng.random() < 0.6:
        m.opset_import[0].version = rng.choice([0, 1, 6, 10000, -1, 2**40])
    else:
        m.ir_version = rng.choice([0, 1, 3, 99, -1])


def _tamper_external(rng, m):
    weights = [t for t in m.graph.initializer if t.name in ("w", "w2")]
    if not weights:
        return
    t = rng.choice(weights)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    location = rng.choice(["/proc/self/environ", "../../etc/passwd", "missing.bin", "/dev/zero", ""])
    for k, v in (("location", location), ("offset", rng.choice(["0", "-5", str(2**40)])), ("length", "16")):
        t.external_data.add(key=k, value=v)


TAMPER = {"value_info": _tamper_value_info, "initializer": _tamper_initializer, "names": _tamper_names,
          "attribute": _tamper_attribute, "graph": _tamper_graph, "model": _tamper_model,
          "external": _tamper_external}


@pytest.fixture(scope="module")
def onnx_results(tmp_path_factory) -> dict[str, dict]:
    """``check FILE --targets coreml`` of every malformed, unsupported, external-data and fuzzed model (one driver;
    the valid model first, so the worker has started under the memory limit before any hostile file)."""
    tmp = tmp_path_factory.mktemp("onnx")
    files = {"valid": small_model()}
    files |= {name: _edit(fn) for name, fn in MALFORMED.items()}
    files |= {name: make() for name, (make, _, _) in UNSUPPORTED.items()}
    paths = {}
    for name, model in files.items():
        paths[name] = tmp / f"{name}.onnx"
        paths[name].write_bytes(model.SerializeToString())
    for name, data in (("truncated", small_model().SerializeToString()[:300]), ("garbage", b"\xff" * 500),
                       ("empty_file", b"")):
        paths[name] = tmp / f"{name}.onnx"
        paths[name].write_bytes(data)
    paths |= external_cases(tmp / "external")
    for seed in range(ONNX_MUTANTS):
        what, data = mutate_onnx(seed)
        paths[f"fuzz{seed:02d}_{what}"] = tmp / f"fuzz{seed:02d}.onnx"
        paths[f"fuzz{seed:02d}_{what}"].write_bytes(data)
    elsewhere = tmp / "cwd"
    elsewhere.mkdir()
    commands = [(name, ["check", path.resolve(), "--targets", "coreml"]) for name, path in paths.items()]
    return run_batch(commands, elsewhere)


@pytest.mark.slow
def test_the_worker_starts_under_the_memory_limit(onnx_results):
    result = onnx_results["valid"]
    assert_clean(result, (0,))
    assert "coreml: can convert" in result["output"]


@pytest.mark.parametrize("name", [*MALFORMED, "truncated", "garbage", "empty_file"])
@pytest.mark.slow
def test_a_malformed_model_is_one_line_exit_2(onnx_results, name):
    result = onnx_results[name]
    assert_clean(result, (2,))
    assert f"{name}.onnx" in error_line(result)


@pytest.mark.parametrize("name", UNSUPPORTED)
@pytest.mark.slow
def test_a_valid_model_gets_its_true_blockers(onnx_results, name):
    _, code, says = UNSUPPORTED[name]
    result = onnx_results[name]
    assert_clean(result, (code,))
    assert says in result["output"], result["output"]


@pytest.mark.slow
def test_external_data_is_read_from_the_models_folder(onnx_results):
    """Run from another folder: the weights beside the model are found; a location leading out of the model's
    folder ('..', absolute, a symlink) or past the end of its file is refused."""
    good = onnx_results["external_good"]
    assert_clean(good, (0,))
    assert "coreml: can convert" in good["output"]
    for name in ("external_dotdot", "external_symlink_out", "external_past_end", "external_absolute"):
        assert_clean(onnx_results[name], (2,))
        assert "model.onnx" in error_line(onnx_results[name])


@pytest.mark.slow
def test_fuzzed_models_never_crash_the_check(onnx_results):
    fuzzed = [r for label, r in onnx_results.items() if label.startswith("fuzz")]
    assert len(fuzzed) == ONNX_MUTANTS
    for result in fuzzed:
        assert_clean(result, (0, 2))


def test_the_backend_refuses_malformed_models_itself(tmp_path, monkeypatch):
    """The worker-side check (``onnxbridge.backends.coreml.check``, what the CLI calls) validates the model
    itself, whatever the caller checked first: malformed ones are BadInputError naming the file."""
    from onnxbridge.backends import coreml

    monkeypatch.chdir(tmp_path)
    for name in ("init_dtype_99", "init_raw_short", "input_dims_negative", "constant_without_value",
                 "opset_10000", "cycle"):
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(_edit(MALFORMED[name]).SerializeToString())
        with pytest.raises(BadInputError, match=f"{name}.onnx"):
            coreml.check(path)
    cases = external_cases(tmp_path / "external")
    assert coreml.check(cases.pop("external_good")) == []
    for name, path in cases.items():
        with pytest.raises(BadInputError, match="model.onnx"):
            coreml.check(path)


# --- .mlpackage folders --------------------------------------------------------------------------------------------

MANIFEST = "Manifest.json"
SPEC = "Data/com.apple.CoreML/model.mlmodel"
WEIGHTS = "Data/com.apple.CoreML/weights/weight.bin"


def _manifest(pkg: Path, edit) -> None:
    data = json.loads((pkg / MANIFEST).read_text())
    edit(data, data["itemInfoEntries"][data["rootModelIdentifier"]])
    (pkg / MANIFEST).write_text(json.dumps(data))


def _record(pkg: Path, field: int, value: int) -> None:
    """Overwrite field ``field`` (2: size in bytes, 3: data offset) of the first weight record (at offset 64)."""
    data = bytearray((pkg / WEIGHTS).read_bytes())
    struct.pack_into("<Q", data, 64 + (8 if field == 2 else 16), value)
    (pkg / WEIGHTS).write_bytes(bytes(data))


def _replace_with_link(pkg: Path, relative: str, target: Path) -> None:
    shutil.rmtree(pkg / relative) if (pkg / relative).is_dir() else (pkg / relative).unlink()
    (pkg / relative).symlink_to(target)


# name -> (how to damage a copy of the package, what the error says)
CRAFTED = {
    "empty_folder": (lambda p: [shutil.rmtree(p), p.mkdir()], "Manifest.json is missing"),
    "manifest_not_json": (lambda p: (p / MANIFEST).write_text("{not json"), "not JSON"),
    "manifest_a_list": (lambda p: (p / MANIFEST).write_text("[1, 2]"), "no itemInfoEntries"),
    "manifest_no_root": (lambda p: _manifest(p, lambda d, root: d.pop("rootModelIdentifier")), "no root model"),
    "manifest_dotdot": (lambda p: _manifest(p, lambda d, root: root.update(path="../../../../outside.mlmodel")),
                        "leads out of the package"),
    "manifest_absolute": (lambda p: _manifest(p, lambda d, root: root.update(path=str((p / SPEC).resolve()))),
                          "not a path inside the package"),
    "model_symlink_out": (lambda p: _replace_with_link(p, SPEC, p.parent / "elsewhere.mlmodel"),
                          "leads out of the package"),
    "weights_symlink_out": (lambda p: _replace_with_link(p, WEIGHTS, p.parent / "elsewhere.bin"),
                            "leads out of the package"),
    "weights_device": (lambda p: _replace_with_link(p, "Data/com.apple.CoreML/weights", Path("/dev")),
                       "leads out of the package"),
    "weights_empty": (lambda p: (p / WEIGHTS).write_bytes(b""), "not MIL blob storage"),
    "weights_truncated": (lambda p: (p / WEIGHTS).write_bytes((p / WEIGHTS).read_bytes()[:100]), "lies outside"),
    "weights_garbage": (lambda p: (p / WEIGHTS).write_bytes(b"\x07" * 4096), "not MIL blob storage"),
    "weights_huge_offset": (lambda p: _record(p, 3, 2**62), "claims bytes"),
    "weights_huge_size": (lambda p: _record(p, 2, 2**40), "claims bytes"),
    "model_garbage": (lambda p: (p / SPEC).write_bytes(b"\xff" * 1500), "not a Core ML model spec"),
    "model_empty": (lambda p: (p / SPEC).write_bytes(b""), "holds no model"),
    "model_truncated": (lambda p: (p / SPEC).write_bytes((p / SPEC).read_bytes()[:700]), "not a Core ML model spec"),
}


def mutate_package(seed: int, pkg: Path) -> str:
    """Damage the package copy ``pkg`` in the ``seed``-th way: its Manifest, weight file or model spec."""
    rng = random.Random(seed)
    target = rng.choice([MANIFEST, WEIGHTS, SPEC])
    data = bytearray((pkg / target).read_bytes())
    kind = rng.choice(["truncate", "flip", "zero", "append"] + (["json"] if target == MANIFEST else []))
    if kind == "truncate":
        data = data[:rng.randrange(len(data))]
    elif kind == "flip":
        start = 64 if target == WEIGHTS and rng.random() < 0.5 else 0  # the blob records, often
        for _ in range(rng.choice([1, 2, 8])):
            data[rng.randrange(start, min(len(data), start + 128) if start else len(data))] ^= 1 << rng.randrange(8)
    elif kind == "zero":
        i, n = rng.randrange(len(data)), rng.randrange(1, 64)
        data[i:i + n] = bytes(len(data[i:i + n]))
    elif kind == "append":
        data += rng.randbytes(rng.randrange(1, 4096))
    else:
        manifest = json.loads(data)
        entry = rng.choice(list(manifest["itemInfoEntries"].values()))
        entry["path"] = rng.choice(["", "../" * 6 + "etc/passwd", "/etc/passwd", "com.apple.CoreML", "a\0b",
                                    "com.apple.CoreML/nothing", 7, None])
        data = json.dumps(manifest).encode()
    (pkg / target).write_bytes(bytes(data))
    return f"{target.split('/')[-1]}_{kind}"


@pytest.fixture(scope="module")
def package_results(tmp_path_factory) -> tuple[dict[str, dict], dict[str, dict]]:
    """``inspect`` and ``validate src.onnx`` of the package ``convert`` wrote, of every crafted package and of
    every fuzzed one: (results by package name for inspect, for validate)."""
    tmp = tmp_path_factory.mktemp("mlpackage")
    src, built = tmp / "src.onnx", tmp / "built.mlpackage"
    src.write_bytes(small_model().SerializeToString())
    done = subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", "convert", str(src), "--to", "coreml",
                           "-o", str(built)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (tmp / "elsewhere.mlmodel").write_bytes((built / SPEC).read_bytes())
    (tmp / "elsewhere.bin").write_bytes((built / WEIGHTS).read_bytes())
    packages = {"built": built}
    for name, (damage, _) in CRAFTED.items():
        packages[name] = tmp / f"{name}.mlpackage"
        shutil.copytree(built, packages[name])
        damage(packages[name])
    for seed in range(PACKAGE_MUTANTS):
        pkg = tmp / f"fuzz{seed:02d}.mlpackage"
        shutil.copytree(built, pkg)
        packages[f"fuzz{seed:02d}_{mutate_package(seed, pkg)}"] = pkg
    commands = [(f"inspect {name}", ["inspect", pkg]) for name, pkg in packages.items()]
    commands += [(f"validate {name}", ["validate", src, pkg]) for name, pkg in packages.items()]
    results = run_batch(commands, tmp)
    return ({name: results[f"inspect {name}"] for name in packages},
            {name: results[f"validate {name}"] for name in packages})


@pytest.mark.slow
def test_the_built_package_reads_and_validates(package_results):
    inspected, validated = package_results
    assert_clean(inspected["built"], (0,))
    assert_clean(validated["built"], (0,))
    assert "status: passed" in validated["built"]["output"]


@pytest.mark.parametrize("name", CRAFTED)
@pytest.mark.slow
def test_a_crafted_package_is_one_line_exit_2(package_results, name):
    for results in package_results:
        result = results[name]
        assert_clean(result, (2,))
        line = error_line(result)
        assert f"{name}.mlpackage" in line and CRAFTED[name][1] in line, line


@pytest.mark.slow
def test_fuzzed_packages_never_crash_inspect_or_validate(package_results):
    inspected, validated = package_results
    fuzzed = [name for name in inspected if name.startswith("fuzz")]
    assert len(fuzzed) == PACKAGE_MUTANTS
    for name in fuzzed:
        assert_clean(inspected[name], (0, 2))
        assert_clean(validated[name], (0, 1, 2))  # 1: the altered program computes something else
