"""SavedModel folders: the serving signature or --signature NAME, signature names as input names."""
from __future__ import annotations

import onnx
import pytest

import onnxbridge
from tests.conftest import assert_one_line_error, check_report
from tests.frontends.tensorflow.conftest import outputs_of
from tests.helpers.extras import require

tf = require("tensorflow")


@pytest.mark.parametrize("opset", [13, 17])
def test_serving_default_signature(cli, tf_files, tmp_path, opset):
    res = cli("convert", tf_files / "scorer", "-o", tmp_path / "s.onnx", "--opset", opset,
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == opset and set(outputs_of(rep)) == {"logits", "norm"}
    assert rep["source"]["inputs"][0]["name"] == "features" and "[serving_default]" in rep["source"]["description"]
    assert [s["features"] for s in rep["inputs"]["samples"]] == [[2, 8], [3, 8]]  # None batch: checked at 2 sizes
    assert onnx.load(tmp_path / "s.onnx").graph.input[0].type.tensor_type.shape.dim[0].dim_param


def test_signature_option(cli, tf_files, tmp_path):
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


def test_input_shape_fixes_unknown_dims(tf_files, tmp_path):
    rep = onnxbridge.convert(tf_files / "pooler", output=tmp_path / "open.onnx", opset=17).report
    assert rep["status"] == "passed" and rep["source"]["inputs"][0]["shape"] == [None, None, None, 3]
    assert [s["pixels"] for s in rep["inputs"]["samples"]] == [[2, 2, 2, 3], [3, 3, 3, 3]]
    rep = onnxbridge.convert(tf_files / "pooler", output=tmp_path / "fixed.onnx", opset=17,
                             input_shapes=["pixels:1,7,5,3"]).report
    assert rep["status"] == "passed" and [s["pixels"] for s in rep["inputs"]["samples"]] == [[1, 7, 5, 3]]
    dims = onnx.load(tmp_path / "fixed.onnx").graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 7, 5, 3]


def test_corrupt_saved_model(cli, tmp_path):
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"not a protobuf")
    assert_one_line_error(cli("convert", tmp_path / "sm", "-o", tmp_path / "x.onnx"), 2, "cannot load SavedModel")
