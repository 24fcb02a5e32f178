"""TensorFlow frontend: Keras (live, .keras, .h5), SavedModel signatures, tf.function, tf.Module and .tflite
converted with tf2onnx, run in onnxruntime and compared with TF itself."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import pytest

import onnxbridge
from tests.conftest import assert_one_line_error, check_report

tf = pytest.importorskip("tensorflow")


def _outputs(rep):
    return {o["name"]: o for o in rep["hops"][0]["outputs"]}


@pytest.mark.parametrize("opset", [13, 17, None])
def test_live_keras_model(cnn, tmp_path, opset):
    weights = [w.copy() for w in cnn.get_weights()]
    result = onnxbridge.convert(cnn, output=tmp_path / "cnn.onnx", opset=opset, report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed", rep
    assert rep["artifact"]["opset"] == (opset or 15)  # tf2onnx's preferred opset when none is asked for
    assert set(_outputs(rep)) == {"probs", "embedding"} and _outputs(rep)["probs"]["max_abs"] < 1e-5
    assert [len(s) and s["image"] for s in rep["inputs"]["samples"]] == [[2, 16, 16, 3], [3, 16, 16, 3]]
    model = onnx.load(tmp_path / "cnn.onnx")
    assert [o.name for o in model.graph.output] == ["probs", "embedding"]
    assert {p.key: p.value for p in model.metadata_props}["onnxbridge.source_framework"] == "tensorflow"
    assert all(np.array_equal(a, b) for a, b in zip(weights, cnn.get_weights()))  # the model is untouched
    assert result.passed


def test_opsets_tf2onnx_cannot_emit_are_adapted(cnn, tmp_path):
    rep = onnxbridge.convert(cnn, output=tmp_path / "cnn11.onnx", opset=11).report
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == 11
    assert any("tf2onnx exported at opset 13" in n for n in rep["notes"])


@pytest.mark.parametrize("name", ["cnn.keras", "cnn.h5"])
@pytest.mark.parametrize("opset", [13, 17])
def test_keras_files_through_the_cli(cli, tf_files, tmp_path, name, opset):
    src = tf_files / name
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    res = cli("convert", src, "-o", tmp_path / "m.onnx", "--opset", opset, "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == opset
    assert rep["source"]["kind"] == f"Keras {src.suffix}"
    assert rep["environment"]["packages"]["tf2onnx"] and rep["environment"]["packages"]["tensorflow"]
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest


def test_nhwc_stays_unless_nchw_is_asked(cli, tf_files, tmp_path):
    assert cli("-q", "convert", tf_files / "cnn.keras", "-o", tmp_path / "nhwc.onnx").exit_code == 0
    dims = onnx.load(tmp_path / "nhwc.onnx").graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [16, 16, 3]
    res = cli("convert", tf_files / "cnn.keras", "-o", tmp_path / "nchw.onnx", "--opset", "17",
              "--inputs-as-nchw", "image", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["inputs"]["samples"][0]["image"] == [2, 3, 16, 16]
    dims = onnx.load(tmp_path / "nchw.onnx").graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [3, 16, 16]
    assert_one_line_error(cli("convert", tf_files / "cnn.keras", "-o", tmp_path / "x.onnx",
                              "--inputs-as-nchw", "img"), 2, "unknown input/output 'img'")


def test_saved_model_signatures(cli, tf_files, tmp_path):
    res = cli("convert", tf_files / "scorer", "-o", tmp_path / "s.onnx", "--opset", "17",
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and set(_outputs(rep)) == {"logits", "norm"}
    assert rep["source"]["inputs"][0]["name"] == "features" and "[serving_default]" in rep["source"]["description"]
    assert len(rep["inputs"]["samples"]) == 2  # the None batch is dynamic and checked at a second size
    res = cli("convert", tf_files / "scorer", "-o", tmp_path / "scale.onnx", "--signature", "scale",
              "--report", tmp_path / "scale.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "scale.json")
    assert rep["status"] == "passed" and rep["source"]["inputs"][0]["name"] == "x"


def test_wrong_signature_name(cli, tf_files, tmp_path):
    err = assert_one_line_error(cli("convert", tf_files / "scorer", "-o", tmp_path / "s.onnx", "--signature",
                                    "predict"), 2, "no signature 'predict'", "scale, serving_default")
    assert "--signature" in err
    assert not (tmp_path / "s.onnx").exists()


@pytest.mark.parametrize("opset", [13, 17])
def test_tflite(cli, tf_files, tmp_path, opset):
    res = cli("convert", tf_files / "scorer.tflite", "-o", tmp_path / "t.onnx", "--opset", opset,
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["source"]["kind"] == "TFLite"
    assert set(_outputs(rep)) == {"logits", "norm"} and rep["source"]["inputs"][0]["name"] == "features"
    assert rep["artifact"]["opset"] == opset


def test_lambda_layer_needs_trust(cli, tf_files, tmp_path):
    out = tmp_path / "l.onnx"
    assert_one_line_error(cli("convert", tf_files / "lambda.keras", "-o", out), 2, "Lambda", "--trust")
    assert not out.exists()
    res = cli("convert", tf_files / "lambda.keras", "-o", out, "--trust", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert check_report(tmp_path / "r.json")["status"] == "passed"


@pytest.mark.parametrize("name, needle", [("broken.keras", "cannot load Keras model"),
                                          ("broken.tflite", "is not a TFLite model")])
def test_corrupt_files(cli, tf_files, tmp_path, name, needle):
    assert_one_line_error(cli("convert", tf_files / name, "-o", tmp_path / "x.onnx"), 2, needle)
    assert not (tmp_path / "x.onnx").exists()


def test_tf_function_with_sample_and_dynamic_axis(tmp_path):
    @tf.function
    def blend(a, b):
        return {"sum": a + b, "gated": tf.sigmoid(a) * b}

    sample = (np.random.default_rng(0).standard_normal((2, 3)).astype("float32"),
              np.ones((2, 3), "float32"))
    rep = onnxbridge.convert(blend, sample, output=tmp_path / "f.onnx", opset=17,
                             dynamic=["a:0:batch", "b:0:batch"]).report
    assert rep["status"] == "passed", rep
    assert [i["name"] for i in rep["source"]["inputs"]] == ["a", "b"]
    assert set(_outputs(rep)) == {"sum", "gated"} and len(rep["inputs"]["samples"]) == 2


def test_tf_module(tmp_path):
    from tests.frontends.tensorflow.conftest import Scorer

    rep = onnxbridge.convert(Scorer(), output=tmp_path / "m.onnx", opset=13).report
    assert rep["status"] == "passed" and rep["source"]["kind"] == "tf.Module"


def test_a_wrong_conversion_is_caught(cnn, tmp_path):
    """The check is real: an ONNX model whose weights differ from the Keras model fails validation."""
    onnxbridge.convert(cnn, output=tmp_path / "cnn.onnx", opset=17)
    model = onnx.load(tmp_path / "cnn.onnx")
    biggest = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    arr = onnx.numpy_helper.to_array(biggest) * 1.01
    biggest.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), biggest.name))
    onnx.save(model, tmp_path / "bad.onnx")
    rep = onnxbridge.validate(cnn, tmp_path / "bad.onnx")
    assert rep["status"] == "failed"


def test_doctor_shows_tensorflow_and_tf2onnx(cli):
    info = json.loads(cli("doctor", "--json").stdout)
    row = next(p for p in info["plugins"] if p["kind"] == "frontend" and p["name"] == "tensorflow")
    assert row["available"] and row["versions"]["tensorflow"] and row["versions"]["tf2onnx"]


def test_paddle_is_refused_after_tensorflow():
    """In this process TF is loaded: a Paddle source must get a clear error, not a segfault."""
    import sys

    from onnxbridge.errors import UnavailableError
    from onnxbridge.isolation import require_importable

    if "paddle" in sys.modules:
        pytest.skip("paddle already imported")
    with pytest.raises(UnavailableError, match="already imported tensorflow"):
        require_importable("paddle")


def test_example_runs(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = subprocess.run([sys.executable, str(ROOT / "examples" / "convert_tensorflow.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") == 12
