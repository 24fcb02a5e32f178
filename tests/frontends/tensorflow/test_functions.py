"""tf.function and tf.Module from Python: input_signature or sample inputs; parameter names as input names."""
from __future__ import annotations

import numpy as np
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.frontends.tensorflow.conftest import Scorer, outputs_of
from tests.helpers.extras import require

tf = require("tensorflow")


def test_tf_function_with_sample_and_dynamic_axis(tmp_path):
    @tf.function
    def blend(a, b):
        return {"sum": a + b, "gated": tf.sigmoid(a) * b}

    sample = (np.random.default_rng(0).standard_normal((2, 3)).astype("float32"), np.ones((2, 3), "float32"))
    rep = onnxbridge.convert(blend, sample, output=tmp_path / "f.onnx", opset=17,
                             dynamic=["a:0:batch", "b:0:batch"]).report
    assert rep["status"] == "passed", rep
    assert [i["name"] for i in rep["source"]["inputs"]] == ["a", "b"]
    assert set(outputs_of(rep)) == {"sum", "gated"} and len(rep["inputs"]["samples"]) == 2


def test_tf_function_with_input_signature(tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([2, 4], tf.float32, name="w")])
    def mix(x, weights):
        return x * tf.reduce_sum(weights, axis=0), x - 1.0

    rep = onnxbridge.convert(mix, output=tmp_path / "f.onnx", opset=13).report
    assert rep["status"] == "passed", rep
    assert [(i["name"], i["shape"]) for i in rep["source"]["inputs"]] == [("x", [None, 4]), ("w", [2, 4])]
    assert list(outputs_of(rep)) == ["output_0", "output_1"] and len(rep["inputs"]["samples"]) == 2
    with pytest.raises(BadInputError, match="fixes that axis to 2"):  # the signature binds every call
        onnxbridge.convert(mix, output=tmp_path / "g.onnx", dynamic=["w:0"])


def test_tf_module(tmp_path):
    rep = onnxbridge.convert(Scorer(), output=tmp_path / "m.onnx", opset=13).report
    assert rep["status"] == "passed" and rep["source"]["kind"] == "tf.Module"
    assert rep["source"]["inputs"][0]["name"] == "features"
