""".tflite files: tf2onnx's TFLite path, reference outputs from the TFLite interpreter."""
from __future__ import annotations

import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.conftest import assert_one_line_error, check_report
from tests.frontends.tensorflow.conftest import outputs_of


@pytest.mark.parametrize("opset", [13, 17, None])
def test_tflite(cli, tf_files, tmp_path, opset):
    args = ["--opset", opset] if opset else []
    res = cli("convert", tf_files / "scorer.tflite", "-o", tmp_path / "t.onnx", *args, "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["source"]["kind"] == "TFLite"
    assert set(outputs_of(rep)) == {"logits", "norm"} and rep["source"]["inputs"][0]["name"] == "features"
    assert rep["artifact"]["opset"] == (opset or 15)


@pytest.mark.parametrize("nchw", [False, True])
def test_keras_cnn_as_tflite_through_the_python_api(tf_files, tmp_path, nchw):
    options = {"inputs_as_nchw": ["image"]} if nchw else {}
    rep = onnxbridge.convert(tf_files / "cnn.tflite", output=tmp_path / "t.onnx", opset=17, **options).report
    assert rep["status"] == "passed", rep
    assert rep["source"]["inputs"][0]["name"] == "image"
    assert list(outputs_of(rep)) == ["output_0", "output_1"]  # the names in the .tflite signature
    assert rep["inputs"]["samples"][0]["image"] == ([2, 3, 16, 16] if nchw else [2, 16, 16, 3])
    assert len(rep["inputs"]["samples"]) == 2  # the None batch stays dynamic
    with pytest.raises(BadInputError, match="fixes that axis to 16"):  # a .tflite cannot be re-traced
        onnxbridge.convert(tf_files / "cnn.tflite", output=tmp_path / "d.onnx", dynamic=["image:1"], **options)


def test_corrupt_tflite(cli, tf_files, tmp_path):
    assert_one_line_error(cli("convert", tf_files / "broken.tflite", "-o", tmp_path / "x.onnx"), 2,
                          "is not a TFLite model")
    assert not (tmp_path / "x.onnx").exists()


def test_signature_on_a_live_model_is_refused(cnn, tmp_path):
    with pytest.raises(BadInputError, match="--signature applies to SavedModel folders and .tflite files"):
        onnxbridge.convert(cnn, output=tmp_path / "x.onnx", signature="serving_default")
