"""Core ML lowerings: elementwise, comparison, reduction, matrix and activation ops."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import Ctx, _axes, _f32, _static, np_dtype, op, same_dtype


@op("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Cos",
    "Sin")
def unary(ctx: Ctx):
    mil = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp", "Log": "log",
           "Sqrt": "sqrt", "Abs": "abs", "Neg": None, "Reciprocal": "inverse", "Floor": "floor", "Ceil": "ceil",
           "Cos": "cos", "Sin": "sin"}
    x = ctx.get(0)
    if ctx.node.op_type == "Neg":
        return ctx.mb.mul(x=x, y=np.array(-1, np_dtype(x)), name=ctx.name())  # integer positions too
    return getattr(ctx.mb, mil[ctx.node.op_type])(x=x, name=ctx.name())


@op("LeakyRelu")
def leaky_relu(ctx: Ctx):
    return ctx.mb.leaky_relu(x=ctx.get(0), alpha=float(ctx.attr("alpha", 0.01)), name=ctx.name())


@op("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")
def binary(ctx: Ctx):
    mil = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow", "Max": "maximum",
           "Min": "minimum"}[ctx.node.op_type]
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    if ctx.node.op_type == "Div" and not _is_float(x):  # ONNX (onnxruntime) truncates, MIL's floor_div floors
        return ctx.mb.identity(x=_trunc_div(ctx, x, y), name=ctx.name())
    return getattr(ctx.mb, mil)(x=x, y=y, name=ctx.name())


def _trunc_div(ctx: Ctx, x, y):
    """Integer x / y rounded toward zero, exactly in int32: the floored quotient, plus one where the
    remainder is non-zero and x and y differ in sign."""
    mb = ctx.mb
    q = mb.floor_div(x=x, y=y)
    inexact = mb.not_equal(x=mb.sub(x=x, y=mb.mul(x=q, y=y)), y=np.int32(0))
    signs_differ = mb.logical_xor(x=mb.less(x=x, y=np.int32(0)), y=mb.less(x=y, y=np.int32(0)))
    fix = mb.select(cond=mb.logical_and(x=inexact, y=signs_differ), a=np.int32(1), b=np.int32(0))
    return mb.add(x=q, y=fix)


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
        q = mb.select(cond=mb.less(x=ratio, y=np.float32(0)), a=mb.ceil(x=ratio), b=mb.floor(x=ratio))
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


@op("Softmax", "LogSoftmax")
def softmax(ctx: Ctx):
    x = ctx.get(0)
    axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1) % x.rank
    log = ctx.node.op_type == "LogSoftmax"
    if ctx.opset < 13 and axis != x.rank - 1:  # before 13: over all axes from ``axis`` on, as one flat axis
        if not _static(x.shape[axis:]):
            ctx.refuse(f"a pre-13 softmax over flexible dims {list(x.shape[axis:])} is not lowered")
        shape = np.array(x.shape, np.int32) if _static(x.shape) else ctx.mb.shape(x=x)
        flat = ctx.mb.reshape(x=x, shape=np.array([-1, int(np.prod(x.shape[axis:]))], np.int32))
        y = ctx.mb.softmax(x=flat, axis=1)
        y = ctx.mb.log(x=y) if log else y
        return ctx.mb.reshape(x=y, shape=shape, name=ctx.name())
    y = ctx.mb.softmax(x=x, axis=axis, name=None if log else ctx.name())
    return ctx.mb.log(x=y, name=ctx.name()) if log else y


@op("Identity", "Dropout")
def identity(ctx: Ctx):
    return ctx.mb.identity(x=ctx.get(0), name=ctx.name())


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
    x = ctx.get(0)
    low, high = (ctx.attr("min"), ctx.attr("max")) if ctx.opset < 11 else (ctx.const(1, "min"), ctx.const(2, "max"))
    y = x
    for bound, fn in ((low, ctx.mb.maximum), (high, ctx.mb.minimum)):
        if bound is not None:  # in x's dtype (integer clamps too)
            y, bound = same_dtype(ctx, y, np.asarray(bound))
            y = fn(x=y, y=bound)
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
    cond, a, b = ctx.get(0), *same_dtype(ctx, ctx.get(1), ctx.get(2))
    if isinstance(cond, np.ndarray):
        cond = cond.astype(np.bool_)
    elif np_dtype(cond) != np.bool_:
        cond = ctx.mb.cast(x=cond, dtype="bool")
    return ctx.mb.select(cond=cond, a=a, b=b, name=ctx.name())


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
    """int32 indices (ONNX's are int64); ties: the first index, as ONNX's default."""
    if ctx.attr("select_last_index", 0):
        ctx.refuse("select_last_index=1 has no Core ML equivalent (ties resolve to the first index)")
    x = ctx.get(0)
    fn = ctx.mb.reduce_argmax if ctx.node.op_type == "ArgMax" else ctx.mb.reduce_argmin
    return fn(x=x, axis=ctx.attr("axis", 0) % x.rank, keep_dims=bool(ctx.attr("keepdims", 1)), name=ctx.name())


@op("Gelu")
def gelu(ctx: Ctx):
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        ctx.refuse(f"approximate={approx} is not a Gelu mode")
    return ctx.mb.gelu(x=ctx.get(0), mode="EXACT" if approx == "none" else "TANH_APPROXIMATION", name=ctx.name())


def _mil_einsum(a: str, b: str, out: str) -> bool:
    """MIL's einsum form: 'nchw,nwhu->nchu' or 'chw,whr->chr' (any letters)."""
    if len(set(a)) != len(a) or len(a) not in (3, 4) or len(b) != len(a) or len(out) != len(a):
        return False
    *lead, c, h, w = a
    u = b[-1]
    return u not in a and b == "".join(lead) + w + h + u and out == "".join(lead) + c + h + u


@op("Einsum")
def einsum(ctx: Ctx):
    """Two-operand equations MIL's einsum takes, and batched matrix products (either operand transposed)."""
    eq = ctx.attr("equation").replace(" ", "")
    if len(ctx.node.input) != 2 or "->" not in eq or "." in eq:
        ctx.refuse(f"equation '{eq}': only explicit two-operand equations without ellipses are lowered")
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    (a, b), out = eq.split("->")[0].split(","), eq.split("->")[1]
    if _mil_einsum(a, b, out) and not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
        return ctx.mb.einsum(values=(x, y), equation=eq, name=ctx.name())
    if len(a) == len(b) == len(out) >= 2 and a[:-2] == b[:-2] == out[:-2]:
        i, k = out[-2:]
        j = next((c for c in a[-2:] if c not in out), "")
        if j and len(set(a[:-2] + i + j + k)) == len(a) + 1 and sorted(a[-2:]) == sorted(i + j) \
                and sorted(b[-2:]) == sorted(j + k):
            return ctx.mb.matmul(x=x, y=y, transpose_x=a[-2:] == j + i, transpose_y=b[-2:] == k + j,
                                 name=ctx.name())
    ctx.refuse(f"equation '{eq}' is neither MIL's einsum form ('nchw,nwhu->nchu', 'chw,whr->chr') "
               "nor a batched matrix product")


@op("IsNaN")
def is_nan(ctx: Ctx):
    """NaN is the only value not equal to itself (MIL has no isnan)."""
    x = ctx.get(0)
    return ctx.mb.not_equal(x=x, y=x, name=ctx.name())
