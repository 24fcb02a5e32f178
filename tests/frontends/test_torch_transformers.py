"""The transformer-family models of examples/transformers.py export to ONNX at opset 17 with dynamic axes and match
torch at every validated size; benchmarks/backend_coverage.py runs end to end on a slice of the node suite."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys

import onnx
import pytest

from tests.conftest import ROOT
from tests.helpers.extras import require

require("torch")
from examples.transformers import MODELS, dynamic_axes  # noqa: E402


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.fast_cases("wav2vec2_features")
def test_model_exports_with_dynamic_axes(name, tmp_path):
    import onnxbridge

    out = tmp_path / f"{name}.onnx"
    specs = dynamic_axes(name)
    result = onnxbridge.convert(f"{ROOT / 'examples' / 'transformers.py'}:{name}", output=out, opset=17,
                                dynamic=specs, exporter="torchscript")
    assert result.report["status"] == "passed", result.report["hops"]
    hop = result.report["hops"][0]
    assert hop["passed"] and hop["samples"] >= 4, hop["notes"]  # the sample, grown by one, the min and max sizes
    assert not hop["notes"]  # no size skipped (torch itself failing at a size shows here)
    model = onnx.load(out)
    assert model.opset_import[0].version == 17
    dims = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    for spec in specs:
        inp, axis, label = spec.split(":")[:3]
        assert dims[inp][int(axis)] == label, dims  # the axis stayed symbolic in the file


@pytest.mark.slow
def test_coverage_benchmark_smoke(tmp_path):
    out = tmp_path / "coverage.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "backend_coverage.py"), "--limit", "20",
                           "--no-models", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert set(data["node"]["backends"]) == {"coreml", "dlc"}
    for counts in data["node"]["counts"].values():
        assert set(counts) == {"ok", "refused", "failed", "crashed"}
        assert sum(counts.values()) == data["node"]["eligible"] == 20
    rows = data["node"]["cases"]
    assert len(rows) == 40 and all(r["outcome"] in ("ok", "refused", "failed", "crashed") for r in rows)
    assert sum(r["outcome"] == "ok" for r in rows) > 0  # a backend that converts nothing is a broken run


@pytest.fixture
def coverage():
    """benchmarks/backend_coverage.py as a module."""
    spec = importlib.util.spec_from_file_location("backend_coverage", ROOT / "benchmarks" / "backend_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_coverage_counts_a_native_crash(coverage, monkeypatch):
    """A backend whose native code kills the worker is counted as crashed, with the step named, not raised."""
    from onnxbridge import worker
    from onnxbridge.plugins import BACKENDS
    from onnxbridge.registry import Plugin

    plugin = Plugin("crashy", "tests.helpers.crashing_backend", requires=("onnx",))
    monkeypatch.setitem(BACKENDS._plugins, "crashy", plugin)
    monkeypatch.setenv("CRASH_AT", "build")
    worker.shutdown()  # a worker reads CRASH_AT from the environment it started with
    try:
        case = next(d for d in coverage.node_dirs("^test_abs$"))
        (row,) = coverage.run_node_case(case, backends=("crashy",))
    finally:
        worker.shutdown()
    assert (row["outcome"], row["check"], row["op"]) == ("crashed", "clear", "Abs")
    assert "SIGSEGV" in row["detail"] and "crashy" in row["detail"]


def test_coverage_classifies_outcomes(coverage):
    from onnxbridge.errors import BadInputError, UnavailableError, ValidationFailed, WorkerError

    def raising(exc):
        def convert():
            raise exc
        return convert

    assert coverage.classify(lambda: {"status": "passed"}) == ("ok", "")
    assert coverage.classify(lambda: {"status": "failed", "hops": [{"errors": ["max abs 3.0\nmore"]}]}) == \
        ("failed", "max abs 3.0")
    assert coverage.classify(lambda: {"status": "skipped", "hops": [{"notes": ["no simulator"]}]}) == \
        ("refused", "not validated: no simulator")
    numbers = {"status": "failed", "hops": [{"from": "onnx", "to": "dlc", "errors": [],
                                             "outputs": [{"name": "y", "passed": False, "max_abs": 0.5}]}]}
    assert coverage.classify(lambda: numbers) == ("failed", "onnx -> dlc: output y max abs 0.5")
    assert coverage.classify(raising(ValidationFailed("numbers differ")))[0] == "failed"
    assert coverage.classify(raising(BadInputError("no")))[0] == "refused"
    assert coverage.classify(raising(UnavailableError("no toolchain")))[0] == "refused"
    assert coverage.classify(raising(WorkerError("bug")))[0] == "crashed"
    outcome, detail = coverage.classify(raising(KeyError("x")))
    assert outcome == "crashed" and detail.startswith("KeyError") and "test_torch_transformers.py" in detail


def _killed(name: str, variant: str) -> list[dict]:
    os.kill(os.getpid(), signal.SIGKILL)
    return []


def _fine(name: str, variant: str) -> list[dict]:
    return [{"model": name, "variant": variant, "outcome": "ok", "detail": "", "seconds": 0}]


def test_coverage_counts_a_dead_worker_process(coverage):
    """A task that kills its pool process is counted as crashed; the tasks beside it still run."""
    tasks = [(_fine, "a", "v"), (_killed, "b", "v"), (_fine, "c", "v"), (_fine, "d", "v")]
    rows = coverage.run_all(tasks, jobs=2)
    assert sorted((r["model"], r["outcome"]) for r in rows) == [("a", "ok"), ("b", "crashed"), ("c", "ok"),
                                                               ("d", "ok")]
