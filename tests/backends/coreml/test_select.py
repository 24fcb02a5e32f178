"""Core ML lowerings of the ops that select by value (TopK, NonZero, NonMaxSuppression: backends/coreml/
lower_select.py) in one small model converted to Core ML, its saved MIL program run by the host evaluator and compared
with onnxruntime exactly (indices and selected boxes are integers); iOS 17's NMS (no score threshold, no count) in a
second build, in fp16; and the forms Core ML cannot hold refused by name."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.errors import UnsupportedError
from tests.backends.coreml.hop import passed_coreml_hop
from tests.helpers.extras import require

require("coremltools")

F, I64 = TensorProto.FLOAT, TensorProto.INT64
INT64_MAX = 2 ** 63 - 1


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _detections(rng):
    """Two batches of 24 boxes in three clusters (so NMS suppresses), [y1, x1, y2, x2] with some corners given the
    other way round, a score tie, and the same boxes as centres and sizes."""
    centres = rng.uniform(0, 12, (3, 2))[rng.integers(0, 3, (2, 24))] + rng.normal(0, 0.4, (2, 24, 2))
    sizes = rng.uniform(1, 2.5, (2, 24, 2))
    corners = np.concatenate([centres[..., ::-1] - sizes[..., ::-1] / 2, centres[..., ::-1] + sizes[..., ::-1] / 2], -1)
    corners[1, :6] = corners[1, :6][:, [2, 3, 0, 1]]
    scores = rng.uniform(0, 1, (2, 3, 24)).astype(np.float32)
    scores[0, 1, 5] = scores[0, 1, 9]
    centred = np.concatenate([centres, sizes], -1)
    return corners.astype(np.float32), centred.astype(np.float32), scores


@pytest.mark.parametrize("target, precision", [("iOS16", "fp32"), ("iOS17", "fp16")])
@pytest.mark.fast_cases("iOS16-fp32")
def test_topk_nonzero_and_nms_match_onnxruntime_exactly(tmp_path, target, precision):
    """TopK largest/smallest with a constant K and with K = min(k, candidates) known only at run time (a detection
    head's), NonZero, and NMS with corner and centre boxes, with and without a score threshold, the maximum per
    class a constant below the boxes' number and INT64_MAX, over a static number of boxes and over the boxes a
    threshold or a run-time K kept (padded to the most there can be)."""
    rng = np.random.default_rng(0)
    corners, centred, scores = _detections(rng)
    x = rng.standard_normal((2, 7, 5)).astype(np.float32)
    x[0, 1, 2] = x[0, 4, 2]  # a tie for TopK
    nodes = [helper.make_node("TopK", ["x", "k"], ["top", "top_i"], axis=1),
             helper.make_node("TopK", ["x", "k"], ["low", "low_i"], largest=0),
             helper.make_node("Greater", ["x", "half"], ["big"]), helper.make_node("NonZero", ["big"], ["where"]),
             helper.make_node("Shape", ["where"], ["found"]),
             helper.make_node("Slice", ["found", "one", "two"], ["n"]), helper.make_node("Min", ["n", "six"], ["kr"]),
             helper.make_node("ReduceMax", ["x"], ["flat"], axes=[1, 2], keepdims=0),  # [2]
             helper.make_node("Unsqueeze", ["flat", "zero"], ["row"]),
             helper.make_node("Tile", ["row", "tiles"], ["wide"]),  # [1, 2 * 8]
             helper.make_node("TopK", ["wide", "kr"], ["run_top", "run_i"]),
             helper.make_node("NonMaxSuppression", ["corners", "scores", "four", "iou", "threshold"], ["picked"]),
             helper.make_node("NonMaxSuppression", ["corners", "scores", "all", "iou"], ["every"]),
             helper.make_node("NonMaxSuppression", ["centred", "scores", "four", "iou", "threshold"], ["centre"],
                              center_point_box=1),
             # a detection head's: the boxes over a score threshold (a count known only at run time, at most 24)
             helper.make_node("Gather", ["scores", "zero"], ["first"], axis=1),  # [2, 1, 24]
             helper.make_node("ReduceMax", ["first"], ["best"], axes=[0, 1], keepdims=0),
             helper.make_node("Greater", ["best", "half"], ["sure"]), helper.make_node("NonZero", ["sure"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "zero"], ["sure_i"]),
             helper.make_node("Gather", ["corners", "sure_i"], ["sure_boxes"], axis=1),
             helper.make_node("Gather", ["first", "sure_i"], ["sure_scores"], axis=2),
             helper.make_node("NonMaxSuppression", ["sure_boxes", "sure_scores", "all", "iou"], ["filtered"]),
             # and the boxes a run-time K picked (at most six)
             helper.make_node("Gather", ["corners", "zero"], ["corners0"], axis=0),
             helper.make_node("Squeeze", ["run_i", "zero"], ["run_flat"]),
             helper.make_node("Gather", ["corners0", "run_flat"], ["top_boxes"], axis=1),
             helper.make_node("Unsqueeze", ["run_top", "one"], ["top_scores"]),
             helper.make_node("NonMaxSuppression", ["top_boxes", "top_scores", "all", "iou"], ["top_kept"])]
    inits = {"k": np.array([3], np.int64), "half": np.array(0.5, np.float32), "one": np.array([1], np.int64),
             "two": np.array([2], np.int64), "six": np.array([6], np.int64), "zero": np.array([0], np.int64),
             "tiles": np.array([1, 8], np.int64), "four": np.array([4], np.int64),
             "all": np.array([INT64_MAX], np.int64), "iou": np.array([0.3], np.float32),
             "threshold": np.array([0.25], np.float32)}
    outputs = [("top", F), ("top_i", I64), ("low", F), ("low_i", I64), ("where", I64), ("run_top", F), ("run_i", I64),
               ("picked", I64), ("every", I64), ("centre", I64), ("filtered", I64), ("top_kept", I64)]
    model = _model(nodes, [("x", [2, 7, 5]), ("corners", [2, 24, 4]), ("scores", [2, 3, 24]), ("centred", [2, 24, 4])],
                   outputs, inits)
    rep = passed_coreml_hop(model, tmp_path, target=target, precision=precision,
                            inputs={"x": x, "corners": corners, "scores": scores, "centred": centred})
    shapes = {o["name"]: o["shape"] for o in rep["hops"][-1]["outputs"]}
    assert 0 < shapes["picked"][0] <= 2 * 3 * 4 and 0 < shapes["every"][0] < 2 * 3 * 24  # NMS dropped boxes
    assert 0 < shapes["filtered"][0] < shapes["where"][1]
    assert {"topk", "argsort", "non_zero", "non_maximum_suppression"} <= set(rep["artifact"]["backend"]["ops"])


REFUSED = {
    "unbounded count": ("NonMaxSuppression",
                        "max_output_boxes_per_class=9223372036854775807 over a number of boxes known only at run time "
                        "\\(no bound known before\\)"),
    "no boxes wanted": ("NonMaxSuppression", "max_output_boxes_per_class is 0"),
    "no elements wanted": ("TopK", "K=0 over an axis of size 5"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_core_ml_cannot_hold_is_refused(tmp_path, case):
    """NMS over boxes of a count with no bound (its padding would be unbounded), NMS and TopK selecting nothing
    (Core ML has no empty tensors)."""
    op, why = REFUSED[case]
    inits = {"limit": np.array([0 if case == "no boxes wanted" else INT64_MAX], np.int64),
             "iou": np.array([0.5], np.float32), "k": np.array([0], np.int64)}
    if op == "TopK":
        nodes, inputs = [helper.make_node("TopK", ["s", "k"], ["out", "i"], name="the_op")], [("s", [2, 5])]
    else:  # boxes of a flexible count: no bound before run time
        nodes = [helper.make_node("NonMaxSuppression", ["b", "s", "limit", "iou"], ["out"], name="the_op")]
        inputs = [("b", [1, "n", 4]), ("s", [1, 1, "n"])]
    src = tmp_path / "m.onnx"
    onnx.save(_model(nodes, inputs, [("out", F if op == "TopK" else I64)], inits), src)
    sizes = {"n": 6}
    feeds = {name: np.random.default_rng(1).uniform(0, 1, [sizes.get(d, d) for d in shape]).astype(np.float32)
             for name, shape in inputs}
    with pytest.raises(UnsupportedError, match=f"node 'the_op' \\({op}\\).*{why}"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs=feeds)
