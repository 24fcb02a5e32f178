"""Core ML lowerings: elementwise, comparison, reduction, matrix and activation ops."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import (
    INT32, Ctx, _axes, _f32, _static, narrow, np_dtype, op, runtime_shape, same_dtype,
)


UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp", "Sqrt": "sqrt",
         "Abs": "abs", "Floor": "floor", "Ceil": "ceil", "Cos": "cos", "Sin": "sin", "Tan": "tan", "Acos": "acos",
         "Asin": "asin", "Atan": "atan", "Atanh": "atanh", "Cosh": "cosh", "Sinh": "sinh", "Softsign": "softsign",
         "Sign": "sign"}


@op(*UNARY)
def unary(ctx: Ctx):
    x = ctx.get(0)
    if ctx.node.op_type == "Relu" and not _is_float(x):  # MIL's relu takes floats: max(x, 0), exact for integers
        return ctx.mb.maximum(x=x, y=_like(x, 0), name=ctx.name())
    return getattr(ctx.mb, UNARY[ctx.node.op_type])(x=x, name=ctx.name())


@op("Neg")
def neg(ctx: Ctx):
    x = ctx.get(0)
    return ctx.mb.mul(x=x, y=np.array(-1, np_dtype(x)), name=ctx.name())  # integer positions too


@op("Log", "Reciprocal")
def log_reciprocal(ctx: Ctx):
    """With ``epsilon`` 0: MIL's log adds 1e-45 and its inverse 1e-4 to x by default."""
    x = ctx.get(0)
    fn = ctx.mb.log if ctx.node.op_type == "Log" else ctx.mb.inverse
    return fn(x=x, epsilon=_like(x, 0), name=ctx.name())


def _like(x, value) -> np.ndarray:
    """``value`` as a scalar constant of x's dtype."""
    return np.array(value, np_dtype(x))


@op("Acosh")
def acosh(ctx: Ctx):
    """Below 2, 2 atanh(sqrt((x - 1) / (x + 1))) (accurate near 1); from 2 on, log(x) + log(1 + sqrt(1 - 1 / x^2))
    (no overflow for large x). MIL has no acosh."""
    mb, x = ctx.mb, ctx.get(0)
    one, two = _like(x, 1), _like(x, 2)
    near = mb.mul(x=mb.atanh(x=mb.sqrt(x=mb.real_div(x=mb.sub(x=x, y=one), y=mb.add(x=x, y=one)))), y=two)
    far = mb.add(x=_log(ctx, x), y=_log(ctx, mb.add(x=one, y=mb.sqrt(x=mb.sub(x=one, y=_inverse_square(ctx, x))))))
    return mb.select(cond=mb.less(x=x, y=two), a=near, b=far, name=ctx.name())


@op("Asinh")
def asinh(ctx: Ctx):
    """Below 2 in magnitude, atanh(x / sqrt(1 + x^2)) (accurate near 0); from 2 on, sign(x) (log|x| +
    log(1 + sqrt(1 + 1 / x^2))) (no overflow for large x). MIL has no asinh."""
    mb, x = ctx.mb, ctx.get(0)
    one, two = _like(x, 1), _like(x, 2)
    magnitude = mb.abs(x=x)
    near = mb.atanh(x=mb.real_div(x=x, y=mb.sqrt(x=mb.add(x=one, y=mb.mul(x=x, y=x)))))
    far = mb.add(x=_log(ctx, magnitude),
                 y=_log(ctx, mb.add(x=one, y=mb.sqrt(x=mb.add(x=one, y=_inverse_square(ctx, x))))))
    return mb.select(cond=mb.less(x=magnitude, y=two), a=near, b=mb.mul(x=mb.sign(x=x), y=far), name=ctx.name())


def _log(ctx: Ctx, x):
    return ctx.mb.log(x=x, epsilon=_like(x, 0))


def _inverse_square(ctx: Ctx, x):
    """1 / x^2 (0 where x^2 overflows)."""
    return ctx.mb.real_div(x=_like(x, 1), y=ctx.mb.mul(x=x, y=x))


@op("Round")
def round_half_even(ctx: Ctx):
    """floor(x), plus one where the fraction x - floor(x) (exact in floats) is above 1/2, or is 1/2 and floor(x)
    is odd: ONNX rounds halves to even (MIL's round does not say how it rounds them)."""
    mb, x = ctx.mb, ctx.get(0)
    low = mb.floor(x=x)
    frac, half = mb.sub(x=x, y=low), _like(x, 0.5)
    odd = mb.not_equal(x=mb.floor(x=mb.mul(x=low, y=half)), y=mb.mul(x=low, y=half))
    up = mb.logical_or(x=mb.greater(x=frac, y=half), y=mb.logical_and(x=mb.equal(x=frac, y=half), y=odd))
    return mb.select(cond=up, a=mb.add(x=low, y=_like(x, 1)), b=low, name=ctx.name())


@op("IsInf")
def is_inf(ctx: Ctx):
    """|x| == inf, x == +inf (``detect_positive`` only), x == -inf (``detect_negative`` only), or (neither) never."""
    mb, x = ctx.mb, ctx.get(0)
    pos, neg = int(ctx.attr("detect_positive", 1)), int(ctx.attr("detect_negative", 1))
    if pos and neg:
        return mb.equal(x=mb.abs(x=x), y=_like(x, np.inf), name=ctx.name())
    if pos or neg:
        return mb.equal(x=x, y=_like(x, np.inf if pos else -np.inf), name=ctx.name())
    return mb.logical_and(x=mb.equal(x=x, y=_like(x, np.inf)), y=mb.equal(x=x, y=_like(x, -np.inf)), name=ctx.name())


@op("LeakyRelu")
def leaky_relu(ctx: Ctx):
    return ctx.mb.leaky_relu(x=ctx.get(0), alpha=float(ctx.attr("alpha", 0.01)), name=ctx.name())


@op("Selu")
def selu(ctx: Ctx):
    """gamma * elu(x, alpha)."""
    x = ctx.get(0)
    y = ctx.mb.elu(x=x, alpha=float(ctx.attr("alpha", 1.67326319217681884765625)))
    return ctx.mb.mul(x=y, y=_like(x, ctx.attr("gamma", 1.05070102214813232421875)), name=ctx.name())


@op("Celu")
def celu(ctx: Ctx):
    """x where positive, else alpha * (exp(x / alpha) - 1)."""
    mb, x = ctx.mb, ctx.get(0)
    alpha = _like(x, ctx.attr("alpha", 1.0))
    negative = mb.mul(x=mb.sub(x=mb.exp(x=mb.real_div(x=x, y=alpha)), y=_like(x, 1)), y=alpha)
    return mb.select(cond=mb.greater(x=x, y=_like(x, 0)), a=x, b=negative, name=ctx.name())


@op("Mish")
def mish(ctx: Ctx):
    """x * tanh(softplus(x))."""
    x = ctx.get(0)
    return ctx.mb.mul(x=x, y=ctx.mb.tanh(x=ctx.mb.softplus(x=x)), name=ctx.name())


@op("ThresholdedRelu")
def thresholded_relu(ctx: Ctx):
    """x where x > alpha, else 0 (MIL's thresholded_relu keeps x == alpha too)."""
    mb, x = ctx.mb, ctx.get(0)
    return mb.select(cond=mb.greater(x=x, y=_like(x, ctx.attr("alpha", 1.0))), a=x, b=_like(x, 0), name=ctx.name())


@op("Shrink")
def shrink(ctx: Ctx):
    """x - bias above lambd, x + bias below -lambd, else 0."""
    mb, x = ctx.mb, ctx.get(0)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    if not _is_float(x) and not (lambd.is_integer() and bias.is_integer()):
        ctx.refuse(f"lambd={lambd} and bias={bias} on integers are not lowered")
    inner = mb.select(cond=mb.less(x=x, y=_like(x, -lambd)), a=mb.add(x=x, y=_like(x, bias)), b=_like(x, 0))
    return mb.select(cond=mb.greater(x=x, y=_like(x, lambd)), a=mb.sub(x=x, y=_like(x, bias)), b=inner,
                     name=ctx.name())


@op("Add", "Sub", "Mul", "Div")
def binary(ctx: Ctx):
    mil = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div"}[ctx.node.op_type]
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    if ctx.node.op_type == "Div" and not _is_float(x):  # ONNX (onnxruntime) truncates, MIL's floor_div floors
        return ctx.mb.identity(x=_trunc_div(ctx, x, y), name=ctx.name())
    return getattr(ctx.mb, mil)(x=x, y=y, name=ctx.name())


@op("Max", "Min")
def max_min(ctx: Ctx):
    """Over any number of inputs (one: itself), in one dtype."""
    fn = ctx.mb.maximum if ctx.node.op_type == "Max" else ctx.mb.minimum
    values = same_dtype(ctx, *(ctx.get(i) for i in range(len(ctx.node.input))))
    y = values[0]
    for v in values[1:]:
        y = fn(x=y, y=v)
    return ctx.mb.identity(x=y, name=ctx.name())


@op("Pow")
def power(ctx: Ctx):
    """In the base's dtype, as ONNX. An integer base with a float exponent is raised in fp32 and truncated toward
    zero (as onnxruntime casts the power); with an integer exponent, a negative exponent gives (truncated) 0
    unless the base is 1 or -1, so x ** |y| is kept where y >= 0 or |x| == 1."""
    mb, base, exponent = ctx.mb, ctx.get(0), ctx.get(1)
    if _is_float(base):
        dtype = narrow(np.zeros(0, np_dtype(base))).dtype
        return mb.pow(x=_cast(ctx, base, dtype), y=_cast(ctx, exponent, dtype), name=ctx.name())
    if not _is_float(exponent):
        x, y = (_cast(ctx, v, np.dtype(np.int32)) for v in (base, exponent))
        keep = mb.logical_or(x=mb.greater_equal(x=y, y=np.int32(0)), y=mb.equal(x=mb.abs(x=x), y=np.int32(1)))
        return mb.mul(x=mb.pow(x=x, y=mb.abs(x=y)), y=mb.cast(x=keep, dtype="int32"), name=ctx.name())
    z = mb.pow(x=_cast(ctx, base, np.dtype(np.float32)), y=_cast(ctx, exponent, np.dtype(np.float32)))
    whole = mb.select(cond=mb.less(x=z, y=np.float32(0)), a=mb.ceil(x=z), b=mb.floor(x=z))
    return mb.cast(x=whole, dtype="int32", name=ctx.name())


def _cast(ctx: Ctx, v, dtype: np.dtype):
    """A var or constant in ``dtype`` (a MIL dtype)."""
    if isinstance(v, np.ndarray):
        return narrow(v).astype(dtype)
    if np_dtype(v) == dtype:
        return v
    from coremltools.converters.mil.mil import types

    return ctx.mb.cast(x=v, dtype=types.builtin_to_string(types.numpy_type_to_builtin_type(dtype.type)))


def _trunc_div(ctx: Ctx, x, y):
    """Integer x / y rounded toward zero, exactly in int32: the floored quotient, plus one where the
    remainder is non-zero and x and y differ in sign."""
    mb = ctx.mb
    q = mb.floor_div(x=x, y=y)
    inexact = mb.not_equal(x=mb.sub(x=x, y=mb.mul(x=q, y=y)), y=np.int32(0))
    signs_differ = mb.logical_xor(x=mb.less(x=x, y=np.int32(0)), y=mb.less(x=y, y=np.int32(0)))
    return mb.add(x=q, y=mb.cast(x=mb.logical_and(x=inexact, y=signs_differ), dtype="int32"))


@op("Mod")
def mod(ctx: Ctx):
    """``fmod=0`` (integers): the remainder takes the divisor's sign, x - floor(x / y) * y; ``fmod=1``: the
    dividend's, x - trunc(x / y) * y (integers exactly, floats as C's fmod up to rounding)."""
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    mb, fmod = ctx.mb, int(ctx.attr("fmod", 0))
    if _is_float(x):
        if not fmod:
            ctx.refuse("fmod=0 is undefined for floats in ONNX (set fmod=1)")
        ratio = mb.real_div(x=x, y=y)
        q = mb.select(cond=mb.less(x=ratio, y=_like(ratio, 0)), a=mb.ceil(x=ratio), b=mb.floor(x=ratio))
    else:
        q = _trunc_div(ctx, x, y) if fmod else mb.floor_div(x=x, y=y)
    return mb.sub(x=x, y=mb.mul(x=q, y=y), name=ctx.name())


def _is_float(v) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind == "f"
    from coremltools.converters.mil.mil import types

    return types.is_float(v.dtype)


@op("MatMul")
def matmul(ctx: Ctx):
    return ctx.mb.matmul(x=_f32(ctx.get(0)), y=_f32(ctx.get(1)), name=ctx.name())


@op("Gemm")
def gemm(ctx: Ctx):
    a, b, c = ctx.get(0), _f32(ctx.get(1)), _f32(ctx.get(2))
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if ctx.attr("transA", 0):
        a = ctx.mb.transpose(x=a, perm=[1, 0])
    if isinstance(b, np.ndarray) and alpha == 1.0 and (c is None or isinstance(c, np.ndarray)):
        weight = b if ctx.attr("transB", 0) else b.T
        bias = None if c is None else np.broadcast_to(beta * c, (weight.shape[0],)).astype(np.float32)
        return ctx.mb.linear(x=a, weight=np.ascontiguousarray(weight), bias=bias, name=ctx.name())
    y = ctx.mb.matmul(x=a, y=b, transpose_y=bool(ctx.attr("transB", 0)))
    if alpha != 1.0:
        y = ctx.mb.mul(x=y, y=np.float32(alpha))
    if c is not None:
        y = ctx.mb.add(x=y, y=ctx.mb.mul(x=c, y=np.float32(beta)) if beta != 1.0 else c)
    return ctx.mb.identity(x=y, name=ctx.name())


@op("Softmax", "LogSoftmax", "Hardmax")
def softmax(ctx: Ctx):
    """Over ``axis``; before opset 13, over all axes from ``axis`` on, as one flat axis. LogSoftmax as
    (x - max) - log(sum(exp(x - max))), finite where softmax underflows."""
    x = ctx.get(0)
    fn = {"Softmax": lambda c, v, axis: c.mb.softmax(x=v, axis=axis), "LogSoftmax": _log_softmax,
          "Hardmax": _hardmax}[ctx.node.op_type]
    axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1) % x.rank
    if ctx.opset >= 13 or axis == x.rank - 1:
        return ctx.mb.identity(x=fn(ctx, x, axis), name=ctx.name())
    if not _static(x.shape[axis:]):
        ctx.refuse(f"a pre-13 {ctx.node.op_type} over flexible dims {list(x.shape[axis:])} is not lowered")
    shape = np.array(x.shape, np.int32) if _static(x.shape) else ctx.mb.shape(x=x)
    flat = ctx.mb.reshape(x=x, shape=np.array([-1, int(np.prod(x.shape[axis:]))], np.int32))
    return ctx.mb.reshape(x=fn(ctx, flat, 1), shape=shape, name=ctx.name())


def _log_softmax(ctx: Ctx, x, axis: int):
    mb = ctx.mb
    shifted = mb.sub(x=x, y=mb.reduce_max(x=x, axes=[axis], keep_dims=True))
    return mb.sub(x=shifted, y=_log(ctx, mb.reduce_sum(x=mb.exp(x=shifted), axes=[axis], keep_dims=True)))


def _hardmax(ctx: Ctx, x, axis: int):
    """1 at the first largest value along ``axis``, else 0."""
    hit = ctx.mb.equal(x=_positions(ctx, x, axis), y=_extreme_index(ctx, x, axis, largest=True, last=False))
    return _cast(ctx, hit, np_dtype(x))


def _positions(ctx: Ctx, x, axis: int):
    """0, 1, ... along ``axis`` (int32, shaped to broadcast against x)."""
    shape = np.array([-1] + [1] * (x.rank - axis - 1), np.int32)
    n = runtime_shape(ctx, np.array(x.shape[axis], dtype=object))
    if isinstance(n, np.ndarray):
        return np.arange(int(n), dtype=np.int32).reshape(shape)
    return ctx.mb.reshape(x=ctx.mb.range_1d(start=np.int32(0), end=n, step=np.int32(1)), shape=shape)


def _extreme_index(ctx: Ctx, x, axis: int, largest: bool, last: bool, keep_dims: bool = True):
    """The first (or ``last``) index of the largest (or smallest) value along ``axis``, exact on ties (MIL's
    reduce_argmax does not say which tie it picks): the largest of position + 1 (or INT32_MAX - position) where x
    holds that value, 0 elsewhere, mapped back. In int32 arithmetic: MIL's select does not broadcast ``cond``."""
    mb = ctx.mb
    extreme = (mb.reduce_max if largest else mb.reduce_min)(x=x, axes=[axis], keep_dims=True)
    hit = mb.cast(x=mb.equal(x=x, y=extreme), dtype="int32")
    weight = mb.add(x=_positions(ctx, x, axis), y=np.int32(1)) if last else \
        mb.sub(x=np.int32(INT32.max), y=_positions(ctx, x, axis))
    best = mb.reduce_max(x=mb.mul(x=hit, y=weight), axes=[axis], keep_dims=keep_dims)
    return mb.sub(x=best, y=np.int32(1)) if last else mb.sub(x=np.int32(INT32.max), y=best)


@op("Identity")
def identity(ctx: Ctx):
    return ctx.mb.identity(x=ctx.get(0), name=ctx.name())


@op("Dropout")
def dropout(ctx: Ctx):
    """Inference (``training_mode`` absent or constant false) or a constant ratio of 0: x itself, and the mask
    all true. Training-mode dropout draws random numbers, which no converted model reproduces: refused."""
    training = ctx.const(2, "training_mode") if len(ctx.node.input) > 2 and ctx.node.input[2] else None
    if training is not None and bool(training.reshape(-1)[0]):  # the ratio matters only here (default 0.5)
        ratio = ctx.const(1, "ratio") if len(ctx.node.input) > 1 and ctx.node.input[1] else None
        if ratio is None or float(ratio.reshape(-1)[0]) != 0:
            ctx.refuse("training_mode=true draws a random mask; only inference dropout (or ratio 0) is converted")
    x = ctx.get(0)
    y = ctx.mb.identity(x=x, name=ctx.name())
    if len(ctx.node.output) < 2 or not ctx.node.output[1]:
        return y
    ones = ctx.mb.fill(shape=ctx.mb.shape(x=x), value=np.float32(1))
    return y, ctx.mb.cast(x=ones, dtype="bool", name=ctx.name(1))


REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
          "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1_norm",
          "ReduceL2": "reduce_l2_norm", "ReduceLogSum": "reduce_log_sum", "ReduceLogSumExp": "reduce_log_sum_exp",
          "ReduceSumSquare": "reduce_sum_square"}


@op(*REDUCE)
def reduce(ctx: Ctx):
    x = ctx.get(0)
    axes = _axes(ctx, 1, x.rank)
    if axes is None:
        if ctx.attr("noop_with_empty_axes", 0):
            return ctx.mb.identity(x=x, name=ctx.name())
        axes = list(range(x.rank))
    fn = getattr(ctx.mb, REDUCE[ctx.node.op_type])
    return fn(x=x, axes=axes, keep_dims=bool(ctx.attr("keepdims", 1)), name=ctx.name())


@op("Clip")
def clip(ctx: Ctx):
    """max(x, min), then min(., max), in x's dtype (integer clamps too); min and max may be computed at run
    time. As ONNX, min > max gives max."""
    x = ctx.get(0)
    if ctx.opset < 11:
        low, high = (None if v is None else np.asarray(v) for v in (ctx.attr("min"), ctx.attr("max")))
    else:
        low, high = ctx.get(1), ctx.get(2)
    y = x
    for bound, fn in ((low, ctx.mb.maximum), (high, ctx.mb.minimum)):
        if bound is not None:
            y = fn(x=y, y=_cast(ctx, bound, np_dtype(x)))
    return ctx.mb.identity(x=y, name=ctx.name())


@op("HardSigmoid", "HardSwish")
def hard_sigmoid(ctx: Ctx):
    x = ctx.get(0)
    alpha, beta = (ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)) if ctx.node.op_type == "HardSigmoid" else (1 / 6, 0.5)
    if ctx.node.op_type == "HardSigmoid":
        return ctx.mb.sigmoid_hard(x=x, alpha=float(alpha), beta=float(beta), name=ctx.name())
    return ctx.mb.mul(x=x, y=ctx.mb.sigmoid_hard(x=x, alpha=float(alpha), beta=float(beta)), name=ctx.name())


@op("Elu", "Softplus")
def elu_softplus(ctx: Ctx):
    if ctx.node.op_type == "Elu":
        return ctx.mb.elu(x=ctx.get(0), alpha=float(ctx.attr("alpha", 1.0)), name=ctx.name())
    return ctx.mb.softplus(x=ctx.get(0), name=ctx.name())


@op("PRelu")
def prelu(ctx: Ctx):
    """max(x, 0) + slope * min(x, 0): any slope shape that broadcasts (MIL's prelu wants [C] on rank 3-5)."""
    x, slope = ctx.get(0), _f32(ctx.get(1))
    positive = ctx.mb.maximum(x=x, y=np.float32(0))
    negative = ctx.mb.mul(x=ctx.mb.minimum(x=x, y=np.float32(0)), y=slope)
    return ctx.mb.add(x=positive, y=negative, name=ctx.name())


@op("Cast")
def cast(ctx: Ctx):
    import onnx

    to = onnx.TensorProto.DataType.Name(ctx.attr("to"))
    mil = {"FLOAT": "fp32", "DOUBLE": "fp32", "FLOAT16": "fp16", "INT32": "int32", "INT64": "int32", "BOOL": "bool"}
    if to not in mil:
        ctx.refuse(f"a cast to {to} has no Core ML equivalent")
    x = ctx.get(0)
    if isinstance(x, np.ndarray):
        return x.astype({"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "bool": np.bool_}[mil[to]])
    return ctx.mb.cast(x=x, dtype=mil[to], name=ctx.name())


@op("Sum", "Mean")
def sum_mean(ctx: Ctx):
    values = [_f32(ctx.get(i)) for i in range(len(ctx.node.input))]
    y = values[0]
    for v in values[1:]:
        y = ctx.mb.add(x=y, y=v)
    if ctx.node.op_type == "Mean" and len(values) > 1:
        y = ctx.mb.mul(x=y, y=np.float32(1.0 / len(values)))
    return ctx.mb.identity(x=y, name=ctx.name()) if not isinstance(y, np.ndarray) else y


@op("Where")
def where(ctx: Ctx):
    """MIL's select types its output by ``a`` and ``b`` only: where ``cond`` broadcasts further, ``a`` is
    broadcast to it first."""
    mb = ctx.mb
    cond, a, b = ctx.get(0), *same_dtype(ctx, ctx.get(1), ctx.get(2))
    if isinstance(cond, np.ndarray):
        cond = cond.astype(np.bool_)
    elif np_dtype(cond) != np.bool_:
        cond = mb.cast(x=cond, dtype="bool")
    values = _broadcast(a.shape, b.shape)
    if _broadcast(values, cond.shape) == values:
        return mb.select(cond=cond, a=a, b=b, name=ctx.name())
    if np_dtype(a) == np.bool_:
        ctx.refuse("a condition broadcast past boolean values is not lowered")
    return mb.select(cond=cond, a=_spread(ctx, a, cond), b=b, name=ctx.name())


def _broadcast(*shapes) -> tuple:
    """The broadcast of ``shapes`` (ints or MIL symbols): per right-aligned axis, the dim that is not 1."""
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(next((d for d in dims if d != 1), 1) for dims in zip(*padded))


def _spread(ctx: Ctx, a, cond):
    """``a`` broadcast to ``cond``'s shape too: plus zeros shaped as ``cond``."""
    return ctx.mb.add(x=a, y=ctx.mb.mul(x=_cast(ctx, cond, np_dtype(a)), y=_like(a, 0)))


COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
           "GreaterOrEqual": "greater_equal"}


@op(*COMPARE)
def compare(ctx: Ctx):
    """MIL compares numbers only: booleans (ONNX's Equal takes them) are compared as int32 0/1."""
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    if np_dtype(x) == np.bool_:
        x, y = (v.astype(np.int32) if isinstance(v, np.ndarray) else ctx.mb.cast(x=v, dtype="int32") for v in (x, y))
    return getattr(ctx.mb, COMPARE[ctx.node.op_type])(x=x, y=y, name=ctx.name())


@op("Not", "And", "Or", "Xor")
def logical(ctx: Ctx):
    args = [v.astype(np.bool_) if isinstance(v, np.ndarray) else v for v in
            (ctx.get(i) for i in range(len(ctx.node.input)))]
    fn = getattr(ctx.mb, f"logical_{ctx.node.op_type.lower()}")
    return fn(x=args[0], name=ctx.name()) if len(args) == 1 else fn(x=args[0], y=args[1], name=ctx.name())


@op("ArgMax", "ArgMin")
def arg_reduce(ctx: Ctx):
    """int32 indices (ONNX's are int64); ties: the first index (MIL's reduce_argmax/argmin), or with
    ``select_last_index`` the last, found exactly."""
    x = ctx.get(0)
    axis, keep = ctx.attr("axis", 0) % x.rank, bool(ctx.attr("keepdims", 1))
    if ctx.attr("select_last_index", 0):
        y = _extreme_index(ctx, x, axis, ctx.node.op_type == "ArgMax", last=True, keep_dims=keep)
        return ctx.mb.identity(x=y, name=ctx.name())
    fn = ctx.mb.reduce_argmax if ctx.node.op_type == "ArgMax" else ctx.mb.reduce_argmin
    return fn(x=x, axis=axis, keep_dims=keep, name=ctx.name())


@op("Gelu")
def gelu(ctx: Ctx):
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        ctx.refuse(f"approximate={approx} is not a Gelu mode")
    return ctx.mb.gelu(x=ctx.get(0), mode="EXACT" if approx == "none" else "TANH_APPROXIMATION", name=ctx.name())


@op("Einsum")
def einsum(ctx: Ctx):
    """One or two operands, explicit or implicit output, ellipses, diagonals: each operand's diagonals taken and
    the letters only it has (and the output lacks) summed, then a transpose (one operand) or a batched matrix
    product of the operands' letters grouped as [batch, kept, contracted] (a group of several letters is merged
    by a reshape, which needs static sizes)."""
    eq = ctx.attr("equation").replace(" ", "")
    if len(ctx.node.input) not in (1, 2):
        ctx.refuse(f"equation '{eq}': only one or two operands are lowered")
    values = same_dtype(ctx, *(ctx.get(i) for i in range(len(ctx.node.input))))
    terms, out = _einsum_letters(ctx, eq, [len(v.shape) for v in values])
    prepared = []
    for i, (v, term) in enumerate(zip(values, terms)):
        v, term = _diagonals(ctx, v, term)
        others = set(out).union(*(t for j, t in enumerate(terms) if j != i))
        summed = [term.index(c) for c in term if c not in others]
        if summed:
            v, term = ctx.mb.reduce_sum(x=v, axes=summed), "".join(c for c in term if c in others)
        prepared.append((v, term))
    if len(prepared) == 1:
        return _transposed(ctx, *prepared[0], out)
    (a, ta), (b, tb) = prepared
    batch = [c for c in out if c in ta and c in tb]
    contracted = [c for c in ta if c in tb and c not in out]
    kept_a, kept_b = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    y = ctx.mb.matmul(x=_grouped(ctx, a, ta, batch, kept_a, contracted),
                      y=_grouped(ctx, b, tb, batch, contracted, kept_b))
    if len(kept_a) != 1 or len(kept_b) != 1:
        sizes = {**dict(zip(tb, b.shape)), **{c: d for c, d in zip(ta, a.shape) if d != 1 or c not in tb}}
        y = ctx.mb.reshape(x=y, shape=_static_shape(ctx, [sizes[c] for c in batch + kept_a + kept_b], eq))
    return _transposed(ctx, y, "".join(batch + kept_a + kept_b), out)


def _einsum_letters(ctx: Ctx, eq: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' letters and the output's, with each ellipsis spelled out in unused letters (right-aligned
    across operands) and an implicit output made explicit (ellipsis dims, then the letters used once, sorted)."""
    import string

    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks) or any(t.count("...") > 1 or "." in t.replace("...", "") for t in terms):
        ctx.refuse(f"equation '{eq}' does not match its {len(ranks)} operand(s)")
    spare = [c for c in string.ascii_letters if c not in eq]
    width = max([r - len(t) + 3 for t, r in zip(terms, ranks) if "..." in t] + [0])
    fill = "".join(spare[:width])
    terms = [t.replace("...", fill[width - (r - len(t) + 3):]) for t, r in zip(terms, ranks)]
    if arrow:
        out = rhs.replace("...", fill)
    else:
        letters = "".join(terms)
        out = fill + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in fill))
    if any(len(t) != r for t, r in zip(terms, ranks)) or any(c not in "".join(terms) for c in out):
        ctx.refuse(f"equation '{eq}' does not match its operands' ranks {ranks}")
    return terms, out


def _diagonals(ctx: Ctx, v, term: str):
    """``v`` with a repeated letter's axes reduced to their diagonal (the off-diagonal entries zeroed and
    summed away), until each letter appears once."""
    mb = ctx.mb
    for c in dict.fromkeys(term):
        while term.count(c) > 1:
            i = term.index(c)
            j = term.index(c, i + 1)
            n = v.shape[i]
            if not _static([n]):
                ctx.refuse(f"the diagonal of '{term}' over a flexible dim is not lowered")
            mask = np.eye(n, dtype=bool).reshape([n if k in (i, j) else 1 for k in range(len(term))])
            v = mb.reduce_sum(x=mb.select(cond=mask, a=v, b=_like(v, 0)), axes=[j])
            term = term[:j] + term[j + 1:]
    return v, term


def _grouped(ctx: Ctx, v, term: str, batch: list, rows: list, columns: list):
    """``v`` transposed to [batch, rows, columns] and shaped [*batch, prod(rows), prod(columns)]."""
    sizes = dict(zip(term, v.shape))
    v = _transposed(ctx, v, term, "".join(batch + rows + columns), named=False)
    if len(rows) == 1 and len(columns) == 1:
        return v
    dims = [sizes[c] for c in batch] + [[sizes[c] for c in group] for group in (rows, columns)]
    return ctx.mb.reshape(x=v, shape=_static_shape(ctx, dims, term))


def _static_shape(ctx: Ctx, dims: list, term: str) -> np.ndarray:
    """``dims`` (a list entry: the product of its sizes) as a constant shape; refused when any is flexible."""
    flat = [d for dim in dims for d in (dim if isinstance(dim, list) else [dim])]
    if not _static(flat):
        ctx.refuse(f"einsum term '{term}' needs a reshape of flexible dims {flat}")
    return np.array([int(np.prod(d, dtype=np.int64)) if isinstance(d, list) else int(d) for d in dims], np.int32)


def _transposed(ctx: Ctx, v, term: str, out: str, named: bool = True):
    """``v`` with its axes (letters ``term``) in the order of ``out``, as the node's output unless not ``named``."""
    perm = [term.index(c) for c in out]
    name = {"name": ctx.name()} if named else {}
    if perm == sorted(perm):
        return ctx.mb.identity(x=v, **name) if named else v
    return ctx.mb.transpose(x=v, perm=perm, **name)


@op("IsNaN")
def is_nan(ctx: Ctx):
    """NaN is the only value not equal to itself (MIL has no isnan)."""
    x = ctx.get(0)
    return ctx.mb.not_equal(x=x, y=x, name=ctx.name())


@op("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def bitwise(ctx: Ctx):
    """On int32's two's complement bits, exactly in int32 arithmetic (MIL has no bitwise ops): bits 0..30 of each
    operand as floor(v / 2^k) mod 2 along a new last axis, combined (and: ab, or: a + b - ab, xor: a + b - 2ab)
    and summed with weights 2^k; bit 31, the sign, weighs -2^31. Narrower integers are sign- or zero-extended
    int32s, whose results agree."""
    mb = ctx.mb
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    if _is_float(x) or np_dtype(x) == np.bool_:
        ctx.refuse(f"{ctx.node.op_type} of {np_dtype(x)} values is not an integer operation")
    weights = (2 ** np.arange(31)).astype(np.int32)

    def combine(a, b):
        both = mb.mul(x=a, y=b)
        if ctx.node.op_type == "BitwiseAnd":
            return both
        return mb.sub(x=mb.add(x=a, y=b), y=both if ctx.node.op_type == "BitwiseOr" else mb.mul(x=both, y=np.int32(2)))

    def bits(v):
        q = mb.floor_div(x=mb.expand_dims(x=v, axes=[-1]), y=weights)
        return mb.sub(x=q, y=mb.mul(x=mb.floor_div(x=q, y=np.int32(2)), y=np.int32(2)))

    def sign(v):
        return mb.cast(x=mb.less(x=v, y=np.int32(0)), dtype="int32")

    low = mb.reduce_sum(x=mb.mul(x=combine(bits(x), bits(y)), y=weights), axes=[-1])
    return mb.add(x=low, y=mb.mul(x=combine(sign(x), sign(y)), y=np.int32(INT32.min)), name=ctx.name())


MAX_DET = 4  # Det's Leibniz sum has n! products


@op("Det")
def det(ctx: Ctx):
    """The Leibniz sum over permutations of the last two (static, at most 4 x 4) axes: each element gathered, the
    signed products added."""
    import itertools

    mb, x = ctx.mb, ctx.get(0)
    n = x.shape[-1]
    if not _static(x.shape[-2:]) or x.shape[-2] != n or n > MAX_DET:
        ctx.refuse(f"the determinant of {list(x.shape[-2:])} matrices is lowered for static square ones up to "
                   f"{MAX_DET} x {MAX_DET}")
    rows = [mb.gather(x=x, indices=np.int32(i), axis=x.rank - 2) for i in range(n)]
    at = [[mb.gather(x=row, indices=np.int32(j), axis=row.rank - 1) for j in range(n)] for row in rows]
    total = None
    for perm in itertools.permutations(range(n)):
        term = at[0][perm[0]]
        for i in range(1, n):
            term = mb.mul(x=term, y=at[i][perm[i]])
        odd = sum(perm[i] > perm[j] for i in range(n) for j in range(i + 1, n)) % 2
        total = term if total is None else (mb.sub if odd else mb.add)(x=total, y=term)
    return mb.identity(x=total, name=ctx.name())



@op("BitShift")
def bit_shift(ctx: Ctx):
    """RIGHT: floor(x / 2^min(y, 30)) on the non-negative int32s that ONNX's unsigned values become (past 30 both
    give 0). LEFT would have to wrap at the unsigned type's width, which the lowering does not see."""
    if ctx.attr("direction") != "RIGHT":
        ctx.refuse("direction=LEFT wraps at the width of the unsigned type; Core ML computes in int32")
    if any(isinstance(v, np.ndarray) and v.size and v.max() > INT32.max for v in (ctx.get(0), ctx.get(1))):
        ctx.refuse("a constant operand exceeds int32")
    mb = ctx.mb
    x, y = (_cast(ctx, ctx.get(i), np.dtype(np.int32)) for i in (0, 1))
    return mb.floor_div(x=x, y=mb.pow(x=np.int32(2), y=mb.minimum(x=y, y=np.int32(30))), name=ctx.name())
