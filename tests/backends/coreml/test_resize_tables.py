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
