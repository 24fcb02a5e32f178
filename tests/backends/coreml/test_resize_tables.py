"""Resize to sizes known only at run time through interpolation tables computed in the program (backends/coreml/
resize_tables.py): a constant table resized to another input's flexible (h, w), as ViT resizes its position
embeddings to the patch grid; validated at two grid sizes against onnxruntime, for cubic and linear modes and
each coordinate mode, below iOS 17 too."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.errors import UnsupportedError

from tests.helpers.extras import require

require("coremltools")

TABLE = np.random.default_rng(0).standard_normal((1, 2, 4, 5)).astype(np.float32)


def _model(mode: str, coords: str, exclude_outside: int = 0) -> onnx.ModelProto:
    """y [1, 1, h, w] (flexible h, w) + Resize(TABLE, sizes = [1, 2, h, w])."""
    inits = {"table": TABLE, "start": np.array([2], np.int64), "end": np.array([4], np.int64),
             "lead": np.array([1, 2], np.int64)}
    nodes = [helper.make_node("Shape", ["y"], ["s"]), helper.make_node("Slice", ["s", "start", "end"], ["hw"]),
             helper.make_node("Concat", ["lead", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["table", "", "", "sizes"], ["r"], mode=mode,
                              coordinate_transformation_mode=coords, exclude_outside=exclude_outside),
             helper.make_node("Add", ["r", "y"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "h", "w"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("mode, coords, exclude_outside, target", [
    ("cubic", "half_pixel", 0, "iOS16"), ("cubic", "pytorch_half_pixel", 1, "iOS15"),
    ("cubic", "align_corners", 0, "iOS16"), ("linear", "asymmetric", 0, "iOS15"),
    ("linear", "pytorch_half_pixel", 0, "iOS17"),
])
@pytest.mark.fast_cases("linear-asymmetric-0-iOS15")
def test_resize_to_run_time_sizes(tmp_path, mode, coords, exclude_outside, target):
    src = tmp_path / "m.onnx"
    onnx.save(_model(mode, coords, exclude_outside), src)
    y = np.random.default_rng(1).standard_normal((1, 1, 7, 3)).astype(np.float32)  # grows to 8 x 4, shrinks 5 -> 3
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", target=target, inputs={"y": y}).report
    hop = rep["hops"][-1]
    assert rep["status"] == "passed" and hop["to"] == "coreml", [(o["name"], o.get("max_abs")) for o in
                                                                 hop.get("outputs", [])] + hop.get("errors", [])
    assert rep["artifact"]["backend"]["flexible_inputs"]["y"][:2] == [[1, 1], [1, 1]]  # h, w stay flexible
    assert {tuple(s["y"]) for s in rep["inputs"]["samples"]} == {(1, 1, 7, 3), (1, 1, 8, 4)}


def test_nearest_to_run_time_sizes_is_refused(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_model("nearest", "asymmetric"), src)
    y = np.zeros((1, 1, 7, 3), np.float32)
    with pytest.raises(UnsupportedError, match="nearest mode to sizes known only at run time"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs={"y": y})
    assert not (tmp_path / "m.mlpackage").exists()


def _feature_map_model(mode: str, coords: str) -> onnx.ModelProto:
    """x [n, 2, h, w] resized to y's [H, W] (every dim flexible, n shared: SegFormer's decode head upsampling each
    stage's features to the first stage's size), plus y."""
    inits = {"start": np.array([2], np.int64), "end": np.array([4], np.int64), "zero": np.array([0], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("Slice", ["sx", "zero", "start"], ["nc"]),
             helper.make_node("Shape", ["y"], ["sy"]), helper.make_node("Slice", ["sy", "start", "end"], ["hw"]),
             helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], mode=mode,
                              coordinate_transformation_mode=coords),
             helper.make_node("Add", ["r", "y"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, "h", "w"]),
                                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1, "H", "W"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("mode, coords, target", [
    ("linear", "half_pixel", "iOS16"), ("cubic", "align_corners", "iOS15"),
    ("linear", "half_pixel", "iOS17"),  # iOS 17's own resize
])
@pytest.mark.fast_cases("linear-half_pixel-iOS16")
def test_flexible_input_resized_to_run_time_sizes(tmp_path, mode, coords, target):
    """The input's own sizes known only at run time too (the tables' n_in read from its shape); the batch, the same
    flexible size in the input and the sizes, is left alone."""
    src = tmp_path / "m.onnx"
    onnx.save(_feature_map_model(mode, coords), src)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 2, 3, 5)).astype(np.float32),
             "y": rng.standard_normal((2, 1, 8, 4)).astype(np.float32)}  # up 3 -> 8, down 5 -> 4
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", target=target, inputs=feeds).report
    hop = rep["hops"][-1]
    assert rep["status"] == "passed" and hop["to"] == "coreml", [(o["name"], o.get("max_abs")) for o in
                                                                 hop.get("outputs", [])] + hop.get("errors", [])
    assert len({tuple(s["x"]) for s in rep["inputs"]["samples"]}) == 2  # validated at two sizes


@pytest.mark.slow
def test_flexible_input_resized_to_a_fixed_size(tmp_path):
    """A flexible image resized to constant sizes (cubic: no MIL op takes it): the tables read the input's size at
    run time."""
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic",
                            coordinate_transformation_mode="align_corners")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([1, 2, 6, 9], np.int64), "sizes")])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 5)).astype(np.float32)
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs={"x": x}).report
    assert rep["status"] == "passed" and len({tuple(s["x"]) for s in rep["inputs"]["samples"]}) == 2
