"""QNN rules for indexing ops: Trilu by a constant mask, CumSum by a triangular MatMul, ArgMax/ArgMin
select_last_index, Hardmax, and non-negative GatherElements/ScatterElements indices."""
from __future__ import annotations

import numpy as np
from onnx import helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import FLOATS, Nodes, base_name, float_input, int_attr, single


def _trilu_k(graph: Graph, match: Match) -> int | None:
    k = match.inputs.get("in1", "")
    if not k:
        return 0
    v = graph.value(k)
    return int(v.reshape(())) if v is not None and v.size == 1 else None


def trilu_condition(graph: Graph, match: Match) -> bool:
    shape = graph.shape(match.inputs["in0"])
    return shape is not None and len(shape) >= 2 and graph.elem_type(match.inputs["in0"]) != 0 and \
        _trilu_k(graph, match) is not None


def trilu_replacement(graph: Graph, match: Match) -> list:
    """Where(mask, x, 0): exact for every value (a Mul by 0/1 would turn inf into NaN)."""
    node, x = match.nodes[0], match.inputs["in0"]
    rows, cols = graph.shape(x)[-2:]
    k = _trilu_k(graph, match)
    upper = next((a.i for a in node.attribute if a.name == "upper"), 1)
    mask = np.triu(np.ones((rows, cols), bool), k) if upper else np.tril(np.ones((rows, cols), bool), k)
    dtype = helper.tensor_dtype_to_np_dtype(graph.elem_type(x))
    base = node.name or "trilu"
    return [helper.make_node("Where", [graph.constant(f"{base}_mask", mask), x,
                                       graph.constant(f"{base}_zero", np.zeros((), dtype))],
                             match.outputs, name=graph.fresh(base))]


def _cumsum_axis(graph: Graph, match: Match) -> int | None:
    shape, v = graph.shape(match.inputs["in0"]), graph.value(match.inputs["in1"])
    if shape is None or not shape or v is None or v.size != 1:
        return None
    axis = int(v.reshape(()))
    return axis % len(shape) if -len(shape) <= axis < len(shape) else None


def cumsum_condition(graph: Graph, match: Match) -> bool:
    """Float CumSum with ``exclusive`` or ``reverse`` (the QNN EP takes only the plain one) on a static axis."""
    node = match.nodes[0]
    return graph.elem_type(match.inputs["in0"]) in FLOATS and _cumsum_axis(graph, match) is not None and \
        bool(int_attr(node, "exclusive", 0) or int_attr(node, "reverse", 0))


def cumsum_replacement(graph: Graph, match: Match) -> list:
    """y = x @ T along the last axis (the axis moved there and back by Transpose), T[i, j] = 1 where x[i] adds
    into y[j]: i <= j (i < j exclusive), or i >= j (i > j) reversed."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape, axis = graph.shape(x), _cumsum_axis(graph, match)
    n = shape[axis]
    exclusive, reverse = int_attr(node, "exclusive", 0), int_attr(node, "reverse", 0)
    ones = np.ones((n, n), helper.tensor_dtype_to_np_dtype(graph.elem_type(x)))
    table = np.tril(ones, -exclusive) if reverse else np.triu(ones, exclusive)
    base = node.name or "cumsum"
    weights = graph.constant(f"{base}_triangle", table)
    if axis == len(shape) - 1:
        return [helper.make_node("MatMul", [x, weights], match.outputs, name=graph.fresh(base))]
    perm = list(range(len(shape)))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved, summed = graph.fresh(f"{base}_moved"), graph.fresh(f"{base}_summed")
    return [helper.make_node("Transpose", [x], [moved], name=moved, perm=perm),
            helper.make_node("MatMul", [moved, weights], [summed], name=summed),
            helper.make_node("Transpose", [summed], match.outputs, name=graph.fresh(base), perm=perm)]


TRILU = Rule("trilu-to-where-mask", single("Trilu"), trilu_condition, trilu_replacement)


CUMSUM = Rule("cumsum-to-matmul", single("CumSum"), cumsum_condition, cumsum_replacement)


def _arg_axis(graph: Graph, match: Match) -> int | None:
    shape = graph.shape(match.inputs["in0"])
    if shape is None or not shape:
        return None
    return int_attr(match.nodes[0], "axis", 0) % len(shape)


def arg_last_condition(graph: Graph, match: Match) -> bool:
    return bool(int_attr(match.nodes[0], "select_last_index", 0)) and _arg_axis(graph, match) is not None


def arg_last_replacement(graph: Graph, match: Match) -> list:
    """n - 1 - ArgMax(x reversed along the axis by a Gather): the last extreme is the first one reversed."""
    node, x = match.nodes[0], match.inputs["in0"]
    axis = _arg_axis(graph, match)
    n = graph.shape(x)[axis]
    e = Nodes(graph, base_name(match, node.op_type.lower()))
    reversed_x = e("Gather", [x, e.const("reverse", np.arange(n - 1, -1, -1, dtype=np.int64))], axis=axis)
    first = e(node.op_type, [reversed_x], axis=axis, keepdims=int_attr(node, "keepdims", 1))
    e("Sub", [e.const("last", np.array(n - 1, np.int64)), first], node.output[0])
    return e.nodes


def elements_condition(graph: Graph, match: Match) -> bool:
    """Indices that may be negative (run-time, or a constant holding some) along an axis of static size: the HTP
    reads a negative index as out of range. ScatterElements only without a reduction (the QNN EP takes no other)."""
    node, data, indices = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    shape, value = graph.shape(data), graph.value(indices)
    reduction = next((a.s for a in node.attribute if a.name == "reduction"), b"none")
    if reduction != b"none" or not shape or not -len(shape) <= int_attr(node, "axis", 0) < len(shape):
        return False
    return value is None or bool((value < 0).any())


def elements_replacement(graph: Graph, match: Match) -> list:
    """The op on Where(indices < 0, indices + n, indices) (n: the axis' size), a constant folded at once."""
    node, data, indices = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    n = graph.shape(data)[int_attr(node, "axis", 0)]
    e = Nodes(graph, base_name(match, node.op_type.lower()))
    value = graph.value(indices)
    if value is not None:
        fixed = e.const("indices", np.where(value < 0, value + n, value).astype(value.dtype))
    else:
        dtype = helper.tensor_dtype_to_np_dtype(graph.elem_type(indices))
        wrapped = e("Add", [indices, e.const("size", np.array(n, dtype))])
        fixed = e("Where", [e("Less", [indices, e.const("zero", np.array(0, dtype))]), wrapped, indices])
    inputs = [data, fixed, *node.input[2:]]
    e.nodes.append(helper.make_node(node.op_type, inputs, list(node.output), name=graph.fresh(e.base),
                                    domain=node.domain))
    e.nodes[-1].attribute.extend(node.attribute)
    return e.nodes


def hardmax_condition(graph: Graph, match: Match) -> bool:
    """Opset 13+ (one axis; older Hardmax flattens) on a float x of static shape."""
    return graph.opset >= 13 and float_input(graph, match) and bool(graph.shape(match.inputs["in0"]))


def hardmax_replacement(graph: Graph, match: Match) -> list:
    """1 where the position along the axis is ArgMax's (the first maximum, as Hardmax picks), else 0."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape = graph.shape(x)
    axis = int_attr(node, "axis", -1) % len(shape)
    e = Nodes(graph, base_name(match, "hardmax"))
    positions = np.arange(shape[axis], dtype=np.int64).reshape([-1] + [1] * (len(shape) - axis - 1))
    hit = e("Equal", [e("ArgMax", [x], axis=axis, keepdims=1), e.const("positions", positions)])
    e("Cast", [hit], node.output[0], to=graph.elem_type(x))
    return e.nodes


ARGMAX_LAST = Rule("argmax-last-to-reversed", single("ArgMax"), arg_last_condition, arg_last_replacement)


ARGMIN_LAST = Rule("argmin-last-to-reversed", single("ArgMin"), arg_last_condition, arg_last_replacement)


HARDMAX = Rule("hardmax-to-equal-argmax", single("Hardmax"), hardmax_condition, hardmax_replacement)


GATHER_ELEMENTS = Rule("gather-elements-nonnegative-indices", single("GatherElements"), elements_condition,
                       elements_replacement)


SCATTER_ELEMENTS = Rule("scatter-elements-nonnegative-indices", single("ScatterElements"), elements_condition,
                        elements_replacement)
