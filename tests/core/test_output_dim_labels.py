"""``--dynamic x:0:batch`` names every output dim that is the batch ``batch`` (issue 21: not ``Conv18_dim_0``)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxbridge
from onnxbridge.builder import label_dims
from tests.conftest import EXAMPLES
from tests.helpers.extras import requires


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.slow
@requires("torch")
def test_torch_outputs_carry_the_users_label(tmp_path, exporter):
    out = tmp_path / "cnn.onnx"
    rep = onnxbridge.convert(f"{EXAMPLES}:cnn", output=out, dynamic=["x:0:batch"], exporter=exporter).report
    assert rep["status"] == "passed" and exporter in rep["artifact"].get("exporter", exporter)
    model = onnx.load(out)
    assert _dims(model.graph.input[0]) == ["batch", 3, 32, 32]
    assert _dims(model.graph.output[0]) == ["batch", 4, 64, 64]
    symbols = {d for v in model.graph.value_info for d in _dims(v) if isinstance(d, str)}
    assert symbols <= {"batch"}, [(v.name, _dims(v)) for v in model.graph.value_info]


def _resize_model(batch: str | int = "n", concat: bool = True) -> onnx.ModelProto:
    """x -> Resize(scales 1,1,2,2) -> y, and Concat(x, x) along the batch -> z (2 x batch: not the batch)."""
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest"),
         *[helper.make_node("Concat", ["x", "x"], ["z"], axis=0)] * concat], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["Resize_dim_0", 3, 8, 8]),
         *[helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 3, 4, 4])] * concat], [scales])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_label_dims_names_the_same_symbol_only():
    model = onnx.shape_inference.infer_shapes(_resize_model(), data_prop=True)
    assert label_dims(model) == 1
    assert _dims(model.graph.output[0]) == ["n", 3, 8, 8]
    assert _dims(model.graph.output[1])[0] != "n"  # Concat doubles the batch: another size, not the symbol


def test_onnx_source_with_dynamic_labels_its_outputs(tmp_path):
    src = tmp_path / "static.onnx"
    onnx.save(_resize_model(batch=2, concat=False), src)
    out = tmp_path / "dyn.onnx"
    rep = onnxbridge.convert(src, output=out, dynamic=["x:0:batch"]).report
    assert rep["status"] == "passed", rep
    model = onnx.load(out)
    assert _dims(model.graph.input[0])[0] == "batch" and _dims(model.graph.output[0]) == ["batch", 3, 8, 8]
    x = np.ones((3, 3, 4, 4), np.float32)  # and the model runs at another batch
    import onnxruntime as ort

    y, = ort.InferenceSession(str(out)).run(None, {"x": x})
    assert y.shape == (3, 3, 8, 8)
