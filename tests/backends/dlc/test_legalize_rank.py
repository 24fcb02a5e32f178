"""The rank-6 window rule with a dynamic batch: the batch is read from the input's shape at run time (torch's
Shape -> Gather -> Unsqueeze -> Concat chain), merged into a run the Reshape infers (-1), and the final Reshape keeps
the model's own shape tensor; the rewrite is exact at every batch size and no tensor has rank > 5."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.backends.dlc.legalize.rules import RANK6_TRANSPOSE
from onnxbridge.legalize import Graph, apply

W, H, C = 2, 4, 3  # window, grid side, channels


def _partition(final_minus_one: bool = True) -> onnx.ModelProto:
    """x [B, H, H, C] -> [B, H/W, W, H/W, W, C] (B from Shape(x)) -> permute(0, 1, 3, 2, 4, 5) -> [-1, W, W, C]."""
    consts = {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64),
              "rest": np.array([H // W, W, H // W, W, C], np.int64),
              "out": np.array([-1 if final_minus_one else 0, W, W, C], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["b"]),
             helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
             helper.make_node("Concat", ["b1", "rest"], ["shape6"], axis=0),
             helper.make_node("Reshape", ["x", "shape6"], ["r6"]),
             helper.make_node("Transpose", ["r6"], ["t6"], perm=[0, 1, 3, 2, 4, 5]),
             helper.make_node("Reshape", ["t6", "out"], ["y"], name="windows")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", H, H, C])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_dynamic_batch_window_partition_is_rewritten_exactly():
    model = _partition()
    assert Graph(model).int_values("shape6") == [None, H // W, W, H // W, W, C]
    legal, fired = apply(model, [RANK6_TRANSPOSE])
    assert fired == ["rank6-reshape-transpose-to-rank5 (node windows)"]
    ranks = [len(v.type.tensor_type.shape.dim) for v in onnx.shape_inference.infer_shapes(legal).graph.value_info]
    assert ranks and max(ranks) <= 5
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, H, H, C)).astype(np.float32)
        np.testing.assert_array_equal(_run(legal, x), _run(model, x))


def test_a_zero_in_the_final_shape_is_left_alone():
    """A 0 copies a dim of the Reshape's input, which the rewrite changes: no rewrite (the backend refuses)."""
    _, fired = apply(_partition(final_minus_one=False), [RANK6_TRANSPOSE])
    assert fired == []


@pytest.mark.parametrize("op, a, b, want", [("Div", -7, 2, -3), ("Div", 7, 2, 3), ("Mul", 3, None, None)])
def test_int_values_follow_onnx_integer_arithmetic(op, a, b, want):
    inits = [numpy_helper.from_array(np.array([a], np.int64), "a")]
    inputs = []
    if b is None:
        inputs = [helper.make_tensor_value_info("b", TensorProto.INT64, [1])]
    else:
        inits.append(numpy_helper.from_array(np.array([b], np.int64), "b"))
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert Graph(model).int_values("y") == (None if b is None else [want])
