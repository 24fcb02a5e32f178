"""Native code behind a process boundary: a crash in onnxruntime, a backend's build or its runner is an error
naming the step and the library (exit 4), no artifact is left at the output path, and the next run works."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.plugins import BACKENDS
from onnxbridge.errors import NativeCrash
from onnxbridge.registry import Plugin
from tests.conftest import ROOT, assert_one_line_error
from tests.helpers.extras import requires

FACTORY = str(ROOT / "examples" / "models.py")


@pytest.fixture
def crashy(monkeypatch):
    """The backend in tests/helpers/crashing_backend.py, registered as 'crashy' (CRASH_AT plants the crash)."""
    from onnxbridge import worker

    plugin = Plugin("crashy", "tests.helpers.crashing_backend", requires=("onnx",))
    monkeypatch.setitem(BACKENDS._plugins, "crashy", plugin)

    def plant(where: str) -> None:
        monkeypatch.setenv("CRASH_AT", where)
        worker.shutdown()  # a worker reads CRASH_AT from the environment it started with

    yield plant
    worker.shutdown()


@pytest.mark.parametrize("where, signal_name, step, library", [
    ("build", "SIGSEGV", "building the crashy model m.crash", "onnx 1."),  # the plugin's requirements
    ("session", "SIGABRT", "the crashy runner of m.crash", "libcrashy 1.0"),  # what its runner says it runs
    ("run", "SIGSEGV", "running the crashy runner of m.crash", "libcrashy 1.0"),
])
@pytest.mark.fast_cases("build-SIGSEGV-building the crashy model m.crash-onnx 1.")
@requires("torch")
def test_a_crash_in_a_backend_is_exit_4_and_leaves_no_artifact(crashy, cli, tmp_path, where, signal_name, step,
                                                               library):
    crashy(where)
    out = tmp_path / "m.crash"
    res = cli("convert", FACTORY + ":cnn", "--to", "crashy", "-o", out, "--report", tmp_path / "r.json")
    err = assert_one_line_error(res, 4, step, library, signal_name)
    assert "crashed" in err
    assert not out.exists() and not (tmp_path / "r.json").exists()
    assert list(tmp_path.iterdir()) == []  # no temp files left either


@pytest.mark.slow
@requires("torch")
def test_a_crash_in_a_check_is_exit_4(crashy, cli, tmp_path):
    crashy("check")
    model = tmp_path / "m.onnx"
    assert onnxbridge.convert(FACTORY + ":cnn", output=model).passed
    assert_one_line_error(cli("check", model, "--targets", "crashy"), 4, "checking m.onnx for crashy", "SIGABRT")


@pytest.mark.slow
@requires("torch")
def test_the_worker_comes_back_after_a_crash(crashy, tmp_path):
    crashy("session")
    with pytest.raises(NativeCrash):
        onnxbridge.convert(FACTORY + ":cnn", output=tmp_path / "m.crash", to="crashy")
    crashy("nowhere")
    result = onnxbridge.convert(FACTORY + ":cnn", output=tmp_path / "m.crash", to="crashy")
    assert result.passed and (tmp_path / "m.crash").exists()
    hop = result.report["hops"][-1]
    assert hop["to"] == "crashy" and hop["status"] == "passed"


def test_onnxruntime_crashing_on_a_file_is_exit_4(cli, tmp_path):
    """An fp16 Transpose -> MatMul graph segfaults onnxruntime (1.24-1.32, x86-64) while it makes a default
    session (microsoft/onnxruntime#28392): validating such a file is an error naming onnxruntime, not a dead run."""
    bad = tmp_path / "crashes_ort.onnx"
    onnx.save(_transpose_matmul(TensorProto.FLOAT16), bad)
    out = subprocess.run([sys.executable, "-c", "import onnxruntime as o; o.InferenceSession(%r)" % str(bad)],
                         capture_output=True)
    if out.returncode >= 0:
        pytest.skip("this onnxruntime does not crash on the pattern any more")
    model = tmp_path / "src.onnx"
    onnx.save(_transpose_matmul(TensorProto.FLOAT), model)
    res = cli("validate", model, bad)
    assert_one_line_error(res, 4, "the onnxruntime session of crashes_ort.onnx", "onnxruntime 1.", "SIGSEGV")


def _transpose_matmul(dtype: int) -> onnx.ModelProto:
    npd = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2], name="t"),
         helper.make_node("MatMul", ["t", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", dtype, [2, 10, 32])], [helper.make_tensor_value_info("y", dtype, [10, 2, 8])],
        [numpy_helper.from_array(np.ones((32, 8), npd) / 32, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_cli_never_ends_in_a_signal_on_that_file(tmp_path):
    """The whole command in a real process: exit 4 and one line, never 139."""
    bad = tmp_path / "crashes_ort.onnx"
    onnx.save(_transpose_matmul(TensorProto.FLOAT16), bad)
    exe = [sys.executable, "-m", "onnxbridge.cli.main"]
    res = subprocess.run([*exe, "adapt", str(bad), "-o", str(tmp_path / "out.onnx"), "--opset", "18"],
                         capture_output=True, text=True, env={**os.environ, "ONNXBRIDGE_IN_PROCESS": "0"})
    assert res.returncode in (0, 4), (res.returncode, res.stderr)
    if res.returncode == 4:
        assert res.stderr.startswith("error:") and "crashed" in res.stderr
        assert not (tmp_path / "out.onnx").exists()


@pytest.mark.slow
@requires("torch")
def test_sessions_are_freed_when_a_run_ends(tmp_path):
    """The worker holds a run's sessions (models in memory) only while the run needs them."""
    from onnxbridge import worker

    model = tmp_path / "m.onnx"
    assert onnxbridge.convert(FACTORY + ":cnn", output=model).passed
    assert onnxbridge.validate(FACTORY + ":cnn", model)["status"] == "passed"
    assert worker.call("onnxbridge.worker:held", step="counting runners") == 0
