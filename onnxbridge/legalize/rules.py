"""Rule sets per backend, and the rules for onnxruntime's QNN execution provider (the DLC backend): rewrite the ops
it refuses into ops it takes, exactly (or up to float rounding). A lone ``Erf`` has no exact rewrite and is left for
the backend to refuse."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.rank import RANK6_TRANSPOSE

FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
GELU_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)  # what com.microsoft::Gelu and ONNX Gelu share


def _scalar(graph: Graph, name: str, want: float, rtol: float = 0.0) -> bool:
    """Whether ``name`` is a one-element constant equal to ``want`` (within ``rtol``)."""
    v = graph.value(name)
    return v is not None and v.size == 1 and v.ndim <= 1 and np.issubdtype(v.dtype, np.floating) and \
        math.isclose(float(v.reshape(())), want, rel_tol=rtol)


def _other(node, name: str) -> str | None:
    """The other input of a two-input commutative ``node`` one of whose inputs is ``name``."""
    a, b = node.input
    return b if a == name else a if b == name else None


# --- exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))) -> Gelu -------------------------------------------------------

def _erf_arg(graph: Graph, one_plus_erf: str):
    """``(x, [add, erf, scale])`` when ``one_plus_erf`` is Add(Erf(x / sqrt2 or x * 1/sqrt2), 1), else None."""
    add = graph.produced_by(one_plus_erf, "Add")
    if add is None:
        return None
    for erf_out in add.input:
        erf = graph.produced_by(erf_out, "Erf")
        if erf is None or not _scalar(graph, _other(add, erf_out), 1.0):
            continue
        scale = graph.produced_by(erf.input[0], "Div") or graph.produced_by(erf.input[0], "Mul")
        if scale is None:
            return None
        if scale.op_type == "Div" and _scalar(graph, scale.input[1], math.sqrt(2), 1e-6):
            return scale.input[0], [scale, erf, add]
        for x in scale.input if scale.op_type == "Mul" else ():
            if _scalar(graph, _other(scale, x), 1 / math.sqrt(2), 1e-6):
                return x, [scale, erf, add]
    return None


def _factors(graph: Graph, root) -> list[tuple[list[str], list]]:
    """The ways to read Mul ``root`` as a product of three factors, one operand being a Mul used only there:
    ``(factors, [inner mul])``."""
    out = []
    for i, name in enumerate(root.input):
        inner = graph.produced_by(name, "Mul")
        if inner is not None:
            out.append(([*inner.input, root.input[1 - i]], [inner]))
    return out


def gelu_pattern(graph: Graph, node) -> Match | None:
    """Mul nodes computing x * 0.5 * (1 + erf(x / sqrt(2))) in any order of the three factors."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    for factors, muls in _factors(graph, node):
        half = next((f for f in factors if _scalar(graph, f, 0.5)), None)
        if half is not None:
            rest = list(factors)
            rest.remove(half)
            for a, b in (rest, rest[::-1]):
                found = _erf_arg(graph, b)
                if found is not None and found[0] == a:
                    return Match([*found[1], *muls, node], {"x": a}, [node.output[0]])
    return None


def gelu_condition(graph: Graph, match: Match) -> bool:
    """A float type Gelu takes, and a rank of at least 1 (a [1]-shaped constant would broadcast a scalar x)."""
    x = graph.types.get(match.inputs["x"])
    return x is not None and x.elem_type in GELU_TYPES and x.HasField("shape") and len(x.shape.dim) >= 1


def gelu_replacement(graph: Graph, match: Match) -> list:
    """ONNX ``Gelu`` from opset 20, else ``com.microsoft::Gelu`` (the same exact erf GELU; both on the QNN EP)."""
    name = graph.fresh(match.nodes[-1].name or "gelu")
    if graph.opset >= 20:
        return [helper.make_node("Gelu", [match.inputs["x"]], match.outputs, name=name)]
    graph.use_opset("com.microsoft", 1)
    return [helper.make_node("Gelu", [match.inputs["x"]], match.outputs, name=name, domain="com.microsoft")]


# --- IsNaN(x) -> Not(Equal(x, x)) ------------------------------------------------------------------------------

def _single(op_type: str):
    def pattern(graph: Graph, node) -> Match | None:
        if node.op_type != op_type or node.domain not in ("", "ai.onnx"):
            return None
        return Match([node], {f"in{i}": name for i, name in enumerate(node.input)}, list(node.output))
    return pattern


def isnan_condition(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["in0"]) in FLOATS


def isnan_replacement(graph: Graph, match: Match) -> list:
    x, base = match.inputs["in0"], match.nodes[0].name or "isnan"
    same = graph.fresh(f"{base}_equal")
    return [helper.make_node("Equal", [x, x], [same], name=same),
            helper.make_node("Not", [same], match.outputs, name=graph.fresh(f"{base}_not"))]


# --- Trilu with static shape -> Where by a constant triangular mask ---------------------------------------------

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


# --- CumSum (exclusive / reverse) along a static axis -> MatMul by a triangular ones matrix -------------------

def _cumsum_axis(graph: Graph, match: Match) -> int | None:
    shape, v = graph.shape(match.inputs["in0"]), graph.value(match.inputs["in1"])
    if shape is None or not shape or v is None or v.size != 1:
        return None
    axis = int(v.reshape(()))
    return axis % len(shape) if -len(shape) <= axis < len(shape) else None


def _attr(node, name: str) -> int:
    return next((a.i for a in node.attribute if a.name == name), 0)


def cumsum_condition(graph: Graph, match: Match) -> bool:
    """Float CumSum with ``exclusive`` or ``reverse`` (the QNN EP takes only the plain one) on a static axis."""
    node = match.nodes[0]
    return graph.elem_type(match.inputs["in0"]) in FLOATS and _cumsum_axis(graph, match) is not None and \
        bool(_attr(node, "exclusive") or _attr(node, "reverse"))


def cumsum_replacement(graph: Graph, match: Match) -> list:
    """y = x @ T along the last axis (the axis moved there and back by Transpose), T[i, j] = 1 where x[i] adds
    into y[j]: i <= j (i < j exclusive), or i >= j (i > j) reversed."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape, axis = graph.shape(x), _cumsum_axis(graph, match)
    n = shape[axis]
    exclusive, reverse = _attr(node, "exclusive"), _attr(node, "reverse")
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


# --- Identity (left by folding where it makes a graph output) -> Reshape to its own static shape -------------

def identity_condition(graph: Graph, match: Match) -> bool:
    x = match.inputs["in0"]
    return graph.shape(x) is not None and graph.value(x) is None


def identity_replacement(graph: Graph, match: Match) -> list:
    """Reshape to the same static shape: an exact copy, as a QNN op."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape = graph.constant(f"{node.name or 'identity'}_shape", np.array(graph.shape(x), np.int64))
    return [helper.make_node("Reshape", [x, shape], match.outputs, name=graph.fresh(node.name or "identity"))]


GELU = Rule("gelu-erf-to-gelu", gelu_pattern, gelu_condition, gelu_replacement)
ISNAN = Rule("isnan-to-not-equal", _single("IsNaN"), isnan_condition, isnan_replacement)
TRILU = Rule("trilu-to-where-mask", _single("Trilu"), trilu_condition, trilu_replacement)
CUMSUM = Rule("cumsum-to-matmul", _single("CumSum"), cumsum_condition, cumsum_replacement)
IDENTITY = Rule("identity-to-reshape", _single("Identity"), identity_condition, identity_replacement)
# the rules the DLC backend applies to its prepared model, for onnxruntime's QNN execution provider
QNN_RULES = (GELU, ISNAN, TRILU, CUMSUM, IDENTITY, RANK6_TRANSPOSE)
# the rules the Core ML backend applies before lowering
COREML_RULES = (RANK6_TRANSPOSE,)
