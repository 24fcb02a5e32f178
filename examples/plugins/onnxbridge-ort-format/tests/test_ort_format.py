"""The plugin through onnxbridge's Python API (the plugin must be installed: its entry point is how it is found)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge


def _model(path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_converts_and_runs(tmp_path, level):
    _model(tmp_path / "m.onnx")
    rep = onnxbridge.convert(tmp_path / "m.onnx", to="ort", output=tmp_path / "m.ort", optimization=level).report
    assert rep["status"] == "passed" and rep["hops"][-1]["to"] == "ort"
    assert rep["artifact"]["backend"]["optimization"] == level and (tmp_path / "m.ort").stat().st_size > 0


def test_refuses_an_unknown_level(tmp_path):
    _model(tmp_path / "m.onnx")
    with pytest.raises(onnxbridge.errors.BadInputError, match="must be one of basic, extended, all"):
        onnxbridge.convert(tmp_path / "m.onnx", to="ort", output=tmp_path / "m.ort", optimization="max")
    assert not (tmp_path / "m.ort").exists()
