"""Conversion memory and exit: nothing keeps the exported weights alive, the worker's onnxruntime session reads a
file's weights in place (no parsed copy beside them), and the console script exits without the interpreter's
teardown yet with its exit handlers run (the worker stopped) and its exit codes kept."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import uuid
import weakref
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.extras import requires

FACTORY = '''
import torch

def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).eval(), \\
        (torch.randn(2, 64),)
'''


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.slow
@requires("torch")
def test_no_weights_outlive_a_dynamo_conversion(validate, tmp_path, monkeypatch):
    """torch's dynamo export runs onnxscript's rewrite rules, module-level objects that kept the last graph (and
    every weight in it) until the next export; after a conversion nothing of the source model may stay alive."""
    import onnxbridge
    from onnxbridge.frontends.pytorch import model as torch_model

    factory = tmp_path / "small.py"
    factory.write_text(FACTORY)
    params: list[weakref.ref] = []
    export = torch_model.TorchModel.export

    def spying_export(self, workdir, **kwargs):
        params.extend(weakref.ref(p) for p in self.module.parameters())
        return export(self, workdir, **kwargs)

    monkeypatch.setattr(torch_model.TorchModel, "export", spying_export)
    result = onnxbridge.convert(f"{factory}:build", output=tmp_path / "m.onnx", exporter="dynamo",
                                validate=validate)
    assert result.report["status"] == ("passed" if validate else "skipped")
    del result
    gc.collect()
    assert params and not any(p() is not None for p in params), "the source model's weights are still alive"
    sys.modules.pop(next((k for k, m in sys.modules.items() if getattr(m, "__file__", None) == str(factory)), ""), None)


@pytest.mark.slow
def test_forget_rewriter_matches_drops_the_last_graph():
    import onnx_ir as ir
    from onnx import TensorProto, helper
    from onnxscript import rewriter

    from onnxbridge.optimize import forget_rewriter_matches

    graph = helper.make_graph([helper.make_node("Mul", ["x", "one"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    rewriter.RewritePass(rewriter._DEFAULT_REWRITE_RULES)(model)
    held = weakref.ref(model.graph)
    del model
    gc.collect()
    if held() is None:
        pytest.skip("this onnxscript's rules keep no graph: nothing to forget")
    forget_rewriter_matches()
    gc.collect()
    assert held() is None


def _worker_peak_mb() -> float:
    from onnxbridge import worker

    pid = worker.worker().proc.pid
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the worker's peak memory from /proc")
@pytest.mark.slow
def test_the_worker_reads_a_files_weights_in_place(tmp_path):
    """y = Gather(W, idx) with 192 MiB of W inline in the file: the worker used to parse the file twice and
    onnxruntime read it again (3-4 copies at its peak); read in place, onnxruntime maps W and touches the rows the
    run gathers."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxbridge import runtime, worker

    rows = 48 * 2**10  # x 1024 float32: 192 MiB
    w = np.random.default_rng(0).standard_normal((rows, 1024), dtype=np.float32)
    graph = helper.make_graph([helper.make_node("Gather", ["w", "idx"], ["y"])], "g",
                              [helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1024])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "gather.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                       ir_version=8).SerializeToString())
    del graph
    worker.shutdown()
    worker.prewarm()
    baseline = _worker_peak_mb()
    session = runtime.open(path)
    idx = np.array([0, 7, rows // 2, rows - 1], np.int64)
    np.testing.assert_array_equal(session({"idx": idx})[0], w[idx])  # the file's weights, as they are
    grown = _worker_peak_mb() - baseline
    del session
    worker.shutdown()
    assert grown < 0.75 * 192, f"the worker grew by {grown:.0f} MB for a model holding 192 MiB of weights"


def _workers_marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes() and \
                    b"onnxbridge.worker" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the worker through /proc")
def test_the_console_script_exits_fast_with_its_handlers_run(tmp_path):
    """The CLI skips the interpreter's teardown (os._exit) but first runs its exit handlers: the worker it started
    is gone when it returns, and exit codes are unchanged."""
    from onnx import TensorProto, helper

    exe = Path(sys.executable).with_name("onnxbridge")
    if not exe.exists():
        pytest.skip("no onnxbridge console script beside this interpreter")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = tmp_path / "relu.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                        ir_version=8).SerializeToString())
    marker = f"ONNXBRIDGE_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    out = subprocess.run([str(exe), "-q", "convert", str(model), "-o", str(tmp_path / "out.onnx"), "--report",
                          str(tmp_path / "r.json")], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r.json").read_text().count("schema_version") == 1  # written whole before the exit
    assert not _workers_marked(marker), "the worker outlived the command"
    bad = subprocess.run([str(exe), "convert", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.onnx")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error:")
