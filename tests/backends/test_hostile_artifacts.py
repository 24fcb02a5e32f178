"""Hostile DLC files, TensorRT engines and sidecars, and malformed ONNX models for ``check --targets dlc,tensorrt``:
each ends in exit 2 (or 1 for a DLC that is not the model's graph, or a skipped hop where nothing can run here) with
one line naming the file, never an internal error, a traceback, a signal, a hang or unbounded memory.

The named attacks (quadratic FlatBuffers, ZIP bombs, broken deflate streams, malformed metadata and sidecars,
garbage engines) each run through the CLI in a process of their own under an address-space limit that the worker
inherits, timed and with their peak memory (the process tree's, from ``wait4``) against a genuine file's. The seeded
mini-fuzzes run many files in one driver process that logs a line before and after each, so a crash or a hang is
pinned to its file."""
from __future__ import annotations

import json
import math
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ROOT
from tests.helpers.extras import require

MEMORY_LIMIT = 3 << 30  # address space of a CLI process and its worker
EXTRA_S, EXTRA_MB = 2.0, 200  # what a crafted file may cost beyond the genuine one
FUZZ_LIMIT_S = 20
DLC_MUTANTS, SIDECAR_MUTANTS = 50, 20
MAGIC = b"\xd5\x0a\x04\x00\x01\x00\x00\x00"  # a DLC entry's header: D5 0A, version 4.1


# --- running the CLI and the drivers --------------------------------------------------------------------------------

def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def cli(*args, timeout: float = 60) -> dict:
    """One CLI command in its own process: exit code, output, seconds and the peak RSS (MB) of its process tree."""
    with tempfile.TemporaryFile("w+") as out:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=_limit_memory, cwd=ROOT,
                                env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the usage includes the worker, which the CLI waits for
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t
        out.seek(0)
        output = out.read()
    return {"args": args, "code": proc.returncode, "output": output, "seconds": seconds,
            "mb": usage.ru_maxrss / 1024}


def assert_refused(result: dict, code: int, *needles: str, baseline: dict | None = None) -> str:
    """Exit ``code`` with one ``error:`` line holding ``needles``, no traceback or internal error; within
    ``EXTRA_S`` seconds and ``EXTRA_MB`` of the genuine file's run (``baseline``)."""
    where = f"{result['args']}: {result['output'][-1500:]}"
    assert result["code"] == code, where
    assert "Traceback" not in result["output"] and "internal error" not in result["output"], where
    lines = [ln for ln in result["output"].splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, where
    for needle in needles:
        assert needle in lines[0], (needle, where)
    if baseline is not None:
        assert result["seconds"] < baseline["seconds"] + EXTRA_S, (result["seconds"], baseline["seconds"], where)
        assert result["mb"] < baseline["mb"] + EXTRA_MB, (result["mb"], baseline["mb"], where)
    return lines[0]


def drive(kind: str, plan: str, results: str) -> None:
    """Driver process: run ``STEPS[kind]`` on each ``[label, args]`` of the JSON file ``plan``, appending a ``start``
    line before and a result line after each to ``results`` (code: the CLI's exit code for what was raised)."""
    import traceback

    from onnxbridge.errors import OnnxBridgeError

    os.environ["NO_COLOR"] = "1"
    with open(results, "a") as log:
        for label, args in json.loads(Path(plan).read_text()):
            log.write(json.dumps({"start": label}) + "\n")
            log.flush()
            t = time.perf_counter()
            try:
                code, line = STEPS[kind](*args), ""
            except OnnxBridgeError as exc:
                code, line = exc.exit_code, exc.one_line()
            except BaseException:  # noqa: BLE001 - what escapes is what this test looks for
                code, line = 4, "Traceback: " + traceback.format_exc()[-1500:]
            log.write(json.dumps({"label": label, "code": code, "seconds": time.perf_counter() - t,
                                  "line": line}) + "\n")
            log.flush()


def run_batch(kind: str, items: list[tuple[str, list]], folder: Path, timeout: float = 240) -> dict[str, dict]:
    """Results by label of ``items`` run by one driver under ``MEMORY_LIMIT``; a dead or stuck driver fails the
    test naming the item it was on."""
    plan, results = folder / f"{kind}-plan.json", folder / f"{kind}-results.jsonl"
    plan.write_text(json.dumps([[label, [str(a) for a in args]] for label, args in items]))
    code = "import sys; from tests.backends.test_hostile_artifacts import drive; drive(*sys.argv[1:])"
    try:
        proc = subprocess.run([sys.executable, "-c", code, kind, str(plan), str(results)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory)
        died = None if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-1500:]}"
    except subprocess.TimeoutExpired:
        died = f"no answer within {timeout} s"
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    started = [r["start"] for r in lines if "start" in r]
    assert died is None, f"the driver died ({died}) on {started[-1] if started else 'nothing'}"
    done = {r["label"]: r for r in lines if "label" in r}
    assert len(done) == len(items), [label for label, _ in items if label not in done]
    return done


def assert_no_crash(results: dict[str, dict], codes: tuple[int, ...]) -> None:
    for label, r in results.items():
        assert r["code"] in codes and "Traceback" not in r["line"], (label, r)
        assert r["seconds"] < FUZZ_LIMIT_S, (label, r)


def _read_dlc(path: str, reference: str) -> int:
    """What inspect and validate do with a DLC, less the QnnIr rebuild: read, summarize, compare with the
    genuine DLC, hash the weights."""
    from onnxbridge.backends.dlc import container, structure

    dlc = container.read(path)
    container.summary(dlc)
    structure.compare(dlc, container.read(reference))
    structure.weight_digests(dlc)
    return 0


def _inspect_engine(path: str) -> int:
    from onnxbridge.backends.tensorrt import artifact

    artifact.inspect(path)
    return 0


def _check(path: str) -> int:
    """``check --targets dlc,tensorrt``: exit 2 when something blocks."""
    from onnxbridge.spine import check_targets

    return 2 if check_targets(path, ["dlc", "tensorrt"])["blockers"] else 0


def _parse(path: str) -> int:
    """TensorRT's ONNX parser on ``path`` (a model the loader may never let reach it)."""
    from onnxbridge.backends.tensorrt import engine, flavours

    engine.parse(flavours.load(), Path(path))
    return 0


STEPS = {"dlc": _read_dlc, "engine": _inspect_engine, "check": _check, "parse": _parse}


# --- building files: ONNX, FlatBuffers, ZIPs -----------------------------------------------------------------------

def conv_relu(path: Path, batch="N") -> Path:
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                               helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


class FlatBuffer:
    """A FlatBuffer written back to front as FlatBuffers' builder does (children first, parents point forward at
    them), so any object can be pointed at any number of times. Handles are distances from the end."""

    def __init__(self):
        self.buf = bytearray()

    def _put(self, data: bytes) -> int:
        self.buf[0:0] = data + bytes(-len(data) % 4)
        return len(self.buf)

    def string(self, text: str) -> int:
        return self._put(struct.pack("<I", len(text.encode())) + text.encode() + b"\0")

    def u32s(self, values) -> int:
        return self._put(struct.pack(f"<I{len(values)}I", len(values), *values))

    def refs(self, handles) -> int:
        end = len(self.buf) + 4 + 4 * len(handles)  # the handle the vector will have
        return self._put(struct.pack(f"<I{len(handles)}I", len(handles),
                                     *[(end - 4 - 4 * i) - h for i, h in enumerate(handles)]))

    def table(self, scalars: dict | None = None, **refs: int) -> int:
        """A table of u32 ``scalars`` and offsets ``refs`` (keyword ``s<slot>``), by slot."""
        fields = {**(scalars or {}), **{int(k[1:]): ("ref", v) for k, v in refs.items()}}
        order = sorted(fields)
        body = bytearray(4 + 4 * len(order))
        end = len(self.buf) + len(body)
        for i, slot in enumerate(order):
            v = fields[slot]
            at = 4 + 4 * i
            struct.pack_into("<I", body, at, end - at - v[1] if isinstance(v, tuple) else v)
        self._put(bytes(body))
        slots = [4 + 4 * order.index(s) if s in fields else 0 for s in range(max(order) + 1)]
        vtable = struct.pack(f"<HH{len(slots)}H", 4 + 2 * len(slots), len(body), *slots)
        vtable += bytes(-len(vtable) % 4)
        struct.pack_into("<i", self.buf, 0, len(vtable))  # the table's offset back to its vtable
        self._put(vtable)
        return end

    def finish(self, root: int, ident: bytes) -> bytes:
        size = 8 + len(self.buf)
        return struct.pack("<I", size - root) + ident + bytes(self.buf)


def params_buffer() -> bytes:
    fb = FlatBuffer()
    return fb.finish(fb.table(s0=fb.refs([fb.table(s0=fb.string("g"))])), b"NETP")


def write_zip(path: Path, entries) -> Path:
    """A ZIP of ``entries`` (name, data, method, declared size[, where the central directory says the entry's
    local header is, as a ZIP64 extra field]) with exactly those header fields and CRC 0, as a DLC writer leaves
    them: the sizes and offsets may lie."""
    out, central = bytearray(), bytearray()
    for name, data, method, declared, *offset in entries:
        n = name.encode()
        extra = struct.pack("<HHQ", 1, 8, offset[0]) if offset else b""
        central += struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 45, 45, 0, method, 0, 0, 0, len(data), declared,
                               len(n), len(extra), 0, 0, 0, 0, 0xFFFFFFFF if offset else len(out)) + n + extra
        out += struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, method, 0, 0, 0, len(data), declared, len(n), 0)
        out += n + data
    out += central + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central),
                                 len(out), 0)
    path.write_bytes(bytes(out))
    return path


def entries_of(dlc: Path) -> list[tuple[str, bytes, int, int]]:
    """A genuine (stored) DLC's entries as ``write_zip`` takes them."""
    from onnxbridge.backends.dlc import container

    raw, spans = dlc.read_bytes(), container.read(dlc).spans
    return [(name, raw[off:off + size], 0, size) for name, (off, size, _) in spans.items()]


def replaced(entries, name: str, data: bytes, method: int = 0, declared: int | None = None) -> list:
    """``entries`` with the one named ``name`` holding ``data`` (``declared``: the size it claims)."""
    new = (name, data, method, len(data) if declared is None else declared)
    return [new if e[0] == name else e for e in entries]


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def deflated_zeros(mib: int) -> bytes:
    """A raw deflate stream of ``mib`` MiB of zeros in about a thousandth of that (one full-flush block repeated)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return block * mib + c.flush()


# --- DLC: a genuine pair, and what each CLI command costs on it -----------------------------------------------------

@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    """A small ONNX model, its DLC (onnxruntime-qnn's QnnIr), and the cost of inspecting and validating them."""
    require("onnxruntime_qnn")
    import onnxbridge

    folder = tmp_path_factory.mktemp("genuine")
    model = conv_relu(folder / "m.onnx", batch=1)
    dlc = folder / "m.dlc"
    onnxbridge.convert(model, to="dlc", output=dlc, validate=False)
    base = {"inspect": cli("inspect", dlc), "validate": cli("validate", model, dlc)}
    assert base["inspect"]["code"] == 0 and base["validate"]["code"] == 0, base
    return model, dlc, base


def quadratic_one_string(path: Path) -> Path:
    """24 kB: one node whose 400 inputs and 400 outputs all point at one 20 kB string (16 MB of names read
    naively; the terminal rendering of them ran for minutes)."""
    fb = FlatBuffer()
    name = fb.string("a" * 20000)
    node = fb.table(s0=name, s1=name, s2=fb.refs([name] * 400), s3=fb.refs([name] * 400))
    tensor = fb.table({2: 0, 6: 0x232}, s1=fb.string("x"), s3=fb.u32s([1, 3, 8, 8]))
    graph = fb.table(s0=fb.string("g"), s1=fb.refs([node]), s2=fb.refs([tensor]))
    topology = fb.finish(fb.table(s0=fb.refs([graph])), b"NETD")
    return write_zip(path, [("model", MAGIC + topology, 0, len(topology) + 8),
                            ("model.params", MAGIC + params_buffer(), 0, len(params_buffer()) + 8)])


def quadratic_one_node(path: Path) -> Path:
    """24 kB whose offsets all point at one node: 3000 graphs of the same 3000 nodes, each with an attribute."""
    fb = FlatBuffer()
    name = fb.string("n")
    attribute = fb.table({1: 0}, s0=name, s3=fb.table({0: 0x32, 1: 5}))
    node = fb.table(s0=name, s1=fb.string("Neuron"), s2=fb.refs([name]), s3=fb.refs([name]), s4=fb.refs([attribute]))
    graph = fb.table(s0=name, s1=fb.refs([node] * 3000), s2=fb.refs([]))
    topology = fb.finish(fb.table(s0=fb.refs([graph] * 3000)), b"NETD")
    return write_zip(path, [("model", MAGIC + topology, 0, len(topology) + 8),
                            ("model.params", MAGIC + params_buffer(), 0, len(params_buffer()) + 8)])


@pytest.mark.parametrize("craft", [quadratic_one_string, quadratic_one_node])
@pytest.mark.slow
def test_a_dlc_pointing_at_itself_is_refused_at_once(genuine, tmp_path, craft):
    """Read naively, these cost the square of their size (and their rendering much more); the reader's budget
    refuses them as soon as it has decoded twice their size."""
    model, _, base = genuine
    path = craft(tmp_path / "self.dlc")
    assert 20_000 < path.stat().st_size < 30_000
    for command, args in (("inspect", [path]), ("validate", [model, path])):
        assert_refused(cli(command, *args), 2, "self.dlc", "more work than its size allows", baseline=base[command])


def _bombs(tmp_path: Path, entries) -> dict[str, Path]:
    """Entries that inflate to 3 GB from 3 MB: declared as such, declared as nothing, or declared small."""
    bomb = deflated_zeros(3000)
    model = next(e for e in entries if e[0] == "model")
    metadata = next(e[0] for e in entries if e[0].startswith("dlc.metadata2"))
    return {
        "model declares 3 GB": write_zip(tmp_path / "b1.dlc", replaced(entries, "model", bomb, 8, 3000 << 20)),
        "model declares 0 bytes": write_zip(tmp_path / "b2.dlc", replaced(entries, "model", bomb, 8, 0)),
        "model declares its size": write_zip(tmp_path / "b3.dlc", replaced(entries, "model", bomb, 8, model[3])),
        "weights declare 3 GB": write_zip(tmp_path / "b4.dlc", replaced(entries, "model.params.bin", bomb, 8,
                                                                        3000 << 20)),
        "metadata declares 0 bytes": write_zip(tmp_path / "b5.dlc", replaced(entries, metadata, bomb, 8, 0)),
    }


@pytest.mark.slow
def test_zip_bombs_are_refused_before_they_inflate(genuine, tmp_path):
    model, dlc, base = genuine
    for what, path in _bombs(tmp_path, entries_of(dlc)).items():
        assert 3_000_000 < path.stat().st_size < 3_300_000, what
        for command, args in (("inspect", [path]), ("validate", [model, path])):
            line = assert_refused(cli(command, *args), 2, path.name, baseline=base[command])
            assert "ZIP bomb" in line or "inflates past" in line, (what, line)


@pytest.mark.slow
def test_broken_entries_are_refused(genuine, tmp_path):
    """Deflate streams that are not, or end early; sizes and offsets that lie."""
    model, dlc, base = genuine
    entries = entries_of(dlc)
    topology = next(e for e in entries if e[0] == "model")[1]
    weights = next(e for e in entries if e[0] == "model.params.bin")[1]
    cases = {
        "not a deflate stream": (replaced(entries, "model", b"\xff" * 100, 8, 5000), "cannot be inflated"),
        "deflate stream cut short": (replaced(entries, "model", deflate(topology)[:300], 8, len(topology)),
                                     "fewer bytes than"),
        "stored size lies": (replaced(entries, "model", topology, 0, len(topology) + 7), "but declares"),
        "local header past 2**63": ([(*e, 2**63 + 5) if e[0] == "model" else e for e in entries],
                                    "has no local header"),
        "1001 entries": ([*entries, *((f"x{i}", b"", 0, 0) for i in range(996))], "holds 1001 entries"),
        "weights not a deflate stream": (replaced(entries, "model.params.bin", b"\x07" * 300, 8, len(weights)),
                                         "cannot be inflated"),
    }
    for what, (changed, needle) in cases.items():
        path = write_zip(tmp_path / f"{what.replace(' ', '_')}.dlc", changed)
        if not what.startswith("weights"):  # inspect reads no weights
            assert_refused(cli("inspect", path), 2, path.name, needle, baseline=base["inspect"])
        assert_refused(cli("validate", model, path), 2, path.name, needle, baseline=base["validate"])


def test_a_deflated_genuine_dlc_is_read_as_the_stored_one(genuine, tmp_path):
    from onnxbridge.backends.dlc import container, structure

    _, dlc, _ = genuine
    path = write_zip(tmp_path / "deflated.dlc", [(n, deflate(d), 8, size) for n, d, _, size in entries_of(dlc)])
    assert structure.compare(container.read(path), container.read(dlc)) == []
    assert structure.weight_digests(container.read(path)) == structure.weight_digests(container.read(dlc))


@pytest.mark.parametrize("history,needle", [
    (b"[]", "holds a JSON list"), (b"7", "holds a JSON int"), (b"[" * 100_000 + b"]" * 100_000, "is not JSON"),
    (b"\xff\xfe{", "is not JSON"), (b'{"dlcGenerationInfo": 5}', "dlcGenerationInfo"),
    (b'{"dlcGenerationInfo": [3]}', "dlcGenerationInfo"),
    (b'{"dlcGenerationInfo": [{"converterCommand": [1]}]}', "converterCommand"),
    (b'{"dlcGenerationInfo": [{"converterCommand": {"tool": 5}}]}', "converterCommand"),
])
@pytest.mark.fast_cases("7-holds a JSON int")
def test_malformed_metadata_is_refused(genuine, tmp_path, history, needle):
    model, dlc, base = genuine
    entries = [e for e in entries_of(dlc) if not e[0].startswith("dlc.metadata.history")]
    path = write_zip(tmp_path / "meta.dlc", [*entries, ("dlc.metadata.history.2.3.0", history, 0, len(history))])
    assert_refused(cli("inspect", path), 2, "meta.dlc", needle, baseline=base["inspect"])
    if history == b"[]":
        assert_refused(cli("validate", model, path), 2, "meta.dlc", needle, baseline=base["validate"])


def _dlc_mutants(dlc: Path, folder: Path) -> list[Path]:
    """``DLC_MUTANTS`` seeded mutants: flipped bytes, cuts, redirected FlatBuffer offsets, tampered ZIP entries."""
    from onnxbridge.backends.dlc import container

    rng = random.Random(0)
    raw = dlc.read_bytes()
    entries = entries_of(dlc)
    start, size, _ = container.read(dlc).spans["model"]

    def flip(data: bytes, lo: int = 0, hi: int | None = None) -> bytes:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(lo, hi or len(out))] = rng.randrange(256)
        return bytes(out)

    def redirect(data: bytes) -> bytes:  # a u32 of the FlatBuffer pointed at another object, or far away
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = start + 8 + 4 * rng.randrange((size - 12) // 4)
            target = start + 8 + 4 * rng.randrange((size - 8) // 4)
            struct.pack_into("<I", out, at, (target - at) % 2**32 if rng.random() < 0.8 else rng.randrange(2**32))
        return bytes(out)

    def tamper() -> list:
        name, data, method, declared = rng.choice(entries)
        kind = rng.randrange(7)
        if kind == 0:
            return replaced(entries, name, data, method, rng.choice([0, declared // 2, declared + 1, 2**32 - 1]))
        if kind == 1:
            return replaced(entries, name, deflate(data), 8, declared)
        if kind == 2:
            return replaced(entries, name, deflate(data), 8, rng.choice([0, declared - 1, declared * 100]))
        if kind == 3:
            return [e for e in entries if e[0] != name]
        if kind == 4:
            return [*entries, (name, flip(data), method, declared)]
        if kind == 5:
            value = rng.choice([b"null", b"[{}]", b'{"dlcGenerationInfo": {}}', b'"x"', b"{" * 5000, b"1e999"])
            return replaced(entries, "dlc.metadata.history.2.3.0", value)
        return replaced(entries, name, data, 8, declared)  # stored bytes said to be deflated

    made = []
    for i in range(DLC_MUTANTS):
        path = folder / f"mutant{i:02d}.dlc"
        kind = i % 5
        if kind == 0:
            path.write_bytes(flip(raw))
        elif kind == 1:
            path.write_bytes(flip(raw, start, start + size))
        elif kind == 2:
            path.write_bytes(raw[:rng.randrange(len(raw))])
        elif kind == 3:
            path.write_bytes(redirect(raw))
        else:
            write_zip(path, tamper())
        made.append(path)
    return made


@pytest.mark.slow
def test_dlc_mini_fuzz(genuine, tmp_path):
    """Seeded mutants of a genuine DLC, read as inspect and validate read them: each is refused (exit 2) or read,
    in bounded time, and none ends in another exception or a signal."""
    _, dlc, _ = genuine
    mutants = _dlc_mutants(dlc, tmp_path)
    results = run_batch("dlc", [(p.name, [p, dlc]) for p in mutants], tmp_path)
    assert_no_crash(results, (0, 2))
    refused = [r for r in results.values() if r["code"] == 2]
    assert all(r["label"] in r["line"] for r in refused), [r for r in refused if r["label"] not in r["line"]]
    assert len(refused) > DLC_MUTANTS // 2  # the mutants reach the reader's checks, not only its happy path


# --- TensorRT: engines and sidecars ---------------------------------------------------------------------------------

def fake_engine(path: Path, size: int = 4096) -> Path:
    """A file with a TensorRT-RTX engine header (magic, header version 2, the size) and filler."""
    head = struct.pack("<4sIIIQ", b"vtrt", 0, 2, 0, size)
    path.write_bytes(head + bytes(random.Random(size).randrange(256) for _ in range(size - len(head))))
    return path


SIDECAR_FACTS = {"flavour": "tensorrt-rtx", "version": "1.7.1.116", "api": "tensorrt 11", "precision": "fp32",
                 "precision_in": "fp32 graph", "opset": 17, "workspace_mb": None, "network_layers": 2,
                 "profiles": {"x": {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8],
                                    "origin": "--shapes"}},
                 "inputs": [{"name": "x", "shape": [-1, 3, 8, 8], "dtype": "float"}],
                 "outputs": [{"name": "y", "shape": [-1, 4, 8, 8], "dtype": "float"}]}


@pytest.fixture(scope="module")
def engine_pair(tmp_path_factory):
    """An ONNX model, a fake engine with the sidecar our build writes for it, and what inspecting them costs."""
    from onnxbridge.backends.tensorrt import artifact

    folder = tmp_path_factory.mktemp("engine")
    path = fake_engine(folder / "m.engine")
    artifact.write(path, path.read_bytes(), SIDECAR_FACTS)
    base = cli("inspect", path, "--json")
    assert base["code"] == 0 and '"source": "sidecar written at build time' in base["output"], base
    return conv_relu(folder / "m.onnx"), path, base


def _sidecar(engine: Path, **changes) -> dict:
    side = json.loads(Path(f"{engine}.json").read_text())
    side.update(changes)
    return {k: v for k, v in side.items() if v is not ...}


HOSTILE_SIDECARS = {
    "a JSON list": ("[]", "holds a JSON list"),
    "an int": ("7", "holds a JSON int"),
    "100,000-deep arrays": ("[" * 100_000 + "]" * 100_000, "not readable JSON"),
    "100,000-deep objects": ('{"a":' * 100_000 + "1" + "}" * 100_000, "not readable JSON"),
    "not JSON": ('{"format": ', "not readable JSON"),
    "a 5000-digit number": ('{"format": ' + "9" * 5000 + "}", "not readable JSON"),
    "over 16 MiB": (" " * (17 << 20) + "{}", "not a sidecar"),
    "no inputs": (dict(inputs=...), "field 'inputs' is missing"),
    "a string for a list": (dict(inputs="x"), "field 'inputs' is wrong"),
    "strings for dims": (dict(outputs=[{"name": "y", "shape": ["N", 4], "dtype": "float"}]), "'outputs' is wrong"),
    "a negative dim": (dict(inputs=[{"name": "x", "shape": [-5, 3], "dtype": "float"}]), "'inputs' is wrong"),
    "a huge dim": (dict(inputs=[{"name": "x", "shape": [10**30], "dtype": "float"}]), "'inputs' is wrong"),
    "NaN": (dict(opset=math.nan), "field 'opset' is wrong"),
    "a string for an int": (dict(network_layers="2"), "'network_layers' is wrong"),
    "an unknown flavour": (dict(flavour=["x"]), "'flavour' is wrong"),
    "a profile as a list": (dict(profiles=[1, 2]), "'profiles' is wrong"),
    "an inverted profile": (dict(profiles={"x": {"min": [4], "opt": [2], "max": [1]}}), "'profiles' is wrong"),
}


@pytest.mark.parametrize("what", list(HOSTILE_SIDECARS))
@pytest.mark.fast_cases("an unknown flavour")
def test_a_hostile_sidecar_is_refused(engine_pair, tmp_path, what):
    """The sidecar matches the engine's size and SHA-256 (or cannot be read at all), so it is checked, and
    refused; validate refuses it before any hop."""
    model, genuine_engine, base = engine_pair
    engine = tmp_path / "e.engine"
    engine.write_bytes(genuine_engine.read_bytes())
    text, needle = HOSTILE_SIDECARS[what]
    if isinstance(text, dict):
        text = json.dumps(_sidecar(genuine_engine, **text))
    Path(f"{engine}.json").write_text(text)
    assert_refused(cli("inspect", engine), 2, "e.engine.json", needle, baseline=base)
    if what in ("a JSON list", "100,000-deep arrays", "strings for dims"):
        assert_refused(cli("validate", model, engine), 2, "e.engine.json", needle)


@pytest.mark.parametrize("what", ["empty", "two bytes", "random bytes", "truncated", "padded"])
def test_a_garbage_engine_is_refused(engine_pair, tmp_path, what):
    model, genuine_engine, base = engine_pair
    data = genuine_engine.read_bytes()
    engine = tmp_path / "g.engine"
    engine.write_bytes({"empty": b"", "two bytes": data[:2], "random bytes": random.Random(1).randbytes(5000),
                        "truncated": data[:1000], "padded": data + b"\0"}[what])
    needle = "truncated or altered" if what in ("truncated", "padded") else "not a serialized TensorRT engine"
    assert_refused(cli("inspect", engine), 2, "g.engine", needle, baseline=base)
    if what == "truncated":
        assert_refused(cli("validate", model, engine), 2, "g.engine", needle)


def test_an_engine_no_runtime_here_can_open_is_a_skipped_hop(engine_pair, tmp_path):
    """An engine header with garbage behind it: nothing here can tell it from an engine for another GPU, so the
    hop is skipped, never passed and never an internal error."""
    model, _, _ = engine_pair
    engine = fake_engine(tmp_path / "x.engine")
    res = cli("validate", model, engine, "--report", tmp_path / "r.json")
    assert res["code"] in (5, 2) and "Traceback" not in res["output"] and "internal error" not in res["output"], res
    if res["code"] == 5:  # skipped: validation incomplete
        hop = json.loads((tmp_path / "r.json").read_text())["hops"][-1]
        assert hop["status"] == "skipped" and not hop["passed"], hop


def _sidecar_mutants(engine: Path, folder: Path) -> list[Path]:
    """``SIDECAR_MUTANTS`` seeded mutants of a genuine sidecar: fields dropped, retyped or set to odd values,
    the text cut or flipped; each beside its own copy of the engine."""
    rng = random.Random(0)
    good = json.loads(Path(f"{engine}.json").read_text())
    odd = [None, True, -1, 2**64, 1.5, math.inf, "", "x" * 1000, [], {}, [[[]]], [-2, 3], {"min": [1]}]
    made = []
    for i in range(SIDECAR_MUTANTS):
        side = json.loads(json.dumps(good))
        key = rng.choice(sorted(side))
        if i % 4 == 0:
            del side[key]
        elif i % 4 == 1:
            side[key] = rng.choice(odd)
        elif i % 4 == 2:
            row = rng.choice(side["inputs"] + side["outputs"])
            row[rng.choice(["name", "shape", "dtype"])] = rng.choice(odd)
        text = json.dumps(side)
        if i % 4 == 3:
            at = rng.randrange(len(text))
            text = text[:at] + (chr(rng.randrange(32, 127)) + text[at + 1:] if rng.random() < 0.5 else "")
        copy = folder / f"mutant{i:02d}.engine"
        copy.write_bytes(engine.read_bytes())
        Path(f"{copy}.json").write_text(text)
        made.append(copy)
    return made


def test_sidecar_mini_fuzz(engine_pair, tmp_path):
    _, engine, _ = engine_pair
    mutants = _sidecar_mutants(engine, tmp_path)
    results = run_batch("engine", [(p.name, [p]) for p in mutants], tmp_path)
    assert_no_crash(results, (0, 2))
    assert sum(r["code"] == 2 for r in results.values()) >= SIDECAR_MUTANTS // 2


# --- malformed ONNX models for check --targets dlc,tensorrt ----------------------------------------------------------

def _onnx_mutants(folder: Path) -> dict[str, Path]:
    """The mutations of the brief: truncated, wrong dtypes, missing initializers, cycles, duplicate names, empty
    graph, extreme opsets and dims, nested If/Loop, a node without outputs."""
    base = onnx.load(conv_relu(folder / "base.onnx", batch=1))
    out = {"truncated": folder / "truncated.onnx"}
    out["truncated"].write_bytes((folder / "base.onnx").read_bytes()[:300])

    def edit(name: str, change) -> None:
        model = onnx.ModelProto()
        model.CopyFrom(base)
        change(model)
        out[name] = folder / f"{name}.onnx"
        out[name].write_bytes(model.SerializeToString())

    g = lambda m: m.graph  # noqa: E731
    edit("input dtype 999", lambda m: setattr(g(m).input[0].type.tensor_type, "elem_type", 999))
    edit("initializer dtype 999", lambda m: setattr(g(m).initializer[0], "data_type", 999))
    edit("string input", lambda m: setattr(g(m).input[0].type.tensor_type, "elem_type", TensorProto.STRING))
    edit("missing initializer", lambda m: g(m).ClearField("initializer"))
    edit("cycle", lambda m: g(m).node[0].input.__setitem__(0, "y"))
    edit("duplicate output", lambda m: g(m).node[1].output.__setitem__(0, "c"))
    edit("duplicate input", lambda m: g(m).input.append(g(m).input[0]))
    edit("empty graph", lambda m: g(m).ClearField("node"))
    edit("opset 1", lambda m: setattr(m.opset_import[0], "version", 1))
    edit("opset 10000", lambda m: setattr(m.opset_import[0], "version", 10000))
    edit("dim 2**32 + 1", lambda m: setattr(g(m).input[0].type.tensor_type.shape.dim[0], "dim_value", 2**32 + 1))
    edit("dims past int64 bytes", lambda m: [setattr(d, "dim_value", v) for d, v in
                                             zip(g(m).input[0].type.tensor_type.shape.dim, [2**31, 3, 2**20, 2**20])])
    edit("node without outputs", lambda m: g(m).node[1].ClearField("output"))

    def nested(m) -> None:  # If in Loop in If ... six deep, each reading the outer scope's x
        inner = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "leaf", [],
                                  [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
        for d in range(6):
            body = helper.make_graph([helper.make_node("Identity", [f"c{d}"], [f"c{d}_out"]),
                                      helper.make_node("If", [f"c{d}"], [f"o{d}"], then_branch=inner,
                                                       else_branch=inner)], f"body{d}",
                                     [helper.make_tensor_value_info(f"i{d}", TensorProto.INT64, []),
                                      helper.make_tensor_value_info(f"c{d}", TensorProto.BOOL, [])],
                                     [helper.make_tensor_value_info(f"c{d}_out", TensorProto.BOOL, []),
                                      helper.make_tensor_value_info(f"o{d}", TensorProto.FLOAT, None)])
            inner = helper.make_graph([helper.make_node("Loop", ["n", "cond"], [f"s{d}"], body=body)], f"g{d}", [],
                                      [helper.make_tensor_value_info(f"s{d}", TensorProto.FLOAT, None)])
        g(m).initializer.extend([numpy_helper.from_array(np.array(2, np.int64), "n"),
                                 numpy_helper.from_array(np.array(True), "cond")])
        g(m).node.append(helper.make_node("If", ["cond"], ["z"], then_branch=inner, else_branch=inner))
        g(m).output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))

    edit("nested If and Loop", nested)
    return out


@pytest.mark.slow
def test_check_on_malformed_onnx_never_crashes(tmp_path):
    """``check --targets dlc,tensorrt`` (the CLI's own function, in one driver; the backends' checks in the
    worker as always): each mutant is refused or its blockers listed, never an internal error or a signal."""
    mutants = _onnx_mutants(tmp_path)
    results = run_batch("check", [(what, [path]) for what, path in mutants.items()], tmp_path)
    assert_no_crash(results, (0, 2))
    assert results["dim 2**32 + 1"]["code"] == 2 and results["node without outputs"]["code"] == 2


def test_tensorrt_never_parses_a_node_without_outputs(tmp_path):
    """TensorRT-RTX's ONNX parser dies of SIGSEGV on a node without outputs: ours refuses the graph first, even
    where the loader would let it through."""
    require("tensorrt_rtx")
    path = _onnx_mutants(tmp_path)["node without outputs"]
    result = run_batch("parse", [("parse", [path])], tmp_path)["parse"]
    assert result["code"] == 2 and "node 'relu' (Relu) has no output" in result["line"], result
