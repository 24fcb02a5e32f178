"""Ops expressed below their first version with older ops (exact up to rounding)."""
from __future__ import annotations

import numpy as np

from onnxbridge.adapters.registry import down
from onnxbridge.adapters.rewriter import drop_attr, get_attr, refuse

FLOATS = (1, 10, 11, 16)  # float, float16, double, bfloat16
X = object()  # in a _chain step: the node's first input


def np_dtype(rw, name: str):
    """The numpy dtype of value ``name``; a rewrite that creates constants needs it."""
    import onnx

    et = rw.elem_type(name)
    if et is None:
        refuse(f"the element type of '{name}' is unknown, so typed constants cannot be made")
    return onnx.helper.tensor_dtype_to_np_dtype(et)


def scalar(rw, value, dtype, base: str) -> str:
    return rw.constant(np.array(value, dtype=dtype), base)


def _normalize_tail(node, rw, normalized, *, reduce_axes_as_input: bool):
    """The frame LayerNormalization and RMSNormalization share: axes [axis, rank), fp16/bf16 computed in
    float (stash_type 1), ``normalized(add, x, axes, eps)`` then times scale, plus bias if given."""
    rank = rw.rank(node.input[0])
    if rank is None:
        refuse("the input rank is unknown, so the normalized axes cannot be listed")
    axis = get_attr(node, "axis", -1) % rank
    eps, stash = get_attr(node, "epsilon", 1e-5), get_attr(node, "stash_type", 1)
    et, n = rw.elem_type(node.input[0]), node.name
    cast = stash == 1 and et in (10, 16)
    dt = np.float32 if cast else np_dtype(rw, node.input[0])
    nodes = []

    def add(op, inputs, **attrs):
        nodes.append(rw.node(op, inputs, name=f"{n}_{op.lower()}", **attrs))
        return nodes[-1].output[0]

    x, scale = node.input[0], node.input[1]
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if cast:
        x, scale = add("Cast", [x], to=1), add("Cast", [scale], to=1)
        bias = bias and add("Cast", [bias], to=1)
    axes = list(range(axis, rank))
    if reduce_axes_as_input:  # ReduceMean-18 and later
        axes = rw.constant(np.array(axes, np.int64), f"{n}_axes")
    y = add("Mul", [normalized(add, x, axes, scalar(rw, eps, dt, f"{n}_epsilon")), scale])
    if bias:
        y = add("Add", [y, bias])
    if cast:
        add("Cast", [y], to=et)
    nodes[-1].output[0] = node.output[0]
    return nodes


def _mean(add, value, axes):
    if isinstance(axes, str):
        return add("ReduceMean", [value, axes], keepdims=1)
    return add("ReduceMean", [value], axes=axes, keepdims=1)


@down("LayerNormalization", 17)
def layer_norm_down(node, rw):
    """(x - mean) / sqrt(var + epsilon) * scale + bias, with ReduceMean-13 (axes an attribute)."""
    if any(node.output[1:]):
        refuse("the Mean / InvStdDev outputs have no older equivalent")

    def normalized(add, x, axes, eps):
        d = add("Sub", [x, _mean(add, x, axes)])
        return add("Div", [d, add("Sqrt", [add("Add", [_mean(add, add("Mul", [d, d]), axes), eps])])])

    return _normalize_tail(node, rw, normalized, reduce_axes_as_input=False)


@down("RMSNormalization", 23)
def rms_norm_down(node, rw):
    """x / sqrt(mean(x^2) + epsilon) * scale, with ReduceMean-18 (axes an input)."""

    def normalized(add, x, axes, eps):
        return add("Div", [x, add("Sqrt", [add("Add", [_mean(add, add("Mul", [x, x]), axes), eps])])])

    return _normalize_tail(node, rw, normalized, reduce_axes_as_input=True)


def _chain(node, rw, steps, *, elementwise: bool = False):
    """Build ``steps`` [(op, inputs, attrs)]; an input is X (the node's first input), an int k (step k's
    output) or a value name. The last step writes the node output. ``elementwise``: every step output
    has the input's type and shape (recorded, so later steps down can check types)."""
    nodes, like = [], node.input[0] if elementwise else None
    for k, (op, inputs, attrs) in enumerate(steps):
        names = [node.input[0] if i is X else nodes[i].output[0] if isinstance(i, int) else i for i in inputs]
        outputs = [node.output[0]] if k == len(steps) - 1 else None
        nodes.append(rw.node(op, names, outputs, name=f"{node.name}_{op.lower()}", like=like, **attrs))
    return nodes


@down("Swish", 24)
def swish_down(node, rw):
    """x * sigmoid(alpha x)."""
    alpha = scalar(rw, get_attr(node, "alpha", 1.0), np_dtype(rw, node.input[0]), f"{node.name}_alpha")
    return _chain(node, rw, [("Mul", [X, alpha], {}), ("Sigmoid", [0], {}), ("Mul", [X, 1], {})], elementwise=True)


@down("ThresholdedRelu", 10)
def thresholded_relu_down(node, rw):
    """x where x > alpha, else 0 (Where, so from opset 9)."""
    dt, n = np_dtype(rw, node.input[0]), node.name
    alpha, zero = scalar(rw, get_attr(node, "alpha", 1.0), dt, f"{n}_alpha"), scalar(rw, 0, dt, f"{n}_zero")
    return _chain(node, rw, [("Greater", [X, alpha], {}), ("Where", [0, X, zero], {})])


@down("CastLike", 15)
def cast_like_down(node, rw):
    """Cast to the element type of target_type."""
    et = rw.elem_type(node.input[1])
    if et is None:
        refuse("the element type of target_type is unknown")
    return [rw.node("Cast", [node.input[0]], [node.output[0]], name=node.name, to=et)]


@down("Gelu", 20)
def gelu_down(node, rw):
    """0.5 x (1 + erf(x / sqrt 2)), or with approximate="tanh" 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    dt, n = np_dtype(rw, node.input[0]), node.name
    half, one = scalar(rw, 0.5, dt, f"{n}_half"), scalar(rw, 1.0, dt, f"{n}_one")
    if get_attr(node, "approximate", b"none") in (b"tanh", "tanh"):
        inner = [("Mul", [X, X], {}), ("Mul", [0, X], {}),
                 ("Mul", [1, scalar(rw, 0.044715, dt, f"{n}_c")], {}), ("Add", [X, 2], {}),
                 ("Mul", [3, scalar(rw, np.sqrt(2 / np.pi), dt, f"{n}_k")], {}), ("Tanh", [4], {})]
    else:
        inner = [("Div", [X, scalar(rw, np.sqrt(2.0), dt, f"{n}_sqrt2")], {}), ("Erf", [0], {})]
    k = len(inner)
    return _chain(node, rw, inner + [("Add", [k - 1, one], {}), ("Mul", [X, half], {}),
                                     ("Mul", [k + 1, k], {})], elementwise=True)


@down("HardSwish", 14)
def hard_swish_down(node, rw):
    """x * HardSigmoid(x; alpha=1/6, beta=0.5)."""
    steps = [("HardSigmoid", [X], {"alpha": 1 / 6, "beta": 0.5}), ("Mul", [X, 0], {})]
    return _chain(node, rw, steps, elementwise=True)


@down("Mish", 18)
def mish_down(node, rw):
    """x * tanh(softplus(x))."""
    return _chain(node, rw, [("Softplus", [X], {}), ("Tanh", [0], {}), ("Mul", [X, 1], {})], elementwise=True)


@down("Celu", 12)
def celu_down(node, rw):
    """alpha * Elu(x / alpha)."""
    alpha = get_attr(node, "alpha", 1.0)
    a = scalar(rw, alpha, np.float32, f"{node.name}_alpha")
    return _chain(node, rw, [("Div", [X, a], {}), ("Elu", [0], {"alpha": 1.0}), ("Mul", [1, a], {})], elementwise=True)


def _or_equal(node, rw, a: str, b: str):
    """a >= b. Floats: not(a < b) and neither is NaN (x is not NaN iff x < inf or x > -inf), valid from
    opset 7; other types: Greater or Equal. NaN compares false either way."""
    et, n = rw.elem_type(a), node.name
    if et in FLOATS:
        dt = np_dtype(rw, a)
        inf, ninf = scalar(rw, np.inf, dt, f"{n}_inf"), scalar(rw, -np.inf, dt, f"{n}_ninf")
        steps = [("Less", [a, b], {}), ("Not", [0], {}),
                 ("Less", [a, inf], {}), ("Greater", [a, ninf], {}), ("Or", [2, 3], {}),
                 ("Less", [b, inf], {}), ("Greater", [b, ninf], {}), ("Or", [5, 6], {}),
                 ("And", [4, 7], {}), ("And", [1, 8], {})]
    else:
        steps = [("Greater", [a, b], {}), ("Equal", [a, b], {}), ("Or", [0, 1], {})]
    return _chain(node, rw, steps)


@down("GreaterOrEqual", 12)
def greater_or_equal_down(node, rw):
    """A >= B without the op (NaN stays false)."""
    return _or_equal(node, rw, node.input[0], node.input[1])


@down("LessOrEqual", 12)
def less_or_equal_down(node, rw):
    """A <= B as B >= A."""
    return _or_equal(node, rw, node.input[1], node.input[0])


@down("Shape", 15)
def shape_down(node, rw):
    """start/end become a Slice of the full shape."""
    start, end = get_attr(node, "start", 0), get_attr(node, "end")
    drop_attr(node, "start", "end")
    if start == 0 and end is None:
        return None
    out, n = node.output[0], node.name
    node.output[0] = rw.fresh(f"{n}_full")
    ends = np.array([end if end is not None else np.iinfo(np.int64).max], np.int64)
    sl = rw.node("Slice", [node.output[0], rw.constant(np.array([start], np.int64), f"{n}_start"),
                           rw.constant(ends, f"{n}_end"), rw.constant(np.array([0], np.int64), f"{n}_axes")],
                 [out], name=f"{n}_slice")
    return [node, sl]


@down("GroupNormalization", 21)
def group_norm_down(node, rw):
    """Reshape to (N, G, -1), InstanceNormalization with unit scale, reshape back, then per-channel
    scale and bias (GroupNormalization-18 is deprecated, so this decomposition is the way below 21)."""
    x, scale, bias = node.input[:3]
    rank, g, n = rw.rank(x), get_attr(node, "num_groups"), node.name
    if rank is None:
        refuse("the input rank is unknown, so scale and bias cannot be broadcast over channels")
    dt = np_dtype(rw, x)
    eps = get_attr(node, "epsilon", 1e-5)
    ones, zeros = np.ones(g, dtype=dt), np.zeros(g, dtype=dt)
    steps = [("Reshape", [X, rw.constant(np.array([0, g, -1], np.int64), f"{n}_groups")], {}),
             ("InstanceNormalization", [0, rw.constant(ones, f"{n}_ones"), rw.constant(zeros, f"{n}_zeros")],
              {"epsilon": eps}),
             ("Shape", [X], {}), ("Reshape", [1, 2], {})]
    per_channel = rw.constant(np.array([-1] + [1] * (rank - 2), np.int64), f"{n}_channels")
    steps += [("Reshape", [scale, per_channel], {}), ("Mul", [3, 4], {}),
              ("Reshape", [bias, per_channel], {}), ("Add", [5, 6], {})]
    return _chain(node, rw, steps)
