"""Executors: every cell in a process of its own, its failure (raise, SIGKILL, timeout) an ``error`` record with the
reason; the local pool and a local Ray give the same statuses; a Ray worker death is retried once."""
from __future__ import annotations

import importlib.util
import io
import os
import signal
import tarfile
import textwrap
import threading
from pathlib import Path

import pytest

from onnxbridge.errors import BadInputError, UnavailableError
from onnxbridge.matrix.cell import record_from_report, run_cell
from onnxbridge.matrix.cells import Cell
from onnxbridge.matrix.executors import make_executor
from onnxbridge.matrix.local import LocalExecutor, signal_reason

from tests.helpers.extras import require

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")

FACTORIES = textwrap.dedent('''
    import os, signal, time
    from pathlib import Path

    import torch
    from torch import nn

    def good():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval(), (torch.randn(2, 4),)

    def boom():
        raise RuntimeError("factory went boom")

    def killed():
        os.kill(os.getpid(), signal.SIGKILL)

    def slow():
        Path(__file__).with_name("slow.pid").write_text(str(os.getpid()))
        time.sleep(600)

    def dies_once():  # kills the process that started it (a Ray worker) the first time
        marker = Path(__file__).with_name("died.once")
        if not marker.exists():
            marker.write_text("x")
            os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        return good()

    def dies_always():
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
''')


@pytest.fixture(scope="module")
def factories(tmp_path_factory) -> Path:
    require("torch")
    path = tmp_path_factory.mktemp("factories") / "factories.py"
    path.write_text(FACTORIES)
    return path


def cell(factories: Path, fn: str) -> Cell:
    return Cell(fn, "onnx", "fp32", 17, f"{factories}:{fn}", {}, key="")


def run(executor, cells, outdir, **kw) -> dict[str, dict]:
    """Run ``cells``; their records by model, checking each callback came in this thread, started before done."""
    me, seen, records = threading.get_ident(), [], {}

    def started(c: Cell) -> None:
        assert threading.get_ident() == me
        seen.append(c.name)

    def done(record: dict) -> None:
        assert threading.get_ident() == me and record["name"] in seen
        records[record["model"]] = record

    executor.run(cells, outdir, done, started=started, **kw)
    assert sorted(seen) == sorted(c.name for c in cells) and len(records) == len(cells)
    return records


def plant_stale(outdir: Path, c: Cell) -> Path:
    """What a passing earlier run left in the cell's folder."""
    folder = outdir / c.name
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"stale")
    (folder / "report.json").write_text('{"status": "passed"}')
    return folder


def check_three(records: dict, outdir: Path, stale: Path) -> None:
    good = records["good"]
    assert good["status"] == "passed" and good["reason"] is None and good["seconds"] > 0
    assert good["artifact"] == "good/onnx-fp32-opset17/model.onnx" and (outdir / good["artifact"]).is_file()
    assert (outdir / good["report"]).is_file() and good["worst"]["hop"] == "torch -> onnx"
    assert good["worst"]["max_abs"] < 1e-4
    boom = records["boom"]
    assert boom["status"] == "error" and boom["reason"].startswith("BadInputError: ")
    assert "RuntimeError: factory went boom" in boom["reason"] and "\n" not in boom["reason"]
    assert boom["artifact"] is None and boom["report"] is None
    assert sorted(p.name for p in stale.iterdir()) == ["cell.log"]  # the earlier run's artifact is gone
    killed = records["killed"]
    assert killed["status"] == "error" and killed["reason"].startswith("killed by SIGKILL")
    assert killed["artifact"] is None and killed["worst"] is None


def check_timed_out(record: dict, factories: Path) -> None:
    assert record["status"] == "error" and record["reason"] == "timed out after 8 s", record
    assert 7 < record["seconds"] < 30
    pid = int(factories.with_name("slow.pid").read_text())
    with pytest.raises(ProcessLookupError):  # the cell's process went with its group
        os.kill(pid, 0)


@pytest.mark.slow
def test_local_executor_statuses(factories, tmp_path):
    cells = [cell(factories, fn) for fn in ("good", "boom", "killed")]
    stale = plant_stale(tmp_path, cells[1])
    check_three(run(LocalExecutor(2), cells, tmp_path), tmp_path, stale)


@pytest.mark.slow
def test_local_executor_timeout_kills_the_cell(factories, tmp_path):
    factories.with_name("slow.pid").unlink(missing_ok=True)
    records = run(LocalExecutor(1), [cell(factories, "slow")], tmp_path, timeout=8)
    check_timed_out(records["slow"], factories)


def test_skipped_cell_is_not_run(factories, tmp_path):
    skipped = Cell("good", "onnx", "fp16", 17, f"{factories}:good", {}, skip="backend onnx does not apply int3")
    records = run(LocalExecutor(1), [skipped], tmp_path)
    assert records["good"]["status"] == "skipped" and records["good"]["reason"].endswith("int3")
    assert records["good"]["artifact"] is None


def test_duplicate_cell_names_refused(factories, tmp_path):
    with pytest.raises(BadInputError, match="two cells"):
        LocalExecutor(1).run([cell(factories, "good")] * 2, tmp_path, lambda r: None)


def _report(hops: list[dict], status: str, introduced_by: str | None = None) -> dict:
    return {"status": status, "hops": hops, "introduced_by": introduced_by}


def _out(name: str, max_abs: float, passed: bool = True) -> dict:
    return {"name": name, "max_abs": max_abs, "max_rel": max_abs, "cosine": 1.0, "passed": passed,
            "required_atol": max_abs}


def test_report_statuses_map_to_records(tmp_path):
    c = Cell("m", "tensorrt", "fp16", 17, "f.py:m", {})
    skipped = _report([{"from": "torch", "to": "onnx", "status": "passed", "outputs": [_out("y", 1e-6)]},
                       {"from": "onnx", "to": "tensorrt", "status": "skipped", "outputs": [],
                        "skipped_reason": "no CUDA GPU"}], "skipped")
    record = record_from_report(c, skipped, tmp_path, tmp_path / c.name / "model.engine")
    assert record["status"] == "skipped" and record["reason"] == "no CUDA GPU"
    assert record["worst"]["output"] == "y" and record["artifact"] is None and record["report"] is None
    failed = _report([{"from": "torch", "to": "onnx", "status": "passed", "outputs": [_out("y", 0.5), _out("z", 1e-6)],
                       "errors": []},
                      {"from": "onnx", "to": "tensorrt", "status": "failed", "errors": [],
                       "outputs": [_out("y", 0.1, False), _out("z", 0.3, False)]}], "failed", "onnx -> tensorrt")
    record = record_from_report(c, failed, tmp_path, None)
    assert record["status"] == "failed" and "onnx -> tensorrt" in record["reason"]
    assert record["worst"] == {"hop": "onnx -> tensorrt", "output": "z", "max_abs": 0.3, "max_rel": 0.3,
                               "cosine": 1.0}
    passed = _report([{"from": "torch", "to": "onnx", "status": "passed", "outputs": [_out("y", 2e-6),
                                                                                      _out("z", 3e-6)]}], "passed")
    assert record_from_report(c, passed, tmp_path, None)["worst"]["output"] == "z"


def test_run_cell_never_raises(tmp_path):
    record = run_cell(Cell("m", "onnx", "fp32", 17, str(tmp_path / "missing.py:f"), {}), tmp_path)
    assert record["status"] == "error" and "does not exist" in record["reason"]
    escaping = run_cell(Cell("..", "onnx", "fp32", 17, "f.py:m", {}), tmp_path / "out")
    assert escaping["status"] == "error" and "ValueError" in escaping["reason"]


def test_signals_named():
    assert signal_reason(-signal.SIGKILL) == "killed by SIGKILL"
    assert signal_reason(-signal.SIGSEGV) == "crashed with SIGSEGV"
    assert signal_reason(-signal.SIGABRT) == "crashed with SIGABRT"


def test_make_executor(monkeypatch):
    assert make_executor("local", workers=3).describe() == {"kind": "local", "workers": 3, "address": None}
    with pytest.raises(BadInputError, match="unknown executor 'dask'"):
        make_executor("dask")
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if not installed
    with pytest.raises(UnavailableError) as info:
        make_executor("ray")
    assert "pip install 'onnxbridge[ray]'" in info.value.one_line()


def _tar(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, linkname
        data = b"x" if kind == tarfile.REGTYPE else b""
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("name,kind,link", [("../evil", tarfile.REGTYPE, ""), ("/abs", tarfile.REGTYPE, ""),
                                            ("a/../../b", tarfile.REGTYPE, ""), ("l", tarfile.SYMTYPE, "/etc")])
def test_unpack_refuses_escaping_members(tmp_path, name, kind, link):
    from onnxbridge.matrix.ray_executor import pack, unpack

    folder = tmp_path / "cell"
    folder.mkdir()
    (folder / "kept").write_text("old")
    with pytest.raises(ValueError):
        unpack([_tar(name, kind, link)], folder)
    assert (folder / "kept").read_text() == "old"  # refused before anything changed
    src = tmp_path / "src"
    (src / "model.mlpackage").mkdir(parents=True)
    (src / "model.mlpackage" / "w.bin").write_text("w")
    unpack(pack(src), folder)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["model.mlpackage",
                                                                                   "model.mlpackage/w.bin"]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (2 CPUs); RayExecutor uses it as it is."""
    ray = require("ray")
    from onnxbridge.matrix.ray_executor import start_local_ray

    start_local_ray(2)
    yield ray
    ray.shutdown()


@needs_ray
@pytest.mark.slow
def test_ray_executor_same_statuses(local_ray, factories, tmp_path):
    from onnxbridge.matrix.ray_executor import RayExecutor

    cells = [cell(factories, fn) for fn in ("good", "boom", "killed")]
    stale = plant_stale(tmp_path, cells[1])
    executor = RayExecutor(2)
    check_three(run(executor, cells, tmp_path), tmp_path, stale)
    factories.with_name("slow.pid").unlink(missing_ok=True)
    check_timed_out(run(executor, [cell(factories, "slow")], tmp_path, timeout=8)["slow"], factories)
    assert local_ray.is_initialized()  # a Ray it did not start is left running


@needs_ray
@pytest.mark.slow
def test_ray_worker_death_retried_once(local_ray, factories, tmp_path):
    from onnxbridge.matrix.ray_executor import RayExecutor

    factories.with_name("died.once").unlink(missing_ok=True)
    records = run(RayExecutor(2), [cell(factories, "dies_once"), cell(factories, "dies_always")], tmp_path)
    assert records["dies_once"]["status"] == "passed"
    assert (tmp_path / records["dies_once"]["artifact"]).is_file()
    always = records["dies_always"]
    assert always["status"] == "error" and "died (retried once)" in always["reason"]
    assert "WorkerCrashedError" in always["reason"]
