"""Keras 3 models (live, .keras, .h5) through our own input signature, not tf2onnx's broken Keras path."""
from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.conftest import assert_one_line_error, check_report
from tests.frontends.tensorflow.conftest import outputs_of
from tests.helpers.extras import require

tf = require("tensorflow")
keras = require("keras")


@pytest.mark.parametrize("opset", [13, 17, None])
def test_live_keras_model(cnn, tmp_path, opset):
    weights = [w.copy() for w in cnn.get_weights()]
    result = onnxbridge.convert(cnn, output=tmp_path / "cnn.onnx", opset=opset, report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed", rep
    assert rep["artifact"]["opset"] == (opset or 15)  # tf2onnx's preferred opset when none is asked for
    assert set(outputs_of(rep)) == {"probs", "embedding"} and outputs_of(rep)["probs"]["max_abs"] < 1e-5
    assert [s["image"] for s in rep["inputs"]["samples"]] == [[2, 16, 16, 3], [3, 16, 16, 3]]
    model = onnx.load(tmp_path / "cnn.onnx")
    assert [i.name for i in model.graph.input] == ["image"]
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


def test_keras_file_through_the_python_api(tf_files, tmp_path):
    rep = onnxbridge.convert(tf_files / "cnn.keras", np.ones((1, 16, 16, 3), "float32"),
                             output=tmp_path / "m.onnx", opset=17).report
    assert rep["status"] == "passed" and rep["inputs"]["samples"][0]["image"] == [1, 16, 16, 3]


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


@pytest.mark.parametrize("name", ["lambda.keras", "lambda.h5"])
def test_lambda_layer_needs_trust(cli, tf_files, tmp_path, name):
    out = tmp_path / "l.onnx"
    assert_one_line_error(cli("convert", tf_files / name, "-o", out), 2, "Lambda", "--trust")
    assert not out.exists()
    res = cli("convert", tf_files / name, "-o", out, "--trust", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert check_report(tmp_path / "r.json")["status"] == "passed"


@pytest.mark.parametrize("name", ["broken.keras", "broken.h5"])
def test_corrupt_keras_file(cli, tf_files, tmp_path, name):
    assert_one_line_error(cli("convert", tf_files / name, "-o", tmp_path / "x.onnx"), 2,
                          "cannot load Keras model")
    assert not (tmp_path / "x.onnx").exists()


def test_sequential_and_dict_inputs(tmp_path):
    seq = keras.Sequential([keras.Input((6,), name="features"), keras.layers.Dense(4, activation="tanh"),
                            keras.layers.Dense(2)])
    rep = onnxbridge.convert(seq, output=tmp_path / "seq.onnx", opset=13).report
    assert rep["status"] == "passed" and [i["name"] for i in rep["source"]["inputs"]] == ["features"]
    a, b = keras.Input((3,), name="a"), keras.Input((3,), name="b", dtype="int32")
    both = keras.Model({"a": a, "b": b}, keras.layers.Multiply()([a, keras.ops.cast(b, "float32")]))
    sample = {"b": np.arange(6, dtype="int32").reshape(2, 3), "a": np.ones((2, 3), "float32")}
    rep = onnxbridge.convert(both, sample, output=tmp_path / "dict.onnx", opset=17).report
    assert rep["status"] == "passed", rep
    assert [(i["name"], i["dtype"]) for i in rep["source"]["inputs"]] == [("a", "float32"), ("b", "int32")]


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)

    def call(self, x):
        return keras.ops.relu(self.dense(x))


def test_subclassed_model_takes_its_inputs_from_the_sample(tmp_path):
    model = Subclassed()
    rep = onnxbridge.convert(model, tf.ones((2, 5)), output=tmp_path / "sub.onnx", opset=17).report
    assert rep["status"] == "passed" and rep["source"]["inputs"][0]["shape"] == [None, 5]
    with pytest.raises(BadInputError, match="pass sample inputs"):
        onnxbridge.convert(Subclassed(), output=tmp_path / "none.onnx")


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
