"""Rule sets per backend, and the rules for onnxruntime's QNN execution provider (the DLC backend): rewrite the ops
it refuses, or that its HTP computes wrongly (measured on onnxruntime-qnn 2.7's simulator, each noted where it
applies), into ops it takes, exactly (or up to float rounding: textbook identities such as sinh = (e^x - e^-x) / 2
count). A lone ``Erf`` or a ``Tan`` has no such rewrite and is left for the backend to refuse. Rules in ``REFOLD``
leave constants that onnxruntime's folding takes further; the DLC backend folds again after them."""
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


def _float_attr(node, name: str, default: float) -> float:
    return next((a.f for a in node.attribute if a.name == name), default)


def _int_attr(node, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


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


def cumsum_condition(graph: Graph, match: Match) -> bool:
    """Float CumSum with ``exclusive`` or ``reverse`` (the QNN EP takes only the plain one) on a static axis."""
    node = match.nodes[0]
    return graph.elem_type(match.inputs["in0"]) in FLOATS and _cumsum_axis(graph, match) is not None and \
        bool(_int_attr(node, "exclusive", 0) or _int_attr(node, "reverse", 0))


def cumsum_replacement(graph: Graph, match: Match) -> list:
    """y = x @ T along the last axis (the axis moved there and back by Transpose), T[i, j] = 1 where x[i] adds
    into y[j]: i <= j (i < j exclusive), or i >= j (i > j) reversed."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape, axis = graph.shape(x), _cumsum_axis(graph, match)
    n = shape[axis]
    exclusive, reverse = _int_attr(node, "exclusive", 0), _int_attr(node, "reverse", 0)
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


# --- shared by the rewrites below: fresh-named nodes and constants, reductions over static axes ------------------

class _Nodes:
    """The nodes of one replacement, each output named fresh from ``base`` unless given."""

    def __init__(self, graph: Graph, base: str):
        self.graph, self.base, self.nodes = graph, base, []

    def __call__(self, op_type: str, inputs: list[str], out: str = "", **attrs) -> str:
        out = out or self.graph.fresh(f"{self.base}_{op_type.lower()}")
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.graph.fresh(self.base), **attrs))
        return out

    def const(self, what: str, array) -> str:
        return self.graph.constant(f"{self.base}_{what}", np.asarray(array))

    def scalar(self, what: str, value: float, like: str) -> str:
        """A 0-d constant of ``like``'s element type."""
        return self.const(what, np.array(value, helper.tensor_dtype_to_np_dtype(self.graph.elem_type(like))))

    def reduce(self, op_type: str, x: str, axes: list[int], out: str = "", keepdims: int = 1) -> str:
        """``op_type`` over ``axes``: axes as an input from opset 18 (13 for ReduceSum)."""
        if self.graph.opset >= (13 if op_type == "ReduceSum" else 18):
            return self(op_type, [x, self.const("axes", np.array(axes, np.int64))], out, keepdims=keepdims)
        return self(op_type, [x], out, axes=axes, keepdims=keepdims)


def _used(graph: Graph, name: str) -> bool:
    return bool(name) and (graph.consumers.get(name, 0) > 0 or name in graph.outputs)


def _float_input(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["in0"]) in FLOATS


def _base(match: Match, default: str) -> str:
    return match.nodes[-1].name or default


# --- LayerNormalization the QNN EP does not take -> ReduceMean, Sub, Mul, Sqrt, Div ------------------------------

def layernorm_condition(graph: Graph, match: Match) -> bool:
    """Float32 x of known rank (stash_type changes nothing then), and Mean or InvStdDev used or a run-time scale or
    bias: the QNN EP takes only the Y output with constant scale and bias."""
    node, x = match.nodes[0], match.inputs["in0"]
    t = graph.types.get(x)
    if graph.elem_type(x) != TensorProto.FLOAT or t is None or not t.HasField("shape") or not t.shape.dim:
        return False
    params = [match.inputs[k] for k in ("in1", "in2") if match.inputs.get(k)]
    return any(_used(graph, o) for o in node.output[1:]) or any(graph.value(p) is None for p in params)


def layernorm_replacement(graph: Graph, match: Match) -> list:
    """mean = ReduceMean(x), d = x - mean, std = sqrt(ReduceMean(d * d) + eps); Y = d / std * scale + bias,
    Mean = mean, InvStdDev = 1 / std (reduced over the axes from ``axis`` on, dims kept)."""
    node, x = match.nodes[0], match.inputs["in0"]
    rank = len(graph.types[x].shape.dim)
    axis = _int_attr(node, "axis", -1) % rank
    outs = [*node.output, "", ""][:3]
    e = _Nodes(graph, _base(match, "layernorm"))
    axes = list(range(axis, rank))
    mean = e.reduce("ReduceMean", x, axes, outs[1] if _used(graph, outs[1]) else "")
    d = e("Sub", [x, mean])
    var = e.reduce("ReduceMean", e("Mul", [d, d]), axes)
    std = e("Sqrt", [e("Add", [var, e.scalar("epsilon", _float_attr(node, "epsilon", 1e-5), x)])])
    if _used(graph, outs[2]):
        e("Reciprocal", [std], outs[2])
    bias = match.inputs.get("in2", "")
    scaled = e("Mul", [e("Div", [d, std]), match.inputs["in1"]], "" if bias else outs[0])
    if bias:
        e("Add", [scaled, bias], outs[0])
    return e.nodes


# --- Dropout at inference (no training_mode, or a constant false) -> a copy; its mask all true ------------------

def dropout_condition(graph: Graph, match: Match) -> bool:
    """Inference: ``y`` is ``x`` exactly. x needs a static shape (the copy is a Reshape to it, as for Identity)."""
    mode = match.inputs.get("in2", "")
    off = not mode or (graph.value(mode) is not None and not graph.value(mode).any())
    return off and graph.shape(match.inputs["in0"]) is not None and graph.value(match.inputs["in0"]) is None


def dropout_replacement(graph: Graph, match: Match) -> list:
    """y = Reshape(x) to its own shape; a used mask = Or(c, Not(c)) for c = x < 0: true everywhere, NaN too,
    computed from x (the QNN EP leaves an Expand of a constant to the CPU)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "dropout"))
    e("Reshape", [x, e.const("shape", np.array(graph.shape(x), np.int64))], node.output[0])
    if len(node.output) > 1 and _used(graph, node.output[1]):
        c = e("Less", [x, e.scalar("zero", 0, x)])
        e("Or", [c, e("Not", [c])], node.output[1])
    return e.nodes


# --- one-input Mean / Sum / Max / Min -> a copy ------------------------------------------------------------------

VARIADIC = ("Mean", "Sum", "Max", "Min")


def one_input_pattern(graph: Graph, node) -> Match | None:
    """A variadic op (``VARIADIC``) with a single input: the QNN EP takes them with two or more."""
    if node.op_type not in VARIADIC or len(node.input) != 1:
        return None
    return _single(node.op_type)(graph, node)


# --- Clip with a run-time or missing bound -> Max, Min -----------------------------------------------------------

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
    e = _Nodes(graph, _base(match, "clip"))
    y = e("Max", [x, lo], "" if hi else node.output[0]) if lo else x
    if hi:
        e("Min", [y, hi], node.output[0])
    return e.nodes


# --- activations the QNN EP has no op for -> the ops it takes ---------------------------------------------------

def selu_replacement(graph: Graph, match: Match) -> list:
    """gamma * Elu(x, alpha)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "selu"))
    elu = e("Elu", [x], alpha=_float_attr(node, "alpha", 1.67326319217681884765625))
    e("Mul", [elu, e.scalar("gamma", _float_attr(node, "gamma", 1.05070102214813232421875), x)], node.output[0])
    return e.nodes


def celu_replacement(graph: Graph, match: Match) -> list:
    """alpha * Elu(x / alpha)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "celu"))
    alpha = e.scalar("alpha", _float_attr(node, "alpha", 1.0), x)
    e("Mul", [e("Elu", [e("Div", [x, alpha])], alpha=1.0), alpha], node.output[0])
    return e.nodes


def softsign_replacement(graph: Graph, match: Match) -> list:
    """x / (1 + |x|)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "softsign"))
    e("Div", [x, e("Add", [e("Abs", [x]), e.scalar("one", 1.0, x)])], node.output[0])
    return e.nodes


def _softplus(e: _Nodes, x: str, out: str = "") -> str:
    """max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|."""
    tail = e("Log", [e("Add", [e("Exp", [e("Neg", [e("Abs", [x])])]), e.scalar("one", 1.0, x)])])
    return e("Add", [e("Relu", [x]), tail], out)


def softplus_replacement(graph: Graph, match: Match) -> list:
    e = _Nodes(graph, _base(match, "softplus"))
    _softplus(e, match.inputs["in0"], match.nodes[0].output[0])
    return e.nodes


def mish_replacement(graph: Graph, match: Match) -> list:
    """x * tanh(softplus(x))."""
    x = match.inputs["in0"]
    e = _Nodes(graph, _base(match, "mish"))
    e("Mul", [x, e("Tanh", [_softplus(e, x)])], match.nodes[0].output[0])
    return e.nodes


def shrink_replacement(graph: Graph, match: Match) -> list:
    """Where(x < -lambd, x + bias, Where(x > lambd, x - bias, 0))."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "shrink"))
    lambd, bias = _float_attr(node, "lambd", 0.5), e.scalar("bias", _float_attr(node, "bias", 0.0), x)
    above = e("Where", [e("Greater", [x, e.scalar("lambd", lambd, x)]), e("Sub", [x, bias]),
                        e.scalar("zero", 0.0, x)])
    e("Where", [e("Less", [x, e.scalar("minus_lambd", -lambd, x)]), e("Add", [x, bias]), above], node.output[0])
    return e.nodes


def hardswish_pattern(graph: Graph, node) -> Match | None:
    """Mul(x, HardSigmoid(x)) in either order, the HardSigmoid used only there (what onnxruntime's folding inlines
    HardSwish into)."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    for name in node.input:
        hs = graph.produced_by(name, "HardSigmoid")
        if hs is not None and _other(node, name) == hs.input[0]:
            return Match([hs, node], {"x": hs.input[0]}, [node.output[0]])
    return None


def hardswish_condition(graph: Graph, match: Match) -> bool:
    """HardSigmoid's alpha 1/6 and beta 1/2: the product is HardSwish exactly."""
    hs = match.nodes[0]
    return math.isclose(_float_attr(hs, "alpha", 0.2), 1 / 6, rel_tol=1e-6) and \
        _float_attr(hs, "beta", 0.5) == 0.5 and graph.elem_type(match.inputs["x"]) in FLOATS


def hardswish_replacement(graph: Graph, match: Match) -> list:
    """One HardSwish: onnxruntime-qnn 2.7 computes HardSigmoid(x) * x wrongly on the HTP simulator (errors of 2.5
    on test_hardswish, measured; each op alone is right), while a HardSwish node is right."""
    name = graph.fresh(_base(match, "hardswish"))
    return [helper.make_node("HardSwish", [match.inputs["x"]], match.outputs, name=name)]


# --- ArgMax / ArgMin with select_last_index -> the first index along the reversed axis -------------------------

def _arg_axis(graph: Graph, match: Match) -> int | None:
    shape = graph.shape(match.inputs["in0"])
    if shape is None or not shape:
        return None
    return _int_attr(match.nodes[0], "axis", 0) % len(shape)


def arg_last_condition(graph: Graph, match: Match) -> bool:
    return bool(_int_attr(match.nodes[0], "select_last_index", 0)) and _arg_axis(graph, match) is not None


def arg_last_replacement(graph: Graph, match: Match) -> list:
    """n - 1 - ArgMax(x reversed along the axis by a Gather): the last extreme is the first one reversed."""
    node, x = match.nodes[0], match.inputs["in0"]
    axis = _arg_axis(graph, match)
    n = graph.shape(x)[axis]
    e = _Nodes(graph, _base(match, node.op_type.lower()))
    reversed_x = e("Gather", [x, e.const("reverse", np.arange(n - 1, -1, -1, dtype=np.int64))], axis=axis)
    first = e(node.op_type, [reversed_x], axis=axis, keepdims=_int_attr(node, "keepdims", 1))
    e("Sub", [e.const("last", np.array(n - 1, np.int64)), first], node.output[0])
    return e.nodes


# --- Xor of bools -> And(Or, Not(And)) ---------------------------------------------------------------------------

def xor_condition(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["in0"]) == TensorProto.BOOL


def xor_replacement(graph: Graph, match: Match) -> list:
    """(a or b) and not (a and b), broadcast as Xor is (the QNN EP leaves a NotEqual of bools to the CPU)."""
    a, b = match.inputs["in0"], match.inputs["in1"]
    e = _Nodes(graph, _base(match, "xor"))
    e("And", [e("Or", [a, b]), e("Not", [e("And", [a, b])])], match.nodes[0].output[0])
    return e.nodes


# --- Gemm with run-time B or C, or alpha / beta -> MatMul, Mul, Add ----------------------------------------------

def gemm_condition(graph: Graph, match: Match) -> bool:
    """Float Gemm the QNN EP takes only as a FullyConnected (constant B and C, alpha = beta = 1): a run-time B or C
    or a scaling factor."""
    node = match.nodes[0]
    if graph.elem_type(match.inputs["in0"]) not in FLOATS or any(len(graph.shape(match.inputs[k]) or []) != 2
                                                                  for k in ("in0", "in1")):
        return False
    c = match.inputs.get("in2", "")
    scaled = _float_attr(node, "alpha", 1.0) != 1.0 or (c and _float_attr(node, "beta", 1.0) != 1.0)
    return bool(scaled) or any(graph.value(t) is None for t in (match.inputs["in1"], c) if t)


def gemm_replacement(graph: Graph, match: Match) -> list:
    """alpha * (A' @ B') + beta * C, A' and B' transposed where transA / transB say; a C of another shape than
    the [M, N] result is first Expanded to it (the QNN EP fuses MatMul + Add of a [1, N] input into a
    FullyConnected whose bias input it reshapes to [N], so the DLC's input is not the model's)."""
    node, out = match.nodes[0], match.nodes[0].output[0]
    x, b, c = match.inputs["in0"], match.inputs["in1"], match.inputs.get("in2", "")
    trans_a, trans_b = _int_attr(node, "transA", 0), _int_attr(node, "transB", 0)
    alpha, beta = _float_attr(node, "alpha", 1.0), _float_attr(node, "beta", 1.0)
    e = _Nodes(graph, _base(match, "gemm"))
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


# --- Shape / Size of a tensor of static shape -> a constant (folding then takes what it feeds) -------------------

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
        value = np.array(dims[slice(_int_attr(node, "start", 0), end)], np.int64)
    return [helper.make_node("Constant", [], list(node.output), name=graph.fresh(_base(match, "shape")),
                             value=helper.make_tensor(graph.fresh("value"), TensorProto.INT64, value.shape,
                                                      value.reshape(-1).tolist()))]


# --- BatchNormalization at inference with run-time parameters -> Sub, Div, Sqrt, Mul, Add ------------------------

def batchnorm_condition(graph: Graph, match: Match) -> bool:
    """Inference (training_mode 0, only Y used) on a float x of static rank >= 2, some parameter not a constant:
    the QNN EP takes BatchNormalization with constant parameters only."""
    node, x = match.nodes[0], match.inputs["in0"]
    t = graph.types.get(x)
    if _int_attr(node, "training_mode", 0) or any(_used(graph, o) for o in node.output[1:]) or \
            graph.elem_type(x) not in FLOATS or t is None or not t.HasField("shape") or len(t.shape.dim) < 2:
        return False
    return len(match.inputs) == 5 and any(graph.value(match.inputs[f"in{i}"]) is None for i in range(1, 5))


def batchnorm_replacement(graph: Graph, match: Match) -> list:
    """(x - mean) / sqrt(var + epsilon) * scale + B, the [C] parameters reshaped to [C, 1, ...] against axis 1."""
    node, x = match.nodes[0], match.inputs["in0"]
    rank = len(graph.types[x].shape.dim)
    e = _Nodes(graph, _base(match, "batchnorm"))
    shape = e.const("param_shape", np.array([-1] + [1] * (rank - 2), np.int64))
    scale, bias, mean, var = (e("Reshape", [match.inputs[f"in{i}"], shape]) for i in range(1, 5))
    std = e("Sqrt", [e("Add", [var, e.scalar("epsilon", _float_attr(node, "epsilon", 1e-5), x)])])
    normalized = e("Div", [e("Sub", [x, mean]), std])
    e("Add", [e("Mul", [normalized, scale]), bias], node.output[0])
    return e.nodes


# --- GatherElements / ScatterElements indices -> made non-negative ---------------------------------------------

def elements_condition(graph: Graph, match: Match) -> bool:
    """Indices that may be negative (run-time, or a constant holding some) along an axis of static size: the HTP
    reads a negative index as out of range. ScatterElements only without a reduction (the QNN EP takes no other)."""
    node, data, indices = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    shape, value = graph.shape(data), graph.value(indices)
    reduction = next((a.s for a in node.attribute if a.name == "reduction"), b"none")
    if reduction != b"none" or not shape or not -len(shape) <= _int_attr(node, "axis", 0) < len(shape):
        return False
    return value is None or bool((value < 0).any())


def elements_replacement(graph: Graph, match: Match) -> list:
    """The op on Where(indices < 0, indices + n, indices) (n: the axis' size), a constant folded at once."""
    node, data, indices = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    n = graph.shape(data)[_int_attr(node, "axis", 0)]
    e = _Nodes(graph, _base(match, node.op_type.lower()))
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


# --- Hardmax (opset 13+) -> Equal(ArgMax, positions) -----------------------------------------------------------

def hardmax_condition(graph: Graph, match: Match) -> bool:
    """Opset 13+ (one axis; older Hardmax flattens) on a float x of static shape."""
    return graph.opset >= 13 and _float_input(graph, match) and bool(graph.shape(match.inputs["in0"]))


def hardmax_replacement(graph: Graph, match: Match) -> list:
    """1 where the position along the axis is ArgMax's (the first maximum, as Hardmax picks), else 0."""
    node, x = match.nodes[0], match.inputs["in0"]
    shape = graph.shape(x)
    axis = _int_attr(node, "axis", -1) % len(shape)
    e = _Nodes(graph, _base(match, "hardmax"))
    positions = np.arange(shape[axis], dtype=np.int64).reshape([-1] + [1] * (len(shape) - axis - 1))
    hit = e("Equal", [e("ArgMax", [x], axis=axis, keepdims=1), e.const("positions", positions)])
    e("Cast", [hit], node.output[0], to=graph.elem_type(x))
    return e.nodes


# --- IsInf -> Equal to +-inf ---------------------------------------------------------------------------------------

def isinf_condition(graph: Graph, match: Match) -> bool:
    """fp16 x only: on an fp32 model the HTP's Equal to +-inf is false everywhere (measured, onnxruntime-qnn 2.7:
    test_isinf), while at fp16 it is right."""
    return graph.elem_type(match.inputs["in0"]) == TensorProto.FLOAT16


def isinf_replacement(graph: Graph, match: Match) -> list:
    """Equal(x, inf), Equal(x, -inf), or both Or'ed, as detect_positive / detect_negative ask (neither: their And,
    false everywhere)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "isinf"))
    pos = _int_attr(node, "detect_positive", 1)
    neg = _int_attr(node, "detect_negative", 1)
    if pos != neg:
        e("Equal", [x, e.scalar("inf", math.inf if pos else -math.inf, x)], node.output[0])
        return e.nodes
    both = [e("Equal", [x, e.scalar("inf", math.inf, x)]), e("Equal", [x, e.scalar("minus_inf", -math.inf, x)])]
    e("Or" if pos else "And", both, node.output[0])
    return e.nodes


# --- hyperbolic and inverse trigonometric functions -> their identities in Exp, Log, Sqrt, Atan -----------------

def _identity(e: _Nodes, op_type: str, x: str, out: str) -> None:
    """``op_type``(x) by its textbook identity, written to ``out``."""
    one = e.scalar("one", 1.0, x)
    if op_type in ("Sinh", "Cosh"):  # (e^x -+ e^-x) / 2
        both = [e("Exp", [x]), e("Exp", [e("Neg", [x])])]
        e("Mul", [e("Sub" if op_type == "Sinh" else "Add", both), e.scalar("half", 0.5, x)], out)
    elif op_type == "Asin":  # atan(x / sqrt(1 - x^2)): +-inf at x = +-1, whose atan is +-pi / 2
        root = e("Sqrt", [e("Mul", [e("Sub", [one, x]), e("Add", [one, x])])])
        e("Atan", [e("Div", [x, root])], out)
    elif op_type == "Acos":  # 2 atan(sqrt((1 - x) / (1 + x))): inf at x = -1, whose atan is pi / 2
        root = e("Sqrt", [e("Div", [e("Sub", [one, x]), e("Add", [one, x])])])
        e("Mul", [e("Atan", [root]), e.scalar("two", 2.0, x)], out)
    elif op_type == "Asinh":  # sign(x) log(|x| + sqrt(x^2 + 1)): no cancellation for negative x
        a = e("Abs", [x])
        root = e("Sqrt", [e("Add", [e("Mul", [a, a]), one])])
        e("Mul", [e("Sign", [x]), e("Log", [e("Add", [a, root])])], out)
    elif op_type == "Acosh":  # log(x + sqrt((x - 1)(x + 1)))
        root = e("Sqrt", [e("Mul", [e("Sub", [x, one]), e("Add", [x, one])])])
        e("Log", [e("Add", [x, root])], out)
    else:  # Atanh: log((1 + x) / (1 - x)) / 2
        ratio = e("Div", [e("Add", [one, x]), e("Sub", [one, x])])
        e("Mul", [e("Log", [ratio]), e.scalar("half", 0.5, x)], out)


def identity_op_replacement(graph: Graph, match: Match) -> list:
    node = match.nodes[0]
    e = _Nodes(graph, _base(match, node.op_type.lower()))
    _identity(e, node.op_type, match.inputs["in0"], node.output[0])
    return e.nodes


# no Tan: sin / cos in the HTP's fp16 misses tan near its poles by far more than the fp16 tolerance (measured)
IDENTITY_OPS = ("Sinh", "Cosh", "Asin", "Acos", "Asinh", "Acosh", "Atanh")


def identity_op_pattern(graph: Graph, node) -> Match | None:
    return _single(node.op_type)(graph, node) if node.op_type in IDENTITY_OPS else None


# --- LpPool -> AveragePool of |x|^p counting the padding, times the window size, to the 1/p ---------------------

def _ints(node, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])


def _pool_condition(graph: Graph, match: Match, ceil_ok: bool = False) -> bool:
    """A float pool of static shape (rank >= 3) without dilations (the QNN EP takes no dilated pool); ceil_mode
    only where ``ceil_ok`` and the output's shape is known."""
    node, shape = match.nodes[0], graph.shape(match.inputs["in0"])
    if not _float_input(graph, match) or shape is None or len(shape) < 3:
        return False
    n = len(shape) - 2
    if len(_ints(node, "kernel_shape")) != n or len(_ints(node, "pads")) not in (0, 2 * n) or \
            len(_ints(node, "strides")) not in (0, n) or any(d != 1 for d in _ints(node, "dilations")):
        return False
    return not _int_attr(node, "ceil_mode", 0) or (ceil_ok and graph.shape(node.output[0]) is not None)


def lppool_condition(graph: Graph, match: Match) -> bool:
    """p >= 1, no ceil_mode (a window past the padded input would change the divisor)."""
    return _pool_condition(graph, match) and _int_attr(match.nodes[0], "p", 2) >= 1


def lppool_replacement(graph: Graph, match: Match) -> list:
    """(K * AveragePool(|x|^p, count_include_pad=1))^(1/p), K the window's size: the sum of |x|^p over the window,
    padding adding zeros (x * x and Sqrt for p = 2, Abs alone for p = 1); the pool as ``_average_pool`` makes it."""
    node, x = match.nodes[0], match.inputs["in0"]
    p = _int_attr(node, "p", 2)
    e = _Nodes(graph, _base(match, "lppool"))
    powered = e("Mul", [x, x]) if p == 2 else e("Abs", [x]) if p == 1 else \
        e("Pow", [e("Abs", [x]), e.scalar("p", p, x)])
    pool = _average_pool(e, node, x, powered, "", include_pad=True)
    window = e.scalar("window", math.prod(_ints(node, "kernel_shape")), x)
    summed = e("Mul", [pool, window], node.output[0] if p == 1 else "")
    if p == 2:
        e("Sqrt", [summed], node.output[0])
    elif p > 2:
        e("Pow", [summed, e.scalar("root", 1 / p, x)], node.output[0])
    return e.nodes


# --- padded AveragePool -> Pad, an unpadded AveragePool and a constant per-position divisor fix -----------------

def _pool_pads(graph: Graph, node, x: str) -> list[int] | None:
    """The explicit pads (begins, then ends) of a pool on static ``x``: its pads, or what auto_pad SAME_* means."""
    auto = next((a.s for a in node.attribute if a.name == "auto_pad"), b"NOTSET")
    kernel, dims = _ints(node, "kernel_shape"), graph.shape(x)[2:]
    if auto in (b"NOTSET", b""):
        return _ints(node, "pads") or [0] * 2 * len(kernel)
    if auto == b"VALID":
        return [0] * 2 * len(kernel)
    strides = _ints(node, "strides") or [1] * len(kernel)
    total = [max((-(-n // st) - 1) * st + k - n, 0) for n, st, k in zip(dims, strides, kernel)]
    small = [t // 2 for t in total]
    big = [t - t // 2 for t in total]
    return small + big if auto == b"SAME_UPPER" else big + small


def avgpool_condition(graph: Graph, match: Match) -> bool:
    """A float AveragePool of static shape that pads (explicitly or by auto_pad), or has ceil_mode without
    counting the padding: the HTP's padded pool gives wrong numbers (test_averagepool_2d_pads, _ceil, measured)
    or crashes."""
    node, x = match.nodes[0], match.inputs["in0"]
    include, ceil = _int_attr(node, "count_include_pad", 0), _int_attr(node, "ceil_mode", 0)
    if not _pool_condition(graph, match, ceil_ok=not include):
        return False
    return _last_windows_start_inside(graph, node, x) if ceil else any(_pool_pads(graph, node, x))


def _last_windows_start_inside(graph: Graph, node, x: str) -> bool:
    """Whether ceil_mode's last window on each axis starts in the input or its start padding: onnxruntime drops a
    window starting past them, which ONNX shape inference (the output shape the rewrite builds) still counts."""
    kernel, dims, out = _ints(node, "kernel_shape"), graph.shape(x)[2:], graph.shape(node.output[0])[2:]
    strides = _ints(node, "strides") or [1] * len(kernel)
    begin = _pool_pads(graph, node, x)[:len(kernel)]
    return all((o - 1) * st < d + b for o, st, d, b in zip(out, strides, dims, begin))


def _window_counts(spatial: list[int], pads: list[int], kernel: list[int], strides: list[int]) -> np.ndarray:
    """How many input (not padding) elements each output position's window holds."""
    n = len(spatial)
    mask = np.pad(np.ones(spatial), list(zip(pads[:n], pads[n:])))
    windows = np.lib.stride_tricks.sliding_window_view(mask, kernel)
    windows = windows[tuple(slice(None, None, st) for st in strides)]
    return windows.sum(axis=tuple(range(n, 2 * n)))


def _average_pool(e: _Nodes, node, x: str, src: str, out: str, include_pad: bool) -> str:
    """AveragePool of ``src`` (of ``x``'s static shape) over ``node``'s windows, its padding (and the overhang of
    ceil_mode) done by a Pad first so that the pool itself pads nothing: every window is divided by its size, as
    count_include_pad=1 asks; without it, the result is scaled by size / (input elements in the window), a
    constant of the output's spatial shape."""
    shape, pads = e.graph.shape(x), _pool_pads(e.graph, node, x)
    kernel = _ints(node, "kernel_shape")
    strides = _ints(node, "strides") or [1] * len(kernel)
    n = len(kernel)
    if _int_attr(node, "ceil_mode", 0):  # the last windows reach past the padded input: more padding, uncounted
        dims = e.graph.shape(node.output[0])[2:]
        pads = pads[:n] + [p + max(0, (o - 1) * st + k - (d + b + p)) for o, st, k, d, b, p
                           in zip(dims, strides, kernel, shape[2:], pads[:n], pads[n:])]
    if any(pads):
        full = [0, 0, *pads[:n], 0, 0, *pads[n:]]
        if e.graph.opset >= 11:
            src = e("Pad", [src, e.const("pads", np.array(full, np.int64))])
        else:
            src = e("Pad", [src], pads=full)
        # a Reshape to its own shape between: the QNN EP fuses Pad + AveragePool back into the padded pool the
        # HTP gets wrong (measured: a 5x5 pool of a 5x5 input padded by 2)
        spatial = [d + b + a for d, b, a in zip(shape[2:], pads[:n], pads[n:])]
        src = e("Reshape", [src, e.const("padded_shape", np.array(shape[:2] + spatial, np.int64))])
    if include_pad or not any(pads):
        return e("AveragePool", [src], out, kernel_shape=kernel, strides=strides)
    pooled = e("AveragePool", [src], kernel_shape=kernel, strides=strides)
    scale = math.prod(kernel) / _window_counts(shape[2:], pads, kernel, strides)
    dtype = helper.tensor_dtype_to_np_dtype(e.graph.elem_type(x))
    return e("Mul", [pooled, e.const("window_scale", scale.astype(dtype))], out)


def avgpool_replacement(graph: Graph, match: Match) -> list:
    node, x = match.nodes[0], match.inputs["in0"]
    e = _Nodes(graph, _base(match, "avgpool"))
    _average_pool(e, node, x, x, node.output[0], bool(_int_attr(node, "count_include_pad", 0)))
    return e.nodes


# --- ConvTranspose with output_padding or output_shape -> the full ConvTranspose, cropped and padded -------------

def convtranspose_condition(graph: Graph, match: Match) -> bool:
    """Float, static shapes, no auto_pad, and output_padding or output_shape (the HTP gets those wrong: errors of
    44 on test_convtranspose_output_shape, measured)."""
    node, x, w = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    auto = next((a.s for a in node.attribute if a.name == "auto_pad"), b"NOTSET")
    extended = any(_ints(node, "output_padding")) or bool(_ints(node, "output_shape"))
    shapes = [graph.shape(t) for t in (x, w, node.output[0])]
    if not extended or auto not in (b"NOTSET", b"") or not _float_input(graph, match) or \
            any(t is None or len(t) < 3 or len(t) != len(shapes[0]) for t in shapes):
        return False
    n = len(shapes[0]) - 2
    return all(len(_ints(node, a)) in (0, k * n) for a, k in
               (("strides", 1), ("dilations", 1), ("output_padding", 1), ("output_shape", 1), ("pads", 2)))


def convtranspose_replacement(graph: Graph, match: Match) -> list:
    """y = F[pad_begin : pad_begin + out] per spatial axis, F the ConvTranspose without padding (its full output,
    zero past its end), then the bias: Slice where that crops, Pad with zeros where it reaches past F."""
    node, x, w = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    spatial, out = graph.shape(x)[2:], graph.shape(node.output[0])[2:]
    n = len(spatial)
    kernel = graph.shape(w)[2:]
    strides = _ints(node, "strides") or [1] * n
    dilations = _ints(node, "dilations") or [1] * n
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, spatial, kernel, dilations)]
    if _ints(node, "output_shape"):  # the pads output_shape implies (ONNX: the larger half at the start)
        total = [f + p - o for f, p, o in zip(full, _ints(node, "output_padding") or [0] * n, out)]
        begin = [t - t // 2 for t in total]
    else:
        begin = (_ints(node, "pads") or [0] * 2 * n)[:n]
    starts, ends = [max(b, 0) for b in begin], [min(b + o, f) for b, o, f in zip(begin, out, full)]
    before = [max(-b, 0) for b in begin]
    after = [o - p - (q - r) for o, p, q, r in zip(out, before, ends, starts)]
    bias = match.inputs.get("in2", "")
    sliced, padded = starts != [0] * n or ends != full, any(before) or any(after)
    last = "Add" if bias else "Pad" if padded else "Slice" if sliced else "ConvTranspose"
    e = _Nodes(graph, _base(match, "convtranspose"))

    def out_of(op_type: str) -> str:
        return node.output[0] if op_type == last else ""

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name in ("dilations", "group", "kernel_shape", "strides")}
    y = e("ConvTranspose", [x, w], out_of("ConvTranspose"), **attrs)
    if sliced:
        y = e("Slice", [y, e.const("starts", np.array(starts, np.int64)), e.const("ends", np.array(ends, np.int64)),
                        e.const("axes", np.arange(2, n + 2, dtype=np.int64))], out_of("Slice"))
    if padded:
        y = e("Pad", [y, e.const("pads", np.array([0, 0, *before, 0, 0, *after], np.int64))], out_of("Pad"))
    if bias:
        e("Add", [y, e("Reshape", [bias, e.const("bias_shape", np.array([-1] + [1] * n, np.int64))])], out_of("Add"))
    return e.nodes


# --- ReduceL1 / ReduceSumSquare / ReduceLogSum over constant axes -> ReduceSum of Abs, Mul, then Log -------------

# no ReduceLogSumExp: its overflow-safe form m + log(sum(exp(x - m))) is NaN where the maximum m is infinite
SUM_REDUCTIONS = ("ReduceL1", "ReduceSumSquare", "ReduceLogSum")


def _reduce_axes(graph: Graph, match: Match) -> list[int] | None:
    """The axes a reduction reduces (all for none or empty ones), or None where they are not constant or
    noop_with_empty_axes makes empty ones a copy."""
    node, shape = match.nodes[0], graph.shape(match.inputs["in0"])
    if shape is None:
        return None
    if graph.opset >= 18:
        name = match.inputs.get("in1", "")
        value = graph.value(name) if name else np.zeros(0, np.int64)
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    else:
        axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), [])
    if axes is None or (not axes and _int_attr(node, "noop_with_empty_axes", 0)):
        return None
    if any(not -len(shape) <= a < len(shape) for a in axes):
        return None
    return sorted({a % len(shape) for a in axes}) if axes else list(range(len(shape)))


def sum_reduction_pattern(graph: Graph, node) -> Match | None:
    return _single(node.op_type)(graph, node) if node.op_type in SUM_REDUCTIONS else None


def sum_reduction_condition(graph: Graph, match: Match) -> bool:
    return _float_input(graph, match) and _reduce_axes(graph, match) is not None


def sum_reduction_replacement(graph: Graph, match: Match) -> list:
    """ReduceSum of |x| (L1), x * x (SumSquare), or x (LogSum, then Log)."""
    node, x = match.nodes[0], match.inputs["in0"]
    axes, keep, out = _reduce_axes(graph, match), _int_attr(node, "keepdims", 1), node.output[0]
    e = _Nodes(graph, _base(match, node.op_type.lower()))
    inner = {"ReduceL1": lambda: e("Abs", [x]), "ReduceSumSquare": lambda: e("Mul", [x, x])}.get(node.op_type)
    summed = e.reduce("ReduceSum", inner() if inner else x, axes, "" if node.op_type == "ReduceLogSum" else out,
                      keepdims=keep)
    if node.op_type == "ReduceLogSum":
        e("Log", [summed], out)
    return e.nodes


SHAPE = Rule("shape-to-constant", _single("Shape"), static_shape_condition, shape_replacement)
SIZE = Rule("size-to-constant", _single("Size"), static_shape_condition, shape_replacement)
LAYERNORM = Rule("layernorm-to-reductions", _single("LayerNormalization"), layernorm_condition, layernorm_replacement)
BATCHNORM = Rule("batchnorm-to-arithmetic", _single("BatchNormalization"), batchnorm_condition,
                 batchnorm_replacement)
DROPOUT = Rule("dropout-to-copy", _single("Dropout"), dropout_condition, dropout_replacement)
ONE_INPUT = Rule("one-input-variadic-to-reshape", one_input_pattern, identity_condition, identity_replacement)
CLIP = Rule("clip-to-max-min", _single("Clip"), clip_condition, clip_replacement)
GEMM = Rule("gemm-to-matmul", _single("Gemm"), gemm_condition, gemm_replacement)
SELU = Rule("selu-to-elu", _single("Selu"), _float_input, selu_replacement)
CELU = Rule("celu-to-elu", _single("Celu"), _float_input, celu_replacement)
SOFTSIGN = Rule("softsign-to-div", _single("Softsign"), _float_input, softsign_replacement)
SOFTPLUS = Rule("softplus-to-exp-log", _single("Softplus"), _float_input, softplus_replacement)
MISH = Rule("mish-to-tanh-softplus", _single("Mish"), _float_input, mish_replacement)
SHRINK = Rule("shrink-to-where", _single("Shrink"), _float_input, shrink_replacement)
HARDSWISH = Rule("hardsigmoid-mul-to-hardswish", hardswish_pattern, hardswish_condition, hardswish_replacement)
TRIG = Rule("trig-to-identities", identity_op_pattern, _float_input, identity_op_replacement)
ARGMAX_LAST = Rule("argmax-last-to-reversed", _single("ArgMax"), arg_last_condition, arg_last_replacement)
ARGMIN_LAST = Rule("argmin-last-to-reversed", _single("ArgMin"), arg_last_condition, arg_last_replacement)
HARDMAX = Rule("hardmax-to-equal-argmax", _single("Hardmax"), hardmax_condition, hardmax_replacement)
XOR = Rule("xor-to-and-or", _single("Xor"), xor_condition, xor_replacement)
ISINF = Rule("isinf-to-equal", _single("IsInf"), isinf_condition, isinf_replacement)
GATHER_ELEMENTS = Rule("gather-elements-nonnegative-indices", _single("GatherElements"), elements_condition,
                       elements_replacement)
SCATTER_ELEMENTS = Rule("scatter-elements-nonnegative-indices", _single("ScatterElements"), elements_condition,
                        elements_replacement)
LPPOOL = Rule("lppool-to-averagepool", _single("LpPool"), lppool_condition, lppool_replacement)
CONVTRANSPOSE = Rule("convtranspose-extended-to-slice-pad", _single("ConvTranspose"), convtranspose_condition,
                     convtranspose_replacement)
SUM_REDUCTION = Rule("reduction-to-reducesum", sum_reduction_pattern, sum_reduction_condition,
                     sum_reduction_replacement)
AVGPOOL = Rule("padded-averagepool-to-pad", _single("AveragePool"), avgpool_condition, avgpool_replacement)
# rules whose constants onnxruntime's folding takes further: the prepared model is folded again after them
REFOLD = frozenset({SHAPE.name, SIZE.name})
# the rules the DLC backend applies to its prepared model, for onnxruntime's QNN execution provider
QNN_RULES = (SHAPE, SIZE, GELU, ISNAN, TRILU, CUMSUM, IDENTITY, LAYERNORM, BATCHNORM, DROPOUT, ONE_INPUT, CLIP, GEMM,
             SELU, CELU, SOFTSIGN, SOFTPLUS, MISH, SHRINK, HARDSWISH, TRIG, ARGMAX_LAST, ARGMIN_LAST, HARDMAX, XOR,
             ISINF, GATHER_ELEMENTS, SCATTER_ELEMENTS, LPPOOL, AVGPOOL, CONVTRANSPOSE, SUM_REDUCTION,
             RANK6_TRANSPOSE)
# the rules the Core ML backend applies before lowering
COREML_RULES = (RANK6_TRANSPOSE,)
