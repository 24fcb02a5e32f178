"""Paddle frontend: live Layers with InputSpecs or arrays, jit.save'd PIR (.json) and legacy (.pdmodel)
inference models, converted with paddle2onnx in a child process, compared with Paddle itself."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

import onnxbridge
from tests.conftest import ROOT, assert_one_line_error, check_report
from tests.frontends.paddle.conftest import IMAGE, Singular, TwoInputs
from tests.helpers.extras import require

paddle = require("paddle")


def _digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("opset", [13, 17, None])
@pytest.mark.fast_cases("17")
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


@pytest.mark.slow
def test_layer_with_arrays_and_dynamic_batch(tmp_path):
    a = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    b = np.ones((3, 5), "float32")
    rep = onnxbridge.convert(TwoInputs(), (a, b), output=tmp_path / "t.onnx", opset=17,
                             dynamic=["a:0:batch", "b:0:batch"], output_names=["score", "gate"]).report
    assert rep["status"] == "passed", rep
    assert [i["name"] for i in rep["source"]["inputs"]] == ["a", "b"]
    assert [o["name"] for o in rep["hops"][0]["outputs"]] == ["score", "gate"]
    assert rep["inputs"]["samples"][1] == {"a": [4, 4], "b": [4, 5]}


@pytest.mark.parametrize("form", ["tensors", "dict", "dict-of-specs", "input-shapes"])
@pytest.mark.fast_cases("dict-of-specs")
def test_layer_sample_forms(tmp_path, form):
    """Paddle tensors, a dict (any order), a dict of InputSpecs, or only --input-shape + --dynamic: the ONNX
    inputs take forward's names in forward's order, the labels of --dynamic, and two batch sizes pass."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 4)).astype("float32"), rng.standard_normal((2, 5)).astype("float32")
    spec = paddle.static.InputSpec
    sample, shapes = {"tensors": ((paddle.to_tensor(a), paddle.to_tensor(b)), ()),
                      "dict": ({"b": b, "a": a}, ()),
                      "dict-of-specs": ({"b": spec([2, 5]), "a": spec([2, 4])}, ()),
                      "input-shapes": (None, ("a:2,4", "b:2,5"))}[form]
    rep = onnxbridge.convert(TwoInputs(), sample, input_shapes=shapes, output=tmp_path / "t.onnx", opset=13,
                             dynamic=["a:0:batch", "b:0:batch"], report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    assert rep["status"] == "passed", rep
    assert rep["inputs"]["samples"] == [{"a": [2, 4], "b": [2, 5]}, {"a": [3, 4], "b": [3, 5]}]
    model = onnx.load(tmp_path / "t.onnx")
    assert [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input] \
        == [("a", ["batch", 4]), ("b", ["batch", 5])]
    if form != "dict-of-specs":
        assert rep["inputs"]["origin"] == ("sample inputs" if sample is not None else "random(seed=0)")


def test_a_dict_must_name_forward_parameters(tmp_path):
    from onnxbridge.errors import BadInputError

    with pytest.raises(BadInputError, match="not forward's first 2 parameter"):
        onnxbridge.convert(TwoInputs(), {"a": np.ones((2, 4), "float32"), "c": np.ones((2, 5), "float32")},
                           output=tmp_path / "t.onnx")


@pytest.mark.slow
def test_opset_below_paddle2onnx_is_adapted(tmp_path):
    """paddle2onnx raises the opset where an operator needs it; the adapters take it back down."""
    rep = onnxbridge.convert(TwoInputs(), [paddle.static.InputSpec([None, 4]), paddle.static.InputSpec([None, 5])],
                             output=tmp_path / "t9.onnx", opset=9).report
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == 9
    assert any("the lowest its operators allow); adapted to 9" in n for n in rep["notes"]), rep["notes"]


@pytest.mark.slow
def test_opset_above_paddle2onnx_is_adapted(net, tmp_path):
    spec = [IMAGE]
    rep = onnxbridge.convert(net, spec, output=tmp_path / "n22.onnx", opset=22).report
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == 22
    assert any("paddle2onnx exported at opset 21" in n for n in rep["notes"])


MODELS = {"pir": ("pir", "convnet.json"), "pdmodel": ("legacy", "convnet.pdmodel"), "two-inputs": ("two", "two.json"),
          "folder": ("static", None), "weights-file": ("pir", "convnet.pdiparams")}


@pytest.mark.parametrize("which, name, opset", [(*m, opset) for m in MODELS.values() for opset in (13, 17)]
                         + [("pir", "convnet.json", None), ("legacy", "convnet.pdmodel", None)],
                         ids=[f"{k}-{o}" for k in MODELS for o in (13, 17)] + ["pir-default", "pdmodel-default"])
@pytest.mark.fast_cases("weights-file-17")
def test_inference_models_through_the_cli(cli, paddle_files, tmp_path, which, name, opset):
    folder = paddle_files / which
    before = _digest(folder)
    src = folder / name if name else folder
    res = cli("convert", src, "-o", tmp_path / "m.onnx", "--report", tmp_path / "r.json",
              *(("--opset", opset) if opset else ()))
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == (opset or 17)
    assert rep["source"]["kind"].startswith("Paddle inference model")
    assert rep["environment"]["packages"]["paddlepaddle"]
    stamped = {p.key: p.value for p in onnx.load(tmp_path / "m.onnx", load_external_data=False).metadata_props}
    assert re.fullmatch(r"paddle2onnx \d+\.\d+\.\d+", stamped["onnxbridge.exporter"])  # wherever it ran
    assert len(rep["inputs"]["samples"]) == 2  # the saved -1 batch is validated at a second size
    assert _digest(folder) == before  # nothing written beside the user's files
    if which == "two":  # the predictor's outputs are matched to the ONNX outputs by name
        assert [o["shape"][1:] for o in rep["hops"][0]["outputs"]] == [[3], [4]]


@pytest.mark.slow
def test_path_prefix(cli, paddle_files, tmp_path):
    """jit.save's own path prefix names the model (the spine needs --from for a path that does not exist)."""
    from onnxbridge.frontends import paddle as frontend

    prefix = paddle_files / "legacy" / "convnet"
    assert frontend.accepts(prefix) and frontend.accepts(str(paddle_files / "pir" / "convnet"))
    res = cli("convert", prefix, "--from", "paddle", "-o", tmp_path / "m.onnx", "--opset", 13)
    assert res.exit_code == 0, res.output
    rep = onnxbridge.convert(str(paddle_files / "pir" / "convnet"), from_="paddle", output=tmp_path / "p.onnx").report
    assert rep["status"] == "passed" and rep["source"]["kind"] == "Paddle inference model (.json PIR)"
    assert_one_line_error(cli("convert", paddle_files / "pir" / "nothing", "--from", "paddle", "-o", tmp_path / "x.onnx"),
                          2, "nothing.json", "nothing.pdmodel")


def test_accepts_only_paddle_files(paddle_files):
    from onnxbridge.frontends import paddle as frontend

    assert frontend.accepts(paddle_files / "pir" / "convnet.json")
    assert frontend.accepts(paddle_files / "lonely_pir" / "model.json")  # a PIR header, weights missing
    assert frontend.accepts(paddle_files / "lonely" / "model.pdmodel")
    assert frontend.accepts(paddle_files / "static")
    assert not frontend.accepts(paddle_files / "config" / "config.json")
    assert not frontend.accepts(paddle_files / "config")
    assert not frontend.accepts(paddle_files / "pir" / "nothing")
    assert not frontend.accepts(np.ones(3))


@pytest.mark.parametrize("which, name", [("lonely", "model.pdmodel"), ("lonely_pir", "model.json"),
                                         ("lonely_pir", None)])
def test_missing_params(cli, paddle_files, tmp_path, which, name):
    out = tmp_path / "x.onnx"
    src = paddle_files / which / name if name else paddle_files / which
    res = cli("convert", src, "--from", "paddle", "-o", out) if name is None else cli("convert", src, "-o", out)
    needles = ("model.pdiparams", "missing") if name else ("holds no Paddle inference model",)
    assert_one_line_error(res, 2, *needles)
    assert not out.exists()


@pytest.mark.parametrize("which, name, needle", [
    ("corrupt", "model.json", "cannot load Paddle model 'model.json'"),
    ("corrupt_pdmodel", "model.pdmodel", "Failed to parse program_desc"),
    ("truncated", "model.pdmodel", "loading model parameters"),
    ("two_models", None, "holds 2 Paddle models"),
])
def test_bad_model_files(cli, paddle_files, tmp_path, which, name, needle):
    out = tmp_path / "x.onnx"
    src = paddle_files / which / name if name else paddle_files / which
    res = cli("convert", src, "-o", out)
    assert_one_line_error(res, 2, needle)
    assert "(at /paddle/" not in res.output and "In user code" not in res.output
    assert not out.exists()


@pytest.mark.slow
def test_a_paddle2onnx_crash_is_an_error(monkeypatch, net, tmp_path):
    """paddle2onnx aborts the process above opset 21; in the child process that is a NativeCrash (exit 4: asking
    for that opset is our bug) naming the library and the signal."""
    from onnxbridge.frontends.paddle import convert

    from onnxbridge.errors import NativeCrash

    monkeypatch.setattr(convert, "MAX_OPSET", 23)
    spec = [IMAGE]
    with pytest.raises(NativeCrash, match=r"paddle2onnx: paddle2onnx \S+ crashed \(SIGABRT\)"):
        onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=22)
    assert not (tmp_path / "n.onnx").exists()


@pytest.mark.slow
def test_unsupported_operator_is_an_error(cli, tmp_path):
    """paddle2onnx aborts on an operator it lacks (svd): that is its refusal, an UnsupportedError (exit 2) quoting
    it, and the caller's process lives."""
    from onnxbridge.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="cannot convert an operator .*unsupported operators"):
        onnxbridge.convert(Singular(), paddle.static.InputSpec([4, 4], "float32"), output=tmp_path / "s.onnx")
    assert not (tmp_path / "s.onnx").exists()


@pytest.mark.slow
def test_a_logged_paddle2onnx_failure_is_an_error(paddle_files, tmp_path):
    """paddle2onnx only logs errors in its Python part and then returns nothing: the logged error is raised."""
    from onnxbridge.errors import ExportError
    from onnxbridge.frontends.paddle.convert import to_onnx

    folder = paddle_files / "truncated"
    with pytest.raises(ExportError, match="^paddle2onnx: UnavailableError: An error occurred while loading model "
                                          r"parameters.*load_combine"):
        to_onnx(str(folder / "model.pdmodel"), str(folder / "model.pdiparams"), str(tmp_path / "x.onnx"), 17,
                str(tmp_path))
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.slow
def test_no_runtime_installs(net, tmp_path):
    """paddle2onnx's save path pip-installs onnx_graphsurgeon to fold constants; ours never installs."""
    import importlib.util

    spec = [IMAGE]
    had = importlib.util.find_spec("onnx_graphsurgeon") is not None
    assert onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=17).passed
    assert (importlib.util.find_spec("onnx_graphsurgeon") is not None) == had


def test_a_wrong_conversion_is_caught(net, tmp_path):
    spec = [IMAGE]
    onnxbridge.convert(net, spec, output=tmp_path / "n.onnx", opset=17)
    from onnxbridge.modelwalk import iter_tensors

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
    assert row["available"] and row["versions"]["paddlepaddle"], row


@pytest.mark.slow
def test_tensorflow_first_is_a_clear_error(paddle_files, tmp_path):
    """In a process that imported tensorflow, a Paddle source is refused (exit 3), never a segfault."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow not installed")
    code = ("import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; import tensorflow;"
            "from onnxbridge.cli.main import main;"
            "sys.argv = ['onnxbridge', 'convert', sys.argv[1], '-o', sys.argv[2]]; main()")
    proc = subprocess.run([sys.executable, "-c", code, str(paddle_files / "pir" / "convnet.json"),
                           str(tmp_path / "x.onnx")], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "error: paddle cannot be imported into a process that has already imported tensorflow" in proc.stderr


@pytest.mark.slow
def test_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "convert_paddle.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") >= 6
