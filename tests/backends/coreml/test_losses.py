"""Core ML lowerings of CastLike, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: each in a small model
converted to Core ML, its saved MIL program run by the host evaluator and compared with onnxruntime; and what
must still be refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.backends.coreml.hop import passed_coreml_hop
from tests.helpers.extras import require
from onnxbridge.errors import UnsupportedError

require("coremltools")

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=15):
    """Inputs and outputs ``(name, elem_type, shape)`` (a str dim is flexible), initializers ``(name, array)``."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _scalar(op: str, args: list[str], out: str, **attrs) -> list:
    """``op`` with its (rank 0) first output reshaped to [1]."""
    return [helper.make_node(op, args, [f"{out}0"], **attrs), helper.make_node("Reshape", [f"{out}0", "one"], [out])]


ONE = ("one", np.array([1], np.int64))


def _targets(shape, classes: int, ignore: int) -> np.ndarray:
    """Class indices with about a third of them ``ignore``."""
    t = RNG.integers(0, classes, shape)
    return np.where(RNG.random(shape) < 0.3, ignore, t).astype(np.int64)


def _scores(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# name -> (model, feeds)
CASES = {
    # [N, C, d1, d2], run-time weights, an in-range ignore_index, no reduction
    "nll_none_weight_ii": (
        _model([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], reduction="none",
                                 ignore_index=1)],
               [("x", F, [2, 3, 4, 5]), ("t", I64, [2, 4, 5]), ("w", F, [3])], [("y", F, [2, 4, 5])]),
        {"x": _scores(2, 3, 4, 5), "t": _targets((2, 4, 5), 3, 1), "w": np.array([0.5, 2.0, 1.5], np.float32)}),
    # [N, C]: a negative ignore_index (out of bounds if gathered), no weight: sum and mean over the kept ones;
    # constant targets
    "nll_nc_negative_ii": (
        _model(_scalar("NegativeLogLikelihoodLoss", ["x", "t"], "s", reduction="sum", ignore_index=-1)
               + _scalar("NegativeLogLikelihoodLoss", ["x", "t"], "m", ignore_index=-1)
               + [helper.make_node("NegativeLogLikelihoodLoss", ["x", "k"], ["c"], reduction="none")],
               [("x", F, [6, 5]), ("t", I64, [6])], [("s", F, [1]), ("m", F, [1]), ("c", F, [6])],
               [ONE, ("k", np.array([4, 3, 2, 1, 0, 0], np.int64))]),
        {"x": _scores(6, 5), "t": np.array([0, -1, 4, 2, -1, 3], np.int64)}),
    # [N, C, d1], constant weights, an ignore_index beyond C: mean = sum(w * loss) / sum(w)
    "nll_mean_weight_high_ii": (
        _model(_scalar("NegativeLogLikelihoodLoss", ["x", "t", "w"], "y", ignore_index=10),
               [("x", F, [3, 4, 7]), ("t", I64, [3, 7])], [("y", F, [1])],
               [ONE, ("w", np.array([0.2, 1.0, 3.0, 0.7], np.float32))]),
        {"x": _scores(3, 4, 7), "t": _targets((3, 7), 4, 10)}),
    # both outputs, weights and ignore_index, scores of +-1000 (log(softmax) would be -inf where ours is finite)
    "sce_log_prob": (
        _model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y", "lp"], reduction="none",
                                 ignore_index=-5)],
               [("x", F, [2, 4, 3]), ("t", I64, [2, 3]), ("w", F, [4])], [("y", F, [2, 3]), ("lp", F, [2, 4, 3])]),
        {"x": np.concatenate([_scores(1, 4, 3), np.array([[[1000, -1000, 0]] * 4], np.float32)]),
         "t": np.array([[0, -5, 3], [1, 2, -5]], np.int64), "w": np.array([1.0, 0.5, 2.0, 0.25], np.float32)}),
    # default reduction (mean) without weights over the kept targets, and sum with the flexible batch
    "sce_mean_sum": (
        _model(_scalar("SoftmaxCrossEntropyLoss", ["x", "t"], "m", ignore_index=2)
               + _scalar("SoftmaxCrossEntropyLoss", ["x", "t"], "s", reduction="sum"),
               [("x", F, ["n", 5, 2, 3]), ("t", I64, ["n", 2, 3])], [("m", F, [1]), ("s", F, [1])], [ONE]),
        {"x": _scores(3, 5, 2, 3), "t": _targets((3, 2, 3), 5, 2)}),
    # to fp16 and double run-time tensors, to a constant int64 (truncating toward zero), int64 to float
    "castlike": (
        _model([helper.make_node("CastLike", ["x", "h"], ["a"]), helper.make_node("CastLike", ["x", "d"], ["b"]),
                helper.make_node("CastLike", ["x", "k"], ["c"]), helper.make_node("CastLike", ["i", "x"], ["e"])],
               [("x", F, [2, 3]), ("h", TensorProto.FLOAT16, [1]), ("d", TensorProto.DOUBLE, [1]), ("i", I64, [4])],
               [("a", TensorProto.FLOAT16, [2, 3]), ("b", TensorProto.DOUBLE, [2, 3]), ("c", I64, [2, 3]),
                ("e", F, [4])], [("k", np.array([7], np.int64))]),
        {"x": np.array([[-2.7, -0.5, 0.4], [1.5, 3.99, 100.25]], np.float32), "h": np.ones(1, np.float16),
         "d": np.ones(1, np.float64), "i": np.array([-3, 0, 5, 1 << 20], np.int64)}),
}


def _convert(model: onnx.ModelProto, feeds: dict, tmp_path: Path) -> dict:
    return passed_coreml_hop(model, tmp_path, inputs=feeds)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.fast_cases("castlike")
def test_lowering_matches_onnxruntime(name, tmp_path):
    model, feeds = CASES[name]
    rep = _convert(model, feeds, tmp_path)
    ops = set(rep["artifact"]["backend"]["ops"])
    assert ("cast" if name == "castlike" else "gather_along_axis") in ops
    if name == "sce_mean_sum":  # the batch stays flexible, and the validation also runs it grown
        assert rep["artifact"]["backend"]["flexible_inputs"]["x"][0] == [1, 1024]
        assert [s["x"][0] for s in rep["inputs"]["samples"]] == [3, 4]


@pytest.mark.slow
def test_a_rank_0_loss_converts(tmp_path):
    """reduction='mean' straight to the graph output (rank 0, as ONNX gives it)."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y"], ignore_index=0)
    model = _model([node], [("x", F, [4, 3]), ("t", I64, [4]), ("w", F, [3])], [("y", F, [])])
    _convert(model, {"x": _scores(4, 3), "t": np.array([0, 1, 2, 1], np.int64),
                     "w": np.array([1.0, 2.0, 3.0], np.float32)}, tmp_path)


@pytest.mark.parametrize("node,inputs,out,why", [
    (helper.make_node("CastLike", ["x", "like"], ["y"]), [("x", F, [3]), ("like", I64, [1])], I64,
     "run-time integer tensor"),
    (helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="none", ignore_index=1 << 40),
     [("x", F, [2, 3]), ("t", I64, [2])], F, "beyond int32"),
], ids=["castlike_to_int_input", "ignore_index_beyond_int32"])
def test_what_cannot_be_exact_is_refused(node, inputs, out, why, tmp_path):
    """An int64 ``like`` may be int8 or int64 in ONNX (Core ML holds both as int32); an ignore_index no int32
    target can equal."""
    model = _model([node], inputs, [("y", out, None)])
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    feeds = {i[0]: np.zeros(i[2], np.float32 if i[1] == F else np.int64) for i in inputs}
    with pytest.raises(UnsupportedError, match=f"{node.op_type}.*{why}"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs=feeds)
