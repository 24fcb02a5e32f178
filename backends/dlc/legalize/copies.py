"""QNN rules that turn ops into copies, constants or plainer arithmetic: Identity, inference Dropout, one-input
Mean/Sum/Max/Min, Clip with run-time bounds, Gemm with run-time operands, static Shape/Size."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import FLOATS, Nodes, base_name, float_attr, int_attr, is_used, single


def identity_condition(graph: Graph, match: Match) -> bool:
    x = match.inputs["in0"]
    return graph.shape(x) is not None and graph.value(x) is None


def identity_replacement(graph: Graph, match: Match) -> list:
    """Reshape to the same static shape: an exact copy, as a QNN op."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape = graph.constant(f"{node.name or 'identity'}_shape", np.array(graph.shape(x), np.int64))
    return [helper.make_node("Reshape", [x, shape], match.outputs, name=graph.fresh(node.name or "identity"))]


IDENTITY = Rule("identity-to-reshape", single("Identity"), identity_condition, identity_replacement)


def dropout_condition(graph: Graph, match: Match) -> bool:
    """Inference: ``y`` is ``x`` exactly. x needs a static shape (the copy is a Reshape to it, as for Identity)."""
    mode = match.inputs.get("in2", "")
    off = not mode or (graph.value(mode) is not None and not graph.value(mode).any())
    return off and graph.shape(match.inputs["in0"]) is not None and graph.value(match.inputs["in0"]) is None


def dropout_replacement(graph: Graph, match: Match) -> list:
    """y = Reshape(x) to its own shape; a used mask = Or(c, Not(c)) for c = x < 0: true everywhere, NaN too,
    computed from x (the QNN EP leaves an Expand of a constant to the CPU)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "dropout"))
    e("Reshape", [x, e.const("shape", np.array(graph.shape(x), np.int64))], node.output[0])
    if len(node.output) > 1 and is_used(graph, node.output[1]):
        c = e("Less", [x, e.scalar("zero", 0, x)])
        e("Or", [c, e("Not", [c])], node.output[1])
    return e.nodes


VARIADIC = ("Mean", "Sum", "Max", "Min")


def one_input_pattern(graph: Graph, node) -> Match | None:
    """A variadic op (``VARIADIC``) with a single input: the QNN EP takes them with two or more."""
    if node.op_type not in VARIADIC or len(node.input) != 1:
        return None
    return single(node.op_type)(graph, node)


def clip_condition(graph: Graph, match: Match) -> bool:
    """Opset 11+ float Clip whose bounds are not both constants (the QNN EP takes only constant min and max)."""
    bounds = [match.inputs.get(k, "") for k in ("in1", "in2")]
    return graph.opset >= 11 and graph.shape(match.inputs["in0"]) is not None and \
        graph.elem_type(match.inputs["in0"]) in FLOATS and any(not b or graph.value(b) is None for b in bounds)


def clip_replacement(graph: Graph, match: Match) -> list:
    """min(max(x, lo), hi): hi wherever lo > hi, as Clip gives; without bounds a copy."""
    node, x = match.nodes[0], match.inputs["in0"]
    lo, hi = match.inputs.get("in1", ""), match.inputs.get("in2", "")
    if not lo and not hi:
        return identity_replacement(graph, match)
    e = Nodes(graph, base_name(match, "clip"))
    y = e("Max", [x, lo], "" if hi else node.output[0]) if lo else x
    if hi:
        e("Min", [y, hi], node.output[0])
    return e.nodes


def gemm_condition(graph: Graph, match: Match) -> bool:
    """Float Gemm the QNN EP takes only as a FullyConnected (constant B and C, alpha = beta = 1): a run-time B or C
    or a scaling factor."""
    node = match.nodes[0]
    if graph.elem_type(match.inputs["in0"]) not in FLOATS or any(len(graph.shape(match.inputs[k]) or []) != 2
                                                                  for k in ("in0", "in1")):
        return False
    c = match.inputs.get("in2", "")
    scaled = float_attr(node, "alpha", 1.0) != 1.0 or (c and float_attr(node, "beta", 1.0) != 1.0)
    return bool(scaled) or any(graph.value(t) is None for t in (match.inputs["in1"], c) if t)


def gemm_replacement(graph: Graph, match: Match) -> list:
    """alpha * (A' @ B') + beta * C, A' and B' transposed where transA / transB say; a C of another shape than
    the [M, N] result is first Expanded to it (the QNN EP fuses MatMul + Add of a [1, N] input into a
    FullyConnected whose bias input it reshapes to [N], so the DLC's input is not the model's)."""
    node, out = match.nodes[0], match.nodes[0].output[0]
    x, b, c = match.inputs["in0"], match.inputs["in1"], match.inputs.get("in2", "")
    trans_a, trans_b = int_attr(node, "transA", 0), int_attr(node, "transB", 0)
    alpha, beta = float_attr(node, "alpha", 1.0), float_attr(node, "beta", 1.0)
    e = Nodes(graph, base_name(match, "gemm"))
    a = e("Transpose", [x], perm=[1, 0]) if trans_a else x
    b = e("Transpose", [b], perm=[1, 0]) if trans_b else b
    y = e("MatMul", [a, b], out if not c and alpha == 1.0 else "")
    if alpha != 1.0:
        y = e("Mul", [y, e.scalar("alpha", alpha, x)], "" if c else out)
    if c:
        mn = [graph.shape(x)[1 if trans_a else 0], graph.shape(match.inputs["in1"])[0 if trans_b else 1]]
        if graph.shape(c) != mn:
            c = e("Expand", [c, e.const("shape", np.array(mn, np.int64))])
        e("Add", [y, e("Mul", [c, e.scalar("beta", beta, x)]) if beta != 1.0 else c], out)
    return e.nodes


def static_shape_condition(graph: Graph, match: Match) -> bool:
    return graph.shape(match.inputs["in0"]) is not None


def shape_replacement(graph: Graph, match: Match) -> list:
    """The dims from ``start`` to ``end`` (clamped, negative from the back, as Shape-15 reads them), or the element
    count for Size, as a Constant named like the output."""
    node, dims = match.nodes[0], graph.shape(match.inputs["in0"])
    if node.op_type == "Size":
        value = np.array(math.prod(dims), np.int64)
    else:
        end = next((a.i for a in node.attribute if a.name == "end"), len(dims))
        value = np.array(dims[slice(int_attr(node, "start", 0), end)], np.int64)
    return [helper.make_node("Constant", [], list(node.output), name=graph.fresh(base_name(match, "shape")),
                             value=helper.make_tensor(graph.fresh("value"), TensorProto.INT64, value.shape,
                                                      value.reshape(-1).tolist()))]


SHAPE = Rule("shape-to-constant", single("Shape"), static_shape_condition, shape_replacement)


SIZE = Rule("size-to-constant", single("Size"), static_shape_condition, shape_replacement)


DROPOUT = Rule("dropout-to-copy", single("Dropout"), dropout_condition, dropout_replacement)


ONE_INPUT = Rule("one-input-variadic-to-reshape", one_input_pattern, identity_condition, identity_replacement)


CLIP = Rule("clip-to-max-min", single("Clip"), clip_condition, clip_replacement)


GEMM = Rule("gemm-to-matmul", single("Gemm"), gemm_condition, gemm_replacement)
