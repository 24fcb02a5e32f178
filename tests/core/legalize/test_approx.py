"""--allow-approx: approximations run only when asked, change the numbers within their stated bound, are reported
per node, and the hop after them still compares with the exact model."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.errors import BadInputError
from onnxbridge.legalize.approx import GELU_TANH_MAX_ABS, approximate

from tests.helpers.extras import require

X = np.linspace(-6, 6, 4801, dtype=np.float32).reshape(1, -1)


def _erf_gelu(opset: int = 17) -> onnx.ModelProto:
    """x * 0.5 * (1 + erf(x / sqrt 2)), as torch's exporter writes exact GELU below opset 20."""
    consts = {"s2": np.float32(math.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [helper.make_node("Div", ["x", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"], name="gelu_out")]
    return _model(nodes, consts, opset)


def _model(nodes, consts, opset):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(X.shape))],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model: onnx.ModelProto) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]


def _tanh_gelu(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("model", [_erf_gelu(), _model([helper.make_node("Gelu", ["x"], ["y"], name="g")], {}, 20)],
                         ids=["erf-pattern", "onnx-gelu"])
def test_gelu_tanh_is_the_tanh_form_within_the_bound(model):
    exact = _run(model)
    approx, notes = approximate(model, ["gelu-tanh"])
    assert {n.op_type for n in approx.graph.node} == {"Mul", "Add", "Tanh"}
    got = _run(approx)
    np.testing.assert_allclose(got, _tanh_gelu(X), atol=2e-6)
    assert 1e-4 < np.abs(got - exact).max() <= GELU_TANH_MAX_ABS
    assert len(notes) == 1 and "applied to 1 node(s)" in notes[0]


def test_only_what_is_asked_and_exact_gelu_only():
    tanh_gelu = _model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], {}, 20)
    same, notes = approximate(tanh_gelu, ["gelu-tanh"])
    assert [n.op_type for n in same.graph.node] == ["Gelu"] and "no exact GELU" in notes[0]
    untouched, notes = approximate(_erf_gelu(), [])
    assert "Erf" in {n.op_type for n in untouched.graph.node} and notes == []
    with pytest.raises(BadInputError, match="known: gelu-tanh"):
        approximate(_erf_gelu(), ["gelu-fast"])


@pytest.mark.slow
def test_core_ml_build_reports_the_approximation(tmp_path):
    require("coremltools")
    src = tmp_path / "gelu.onnx"
    onnx.save(_erf_gelu(), src)
    strict = onnxbridge.convert(src, to="coreml", output=tmp_path / "s.mlpackage", allow_approx=["gelu-tanh"],
                                inputs={"x": X}).report
    assert strict["hops"][-1]["status"] == "failed"  # the default fp32 tolerance does not hide the approximation
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "g.mlpackage", allow_approx=["gelu-tanh"],
                             inputs={"x": X}, atol=1e-3).report
    assert rep["status"] == "passed", rep["hops"]
    hop = rep["hops"][-1]
    assert 1e-4 < max(o["max_abs"] for o in hop["outputs"]) <= GELU_TANH_MAX_ABS  # compared with the exact model
    assert any("--allow-approx gelu-tanh" in n and "gelu_out" in n for n in rep["notes"])
    exact = onnxbridge.convert(src, to="coreml", output=tmp_path / "e.mlpackage", inputs={"x": X}).report
    assert max(o["max_abs"] for o in exact["hops"][-1]["outputs"]) < 1e-5
    assert not any("allow-approx" in n for n in exact["notes"])


def test_refused_where_it_cannot_apply(tmp_path):
    src = tmp_path / "gelu.onnx"
    onnx.save(_erf_gelu(), src)
    with pytest.raises(BadInputError, match="--allow-approx does not apply to --to onnx"):
        onnxbridge.convert(src, output=tmp_path / "o.onnx", allow_approx=["gelu-tanh"])
    with pytest.raises(BadInputError, match="not an approximation"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "o.mlpackage", allow_approx=["fast"])
    assert not (tmp_path / "o.mlpackage").exists()
