"""Paddle frontend: live Layers with InputSpecs or arrays, jit.save'd PIR (.json) and legacy (.pdmodel)
inference models, converted with paddle2onnx in a child process, compared with Paddle itself."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import onnxbridge
from tests.conftest import ROOT, assert_one_line_error, check_report
from tests.frontends.paddle.conftest import TwoInputs

paddle = pytest.importorskip("paddle")


def _digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("opset", [13, 17, None])
def test_layer_with_input_spec(net, tmp_path, opset):
    """The plain paddle.onnx.export route fails here ("requires `x` arguments"); names come from forward."""
    net.train()
    weights = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32")]  # no name: forward's parameter is used
    rep = onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=opset, report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    assert rep["status"] == "passed", rep
    assert rep["artifact"]["opset"] == (opset or 17)
    assert [s["image"] for s in rep["inputs"]["samples"]] == [[2, 3, 16, 16], [3, 3, 16, 16]]
    model = onnx.load(tmp_path / "n.onnx")
    assert [i.name for i in model.graph.input] == ["image"] and [o.name for o in model.graph.output] == ["output"]
    assert net.training and net.bn.training  # the caller's mode is restored
    assert all(np.array_equal(v.numpy(), weights[k]) for k, v in net.state_dict().items())


def test_layer_with_arrays_and_dynamic_batch(tmp_path):
    a = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    b = np.ones((3, 5), "float32")
    rep = onnxbridge.convert(TwoInputs(), (a, b), output=tmp_path / "t.onnx", opset=17,
                             dynamic=["a:0:batch", "b:0:batch"], output_names=["score", "gate"]).report
    assert rep["status"] == "passed", rep
    assert [i["name"] for i in rep["source"]["inputs"]] == ["a", "b"]
    assert [o["name"] for o in rep["hops"][0]["outputs"]] == ["score", "gate"]
    assert rep["inputs"]["samples"][1] == {"a": [4, 4], "b": [4, 5]}


def test_opset_above_paddle2onnx_is_adapted(net, tmp_path):
    spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", "image")]
    rep = onnxbridge.convert(net, spec, output=tmp_path / "n22.onnx", opset=22).report
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == 22
    assert any("paddle2onnx exported at opset 21" in n for n in rep["notes"])


@pytest.mark.parametrize("which, name", [("pir", "convnet.json"), ("legacy", "mlp.pdmodel"), ("two", "two.json"),
                                         ("legacy", None)], ids=["pir", "pdmodel", "two-inputs", "folder"])
@pytest.mark.parametrize("opset", [13, 17])
def test_inference_models_through_the_cli(cli, paddle_files, tmp_path, which, name, opset):
    folder = paddle_files / which
    before = _digest(folder)
    src = folder / name if name else folder
    res = cli("convert", src, "-o", tmp_path / "m.onnx", "--opset", opset, "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == opset
    assert rep["source"]["kind"].startswith("Paddle inference model")
    assert rep["environment"]["packages"]["paddlepaddle"] and rep["environment"]["packages"]["paddle2onnx"]
    assert len(rep["inputs"]["samples"]) == 2  # the saved -1 batch is validated at a second size
    assert _digest(folder) == before  # nothing written beside the user's files


def test_missing_params(cli, paddle_files, tmp_path):
    out = tmp_path / "x.onnx"
    assert_one_line_error(cli("convert", paddle_files / "lonely" / "model.pdmodel", "-o", out), 2,
                          "model.pdiparams", "missing")
    assert not out.exists()


def test_corrupt_model(cli, paddle_files, tmp_path):
    out = tmp_path / "x.onnx"
    assert_one_line_error(cli("convert", paddle_files / "corrupt" / "model.json", "-o", out), 2, "model.json")
    assert not out.exists()


def test_a_paddle2onnx_crash_is_an_error(monkeypatch, net, tmp_path):
    """paddle2onnx aborts the process above opset 21; in the child process that is an ExportError."""
    from onnxbridge.frontends.paddle import convert

    from onnxbridge.errors import ExportError

    monkeypatch.setattr(convert, "MAX_OPSET", 23)
    spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", "image")]
    with pytest.raises(ExportError, match=r"paddle2onnx crashed \(SIGABRT\)"):
        onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=22)
    assert not (tmp_path / "n.onnx").exists()


def test_no_runtime_installs(net, tmp_path):
    """paddle2onnx's save path pip-installs onnx_graphsurgeon to fold constants; ours never installs."""
    import importlib.util

    spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", "image")]
    had = importlib.util.find_spec("onnx_graphsurgeon") is not None
    assert onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=17).passed
    assert (importlib.util.find_spec("onnx_graphsurgeon") is not None) == had


def test_a_wrong_conversion_is_caught(net, tmp_path):
    spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", "image")]
    onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=17)
    from onnxbridge.fileio import iter_tensors

    model = onnx.load(tmp_path / "n.onnx")
    biggest = max(iter_tensors(model), key=lambda t: np.prod(t.dims))  # weights may be Constant nodes
    arr = onnx.numpy_helper.to_array(biggest) * 1.05
    biggest.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), biggest.name))
    onnx.save(model, tmp_path / "bad.onnx")
    assert onnxbridge.validate(net, tmp_path / "bad.onnx", sample_inputs=spec)["status"] == "failed"


def test_bad_live_inputs(net, tmp_path):
    from onnxbridge.errors import BadInputError, ExportError

    with pytest.raises(BadInputError, match="needs sample inputs"):
        onnxbridge.convert(net, output=tmp_path / "n.onnx")
    with pytest.raises(ExportError, match="paddle.jit.save failed"):
        onnxbridge.convert(net, np.ones((2, 5), "float32"), output=tmp_path / "n.onnx")
    assert not (tmp_path / "n.onnx").exists()


def test_doctor_shows_paddle_and_paddle2onnx(cli):
    info = json.loads(cli("doctor", "--json").stdout)
    row = next(p for p in info["plugins"] if p["kind"] == "frontend" and p["name"] == "paddle")
    assert row["available"] and row["versions"]["paddlepaddle"] and row["versions"]["paddle2onnx"]


def test_tensorflow_first_is_a_clear_error(paddle_files, tmp_path):
    """In a process that imported tensorflow, a Paddle source is refused (exit 3), never a segfault."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow not installed")
    code = ("import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; import tensorflow;"
            "from onnxbridge.cli.main import main;"
            "sys.argv = ['onnxbridge', 'convert', sys.argv[1], '-o', sys.argv[2]]; main()")
    proc = subprocess.run([sys.executable, "-c", code, str(paddle_files / "pir" / "convnet.json"),
                           str(tmp_path / "x.onnx")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "error: paddle cannot be imported into a process that has already imported tensorflow" in proc.stderr


def test_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "convert_paddle.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") >= 6
