"""ONNX nodes as MIL ops: one function per ONNX op in ``OPS``; ``package.program`` builds the MIL program.

Values are MIL vars, or numpy arrays for constants (initializers, Constant nodes, folded values), which MIL
takes directly where it wants constants (conv weights, shapes, axes). A lowering returns one value, or a tuple
with one value per ONNX output. Input dims may be flexible (MIL symbols): folded shape values then hold those
symbols (object arrays, turned into run-time int32 tensors by ``runtime_shape`` where an op needs them), and a
lowering that needs a static dim refuses, naming the node, rather than baking in the sample's size.

Dtype policy (MIL has no int64 or fp64): constants are narrowed with ``narrow`` (int64 -> int32 saturating,
fp64 -> fp32); binary ops get one dtype through ``same_dtype`` (explicit casts, as MIL never promotes).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx

OPS: dict[str, Callable] = {}
TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18")
INT32 = np.iinfo(np.int32)
FP16_MAX = 65504.0
# bounds on what a lowering builds from a model's sizes, so a crafted size cannot make it run or allocate for ever
MAX_UNROLL = 4096  # steps of a recurrent op unrolled into MIL ops
MAX_TAPS = 1024  # kernel taps of a max pool built from one slice per tap
MAX_TABLE = 1 << 24  # entries of a resize's interpolation matrix or index list


def op(*names: str):
    def register(fn):
        for name in names:
            OPS[name] = fn
        return fn
    return register


class Ctx:
    """Values by ONNX name, the node being lowered, and the MIL builder."""

    def __init__(self, mb, opset: int, target: str = "iOS16"):
        self.mb, self.opset, self.target, self.values = mb, opset, target, {}
        self.node: "onnx.NodeProto | None" = None
        self.fp16 = False  # fp16 compute: constants are clamped to +-65504 as they are stored
        self.symbols: dict = {}  # MIL symbol of a flexible dim -> (var, axis) it can be read from at run time

    def needs(self, target: str, what: str):
        """Refuse when the build's deployment target is older than ``target``."""
        if TARGETS.index(self.target) < TARGETS.index(target):
            self.refuse(f"{what} needs --target {target} or newer (building for {self.target})")

    def get(self, i: int, raw: bool = False):
        """Input ``i``: a MIL var or a constant; a folded shape value holding flexible sizes (an object array)
        becomes an int32 tensor computed at run time unless ``raw``."""
        name = self.node.input[i] if i < len(self.node.input) else ""
        value = self.values[name] if name else None
        if not raw and isinstance(value, np.ndarray) and value.dtype == object:
            return runtime_shape(self, value)
        return value

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i`` as a constant (an object array when it holds flexible sizes), else refused."""
        value = self.get(i, raw=True)
        if value is not None and not isinstance(value, np.ndarray):
            self.refuse(f"its {what} must be a constant for Core ML")
        return value

    def attr(self, name: str, default: Any = None) -> Any:
        import onnx

        for a in self.node.attribute:
            if a.name == name:
                value = onnx.helper.get_attribute_value(a)
                if isinstance(value, list) and value and isinstance(value[0], bytes):
                    return [v.decode() for v in value]
                return value.decode() if isinstance(value, bytes) else value
        return default

    def refuse(self, why: str):
        raise UnsupportedError(f"node '{self.node.name}' ({self.node.op_type}): {why}")

    def name(self, i: int = 0) -> str:
        return _mil_name(self.node.output[i])


def _mil_name(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _f32(v):
    return v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v


def narrow(v: np.ndarray) -> np.ndarray:
    """A constant in a dtype MIL has: integers -> int32 (saturating: INT64_MAX must not wrap to -1),
    fp64 -> fp32."""
    if v.dtype.kind in "iu" and v.dtype != np.int32:
        return np.asarray(np.clip(v, INT32.min, INT32.max), np.int32)  # np.clip gives a 0-d array a numpy scalar
    return v.astype(np.float32) if v.dtype == np.float64 else v


def np_dtype(v) -> np.dtype:
    """The numpy dtype of a constant or a MIL var."""
    if isinstance(v, np.ndarray):
        return v.dtype
    from coremltools.converters.mil.mil import types

    return np.dtype(types.nptype_from_builtin(v.dtype))


def same_dtype(ctx: "Ctx", *values) -> list:
    """``values`` in one dtype: the vars' dtype when they agree, else fp32 when any is float, else int32.
    Vars are cast explicitly; constants are narrowed (fp16 ones clamped to +-65504)."""
    vars_ = [v for v in values if v is not None and not isinstance(v, np.ndarray)]
    kinds = {np_dtype(v) for v in vars_} or {narrow(np.asarray(v)).dtype for v in values if v is not None}
    if len(kinds) == 1:
        dtype = kinds.pop()
    else:
        dtype = np.dtype(np.float32) if any(k.kind == "f" for k in kinds) else np.dtype(np.int32)
    mil = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(np.int32): "int32",
           np.dtype(np.bool_): "bool"}[dtype]
    out = []
    for v in values:
        if v is None:
            out.append(v)
        elif isinstance(v, np.ndarray):
            v = narrow(v)
            out.append(np.clip(v, -FP16_MAX, FP16_MAX).astype(dtype) if dtype == np.float16 else v.astype(dtype))
        else:
            out.append(v if np_dtype(v) == dtype else ctx.mb.cast(x=v, dtype=mil))
    return out


def _static(dims) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in dims)


def runtime_shape(ctx: "Ctx", value: np.ndarray):
    """An object array of ints and flexible sizes (MIL symbols, sums, products, floor quotients) as an int32
    tensor computed at run time from the shapes of the vars the symbols come from."""
    parts = [_runtime_size(ctx, e) for e in value.reshape(-1)]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts).reshape(value.shape)
    flat = ctx.mb.concat(values=parts, axis=0) if len(parts) > 1 else parts[0]
    if value.ndim == 0:
        return ctx.mb.squeeze(x=flat)
    return flat if value.ndim == 1 else ctx.mb.reshape(x=flat, shape=np.array(value.shape, np.int32))


def _runtime_size(ctx: "Ctx", e):
    import sympy

    if isinstance(e, (int, np.integer, sympy.Integer)):
        return np.array([int(e)], np.int32)
    if isinstance(e, sympy.Symbol):
        if e not in ctx.symbols:
            ctx.refuse(f"the flexible size {e} cannot be read at run time")
        var, axis = ctx.symbols[e]
        return ctx.mb.slice_by_index(x=ctx.mb.shape(x=var), begin=np.array([axis], np.int32),
                                     end=np.array([axis + 1], np.int32))
    if isinstance(e, (sympy.Add, sympy.Mul)):
        fn = ctx.mb.add if isinstance(e, sympy.Add) else ctx.mb.mul
        if any(a.is_Number and not a.is_Integer for a in e.args):
            ctx.refuse(f"the flexible size {e} is not an integer expression")
        acc = _runtime_size(ctx, e.args[0])
        for arg in e.args[1:]:
            acc = fn(x=acc, y=_runtime_size(ctx, arg))
        return acc
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den.is_Integer:
            return ctx.mb.floor_div(x=_runtime_size(ctx, num), y=np.array([int(den)], np.int32))
    ctx.refuse(f"the flexible size {e} is not lowered")


def _mil_pads(pads: list[int] | None, spatial: int) -> list[int]:
    """ONNX [x1_begin, x2_begin, ..., x1_end, x2_end] -> MIL [x1_begin, x1_end, x2_begin, x2_end]."""
    pads = pads or [0] * (2 * spatial)
    return [p for i in range(spatial) for p in (pads[i], pads[i + spatial])]


def _pad_type(ctx: Ctx) -> str:
    auto = ctx.attr("auto_pad", "NOTSET")
    return {"NOTSET": "custom", "VALID": "valid", "SAME_UPPER": "same", "SAME_LOWER": "same_lower"}[auto]


@op("Conv")
def conv(ctx: Ctx):
    x, w, b = ctx.get(0), ctx.const(1, "weight"), ctx.const(2, "bias")
    spatial = w.ndim - 2
    return ctx.mb.conv(x=x, weight=_f32(w), bias=_f32(b), strides=ctx.attr("strides", [1] * spatial),
                       pad_type=_pad_type(ctx), pad=_mil_pads(ctx.attr("pads"), spatial),
                       dilations=ctx.attr("dilations", [1] * spatial), groups=ctx.attr("group", 1), name=ctx.name())


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


@op("BatchNormalization")
def batch_norm(ctx: Ctx):
    gamma, beta, mean, var = (_f32(ctx.const(i, "statistics")) for i in (1, 2, 3, 4))
    return ctx.mb.batch_norm(x=ctx.get(0), mean=mean, variance=var, gamma=gamma, beta=beta,
                             epsilon=float(ctx.attr("epsilon", 1e-5)), name=ctx.name())


@op("MaxPool", "AveragePool")
def pool(ctx: Ctx):
    kernel = ctx.attr("kernel_shape")
    spatial = len(kernel)
    pads = _mil_pads(ctx.attr("pads"), spatial)
    ceil = bool(ctx.attr("ceil_mode", 0))
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        ctx.refuse("the Indices output (flat argmax positions) has no Core ML equivalent; drop that output")
    dilated = any(d != 1 for d in ctx.attr("dilations", [1] * spatial))
    asymmetric_ceil = ceil and any(pads[2 * i] != pads[2 * i + 1] for i in range(spatial))
    if ctx.node.op_type == "MaxPool" and (dilated or asymmetric_ceil):
        return _max_pool_by_taps(ctx, kernel)
    if dilated:
        ctx.refuse("dilations on AveragePool have no Core ML equivalent (MIL's avg_pool has none)")
    if asymmetric_ceil:
        ctx.refuse("ceil_mode with asymmetric pads has no Core ML equivalent")
    common = dict(x=ctx.get(0), kernel_sizes=kernel, strides=ctx.attr("strides", [1] * spatial),
                  pad_type=_pad_type(ctx), pad=pads, ceil_mode=ceil, name=ctx.name())
    if ctx.node.op_type == "MaxPool":
        return ctx.mb.max_pool(**common)
    return ctx.mb.avg_pool(**common, exclude_padding_from_average=not ctx.attr("count_include_pad", 0))


def _max_pool_by_taps(ctx: Ctx, kernel: list[int]):
    """MaxPool with dilations, or ceil_mode with asymmetric pads (MIL's max_pool has neither): x padded with
    -inf, one strided slice per kernel tap, and their elementwise maximum. Output sizes as onnxruntime's
    (ceil_mode: a last window must start inside the input or its begin padding)."""
    x, spatial = ctx.get(0), len(kernel)
    if int(np.prod(kernel)) > MAX_TAPS:
        ctx.refuse(f"max pooling by taps (dilations or ceil_mode with asymmetric pads) with kernel {kernel} takes "
                   f"over {MAX_TAPS} slices")
    dims = list(x.shape[-spatial:])
    if not _static(dims):
        ctx.refuse(f"max pooling by taps (dilations or ceil_mode with asymmetric pads) over the flexible dims of "
                   f"{list(x.shape)} is not lowered")
    strides, dilations = ctx.attr("strides", [1] * spatial), ctx.attr("dilations", [1] * spatial)
    pads, auto = list(ctx.attr("pads") or [0] * (2 * spatial)), ctx.attr("auto_pad", "NOTSET")
    begin, out, extra = [], [], []
    for i, (n, k, s, d) in enumerate(zip(dims, kernel, strides, dilations)):
        span = (k - 1) * d + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):  # the spec's ceil(n / s) outputs; onnxruntime's are fewer
            ctx.refuse(f"auto_pad={auto} with dilations: onnxruntime and the ONNX spec disagree on the output "
                       "size; give explicit pads")
        pb, pe = (0, 0) if auto == "VALID" else (pads[i], pads[i + spatial])
        size = (n + pb + pe - span) / s
        o = int(np.ceil(size) if ctx.attr("ceil_mode", 0) else np.floor(size)) + 1
        if (o - 1) * s >= n + pb:
            o -= 1
        begin.append(pb)
        out.append(o)
        extra.append(max((o - 1) * s + span - n - pb, 0))
    rank = x.rank
    padded = ctx.mb.pad(x=x, pad=np.array([v for b, e in zip(begin, extra) for v in (b, e)], np.int32),
                        mode="constant", constant_val=float("-inf"))
    y = None
    for tap in np.ndindex(*kernel):
        start = [0] * (rank - spatial) + [t * d for t, d in zip(tap, dilations)]
        stop = [0] * (rank - spatial) + [t * d + (o - 1) * s + 1 for t, d, o, s in zip(tap, dilations, out, strides)]
        part = ctx.mb.slice_by_index(x=padded, begin=np.array(start, np.int32), end=np.array(stop, np.int32),
                                     stride=np.array([1] * (rank - spatial) + list(strides), np.int32),
                                     end_mask=[True] * (rank - spatial) + [False] * spatial)
        y = part if y is None else ctx.mb.maximum(x=y, y=part)
    return ctx.mb.identity(x=y, name=ctx.name())


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: Ctx):
    x = ctx.get(0)
    axes = list(range(2, x.rank))
    fn = ctx.mb.reduce_mean if ctx.node.op_type == "GlobalAveragePool" else ctx.mb.reduce_max
    return fn(x=x, axes=axes, keep_dims=True, name=ctx.name())


@op("Flatten")
def flatten(ctx: Ctx):
    x = ctx.get(0)
    axis = ctx.attr("axis", 1) % max(x.rank, 1)
    if _static(x.shape[:axis]):
        shape = [int(np.prod(x.shape[:axis])) if axis else 1, -1]
    elif _static(x.shape[axis:]):
        shape = [-1, int(np.prod(x.shape[axis:]))]
    else:
        ctx.refuse(f"flattening shape {list(x.shape)} needs the dims on one side of axis {axis} to be static")
    return ctx.mb.reshape(x=x, shape=np.array(shape, np.int32), name=ctx.name())


@op("Reshape")
def reshape(ctx: Ctx):
    x, shape = ctx.get(0), ctx.const(1, "shape")
    if ctx.attr("allowzero", 0) and 0 in shape:
        ctx.refuse("allowzero=1 with a 0 in the shape has no Core ML equivalent")
    dims = [x.shape[i] if _py_int(d) == 0 else _py_int(d) for i, d in enumerate(shape)]  # ONNX 0: copy that dim
    unknown = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    if not unknown:
        return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())
    if len(unknown) == 1 and -1 not in dims:  # one flexible size: let reshape infer it
        dims[unknown[0]] = -1
        return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())
    return ctx.mb.reshape(x=x, shape=runtime_shape(ctx, np.array(dims, dtype=object)), name=ctx.name())


def _py_int(d):
    """A size as a Python int when it is one (numpy or sympy integer), else unchanged."""
    import sympy

    return int(d) if isinstance(d, (int, np.integer, sympy.Integer)) else d


@op("Transpose")
def transpose(ctx: Ctx):
    x = ctx.get(0)
    perm = ctx.attr("perm") or list(range(x.rank))[::-1]
    return ctx.mb.transpose(x=x, perm=perm, name=ctx.name())


@op("Concat")
def concat(ctx: Ctx):
    values = same_dtype(ctx, *(ctx.get(i) for i in range(len(ctx.node.input))))
    return ctx.mb.concat(values=values, axis=ctx.attr("axis"), name=ctx.name())


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


@op("Resize", "Upsample")
def resize(ctx: Ctx):
    """Nearest: MIL's integer upsample where it has ONNX's meaning, else a ``gather`` per resized axis with the
    source indices ONNX computes (any coordinate mode but tf_crop_and_resize, any ``nearest_mode``). Linear: MIL's
    bilinear ops where they sample as ONNX (``sizes`` known only at run time: iOS 17's ``resize``), else, as for
    cubic, a constant interpolation matrix per resized axis (``matmul``). A constant ``x`` resized to run-time
    sizes (a position table to the patch grid) becomes a MIL const first."""
    x = ctx.get(0)
    if isinstance(x, np.ndarray):
        x = ctx.mb.const(val=x)
    mode = ctx.attr("mode", "nearest")
    if ctx.node.op_type == "Upsample" or ctx.opset < 11:  # scales only; floor, or ceil when shrinking
        given = np.array(ctx.attr("scales"), np.float32) if ctx.attr("scales") else ctx.const(1, "scales")
        coords, by_size, rounding = "asymmetric", False, "simple"
    else:
        rounding = ctx.attr("nearest_mode", "round_prefer_floor")
        coords = ctx.attr("coordinate_transformation_mode", "half_pixel")
        scales, sizes = ctx.get(2, raw=True), ctx.get(3, raw=True) if len(ctx.node.input) > 3 else None
        by_size = sizes is not None and not (isinstance(sizes, np.ndarray) and sizes.size == 0)
        given = sizes if by_size else scales
        if given is not None and not isinstance(given, np.ndarray):
            ctx.refuse(f"its {'sizes' if by_size else 'scales'} are computed from run-time data; Core ML needs "
                       "them constant (or, for linear mode from iOS 17 on, sizes that follow the input's shape)")
    if mode not in ("nearest", "linear", "cubic"):
        ctx.refuse(f"mode={mode} is not a Resize mode")
    if coords == "tf_crop_and_resize":
        ctx.refuse("coordinate_transformation_mode=tf_crop_and_resize (roi, extrapolation) is not lowered")
    if ctx.attr("antialias", 0) and mode != "nearest":
        ctx.refuse("antialias=1 has no Core ML equivalent")
    if by_size and ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        ctx.refuse(f"keep_aspect_ratio_policy={ctx.attr('keep_aspect_ratio_policy')} is not lowered")
    axes = [int(a) % x.rank for a in (ctx.attr("axes") or range(x.rank))]
    full = [1.0] * x.rank if not by_size else list(x.shape)
    for a, v in zip(axes, given.tolist() if given.dtype != object else list(given)):
        full[a] = v
    if by_size and not _static(full):
        return _resize_to_runtime_sizes(ctx, x, full, mode, coords)
    if not by_size:
        full = [float(s) for s in full]
    resized = [a for a in range(x.rank) if (full[a] != x.shape[a] if by_size else full[a] != 1.0)]
    native = _linear_op_fits(x, full, resized, by_size, coords) if mode == "linear" else \
        mode == "nearest" and _nearest_upsample_fits(x, full, by_size, coords, rounding)
    if any(not isinstance(x.shape[a], (int, np.integer)) for a in resized) and not native:
        ctx.refuse(f"resizing the flexible dims of {list(x.shape)} needs their sizes at build time ({mode} mode)")
    if mode == "linear" and native:
        return _resize_linear(ctx, x, full, by_size, coords)
    if mode == "nearest" and native:
        return ctx.mb.upsample_nearest_neighbor(x=x, scale_factor_height=full[-2], scale_factor_width=full[-1],
                                                name=ctx.name())
    y = x
    for a in resized:
        n = int(x.shape[a])
        scale, out = (int(full[a]) / n, int(full[a])) if by_size else (full[a], _scaled_size(n, full[a]))
        if out * (1 if mode == "nearest" else n) > MAX_TABLE:
            ctx.refuse(f"resizing axis {a} from {n} to {out} ({mode} mode) needs a table of over {MAX_TABLE:,} "
                       "entries")
        src = _source_coords(ctx, coords, n, out, scale)
        if mode == "nearest":
            if coords == "half_pixel_symmetric":  # its sources fall on rounding boundaries, where fp error decides
                ctx.refuse("nearest mode with half_pixel_symmetric coordinates is not lowered (onnxruntime's "
                           "rounding at its ties is not reproducible)")
            y = ctx.mb.gather(x=y, indices=_nearest_indices(ctx, src, n, rounding, scale), axis=a)
        elif mode == "linear":
            y = _along_axis(ctx, y, a, _linear_matrix(src, n))
        else:
            y = _along_axis(ctx, y, a, _cubic_matrix(src, n, float(ctx.attr("cubic_coeff_a", -0.75)),
                                                     bool(ctx.attr("exclude_outside", 0))))
    return ctx.mb.identity(x=y, name=ctx.name())


def _scaled_size(n: int, scale: float) -> int:
    """ONNX's output size for a scale: floor(n * scale), in fp32 as onnxruntime computes it."""
    return int(np.floor(np.float32(n) * np.float32(scale)))


def _nearest_upsample_fits(x, full: list, by_size: bool, coords: str, rounding: str) -> bool:
    """Whether MIL's integer nearest upsample has ONNX's meaning: rank >= 3, only the last two axes grow by
    integers, and asymmetric coordinates with floor (or a rounding that agrees up to 2x), or half-pixel ones
    with round_prefer_* (sources stay within +-0.5 - 0.5/s of the pixel, so no tie is ever met)."""
    if by_size or x.rank < 3 or any(s != 1.0 for s in full[:-2]):
        return False
    sh, sw = full[-2], full[-1]
    integer = float(sh).is_integer() and float(sw).is_integer() and min(sh, sw) >= 1
    asymmetric = coords == "asymmetric" and (rounding in ("floor", "simple") or max(sh, sw) <= 2)
    half = coords in ("half_pixel", "pytorch_half_pixel") and rounding in ("round_prefer_floor", "round_prefer_ceil")
    return integer and (asymmetric or half)


def _source_coords(ctx: Ctx, coords: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """ONNX's source coordinate of each output index along one axis (fp32, as onnxruntime)."""
    xr, s = np.arange(n_out, dtype=np.float32), np.float32(scale)
    if coords in ("half_pixel", "pytorch_half_pixel"):
        if coords == "pytorch_half_pixel" and n_out == 1:
            return np.zeros(1, np.float32)
        return (xr + np.float32(0.5)) / s - np.float32(0.5)
    if coords == "align_corners":
        return np.zeros(n_out, np.float32) if n_out == 1 else xr * np.float32(n_in - 1) / np.float32(n_out - 1)
    if coords == "asymmetric":
        return xr / s
    if coords == "tf_half_pixel_for_nn":
        return (xr + np.float32(0.5)) / s
    if coords == "half_pixel_symmetric":
        adjust = np.float32(n_out) / (s * np.float32(n_in))
        offset = np.float32(n_in) / np.float32(2) * (np.float32(1) - adjust)
        return offset + (xr + np.float32(0.5)) / s - np.float32(0.5)
    ctx.refuse(f"coordinate_transformation_mode={coords} is not lowered")


def _nearest_indices(ctx: Ctx, src: np.ndarray, n_in: int, rounding: str, scale: float) -> np.ndarray:
    """Source indices of ONNX's ``nearest_mode`` ("simple": Upsample and Resize-10, floor; ceil when shrinking)."""
    if rounding == "simple":
        rounding = "ceil" if scale < 1 else "floor"
    pick = {"round_prefer_floor": lambda v: np.ceil(v - np.float32(0.5)),
            "round_prefer_ceil": lambda v: np.floor(v + np.float32(0.5)), "floor": np.floor, "ceil": np.ceil}
    if rounding not in pick:
        ctx.refuse(f"nearest_mode={rounding} is not a Resize rounding")
    return np.clip(pick[rounding](src), 0, n_in - 1).astype(np.int32)


def _cubic_matrix(src: np.ndarray, n_in: int, a: float, exclude_outside: bool) -> np.ndarray:
    """[n_out, n_in] weights of ONNX's cubic convolution (coefficient ``a``) at the source coordinates ``src``:
    taps floor(x)-1 .. floor(x)+2, edge-clamped, or dropped and renormalised with ``exclude_outside``."""
    base = np.floor(src.astype(np.float64))
    t = src.astype(np.float64) - base
    dist = np.stack([t + 1, t, 1 - t, 2 - t], axis=1)  # |x - tap| for the four taps
    near = ((a + 2) * dist - (a + 3)) * dist * dist + 1
    far = ((a * dist - 5 * a) * dist + 8 * a) * dist - 4 * a
    weights = np.where(dist <= 1, near, far)
    taps = base[:, None].astype(np.int64) + np.arange(-1, 3)
    inside = (taps >= 0) & (taps < n_in)
    if exclude_outside:
        weights = np.where(inside, weights, 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    matrix = np.zeros((len(src), n_in))
    for k in range(4):
        np.add.at(matrix, (np.arange(len(src)), np.clip(taps[:, k], 0, n_in - 1)), weights[:, k])
    return matrix.astype(np.float32)


def _along_axis(ctx: Ctx, x, axis: int, matrix: np.ndarray):
    """``matrix`` [n_out, n_in] applied along ``axis`` of x (moved last for a matmul, then back)."""
    last = x.rank - 1
    if axis == last:
        return ctx.mb.matmul(x=x, y=np.ascontiguousarray(matrix.T))
    perm = list(range(x.rank))
    perm[axis], perm[last] = last, axis
    y = ctx.mb.matmul(x=ctx.mb.transpose(x=x, perm=perm), y=np.ascontiguousarray(matrix.T))
    return ctx.mb.transpose(x=y, perm=perm)


# ONNX coordinate modes as the sampling modes of MIL's size-based bilinear ops (they resample at n_in / n_out)
SAMPLING = {"half_pixel": "UNALIGN_CORNERS", "pytorch_half_pixel": "UNALIGN_CORNERS",
            "align_corners": "STRICT_ALIGN_CORNERS", "asymmetric": "DEFAULT"}


def _linear_op_fits(x, full: list, resized: list, by_size: bool, coords: str) -> bool:
    """Whether MIL's bilinear ops have ONNX's meaning: the last two axes of rank >= 3, a coordinate mode they
    sample like, and no pytorch_half_pixel output of size 1 (which samples index 0)."""
    if x.rank < 3 or any(a < x.rank - 2 for a in resized) or coords not in SAMPLING:
        return False
    return not (by_size and coords == "pytorch_half_pixel" and min(int(full[-2]), int(full[-1])) == 1)


def _linear_matrix(src: np.ndarray, n_in: int) -> np.ndarray:
    """[n_out, n_in] weights of ONNX's linear interpolation at the source coordinates (clamped to the input)."""
    src = np.clip(src.astype(np.float64), 0, n_in - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    matrix = np.zeros((len(src), n_in))
    rows = np.arange(len(src))
    np.add.at(matrix, (rows, lo), 1 - (src - lo))
    np.add.at(matrix, (rows, hi), src - lo)
    return matrix.astype(np.float32)


def _resize_linear(ctx: Ctx, x, full: list, by_size: bool, coords: str):
    """Bilinear on the last two axes: ``upsample_bilinear`` for scales, ``resize_bilinear`` for sizes."""
    if by_size:
        oh, ow = int(full[-2]), int(full[-1])
        return ctx.mb.resize_bilinear(x=x, target_size_height=oh, target_size_width=ow,
                                      sampling_mode=SAMPLING[coords], name=ctx.name())
    # iOS 15's op has no half_pixel_centers: align_corners=False means half-pixel there
    if coords == "asymmetric":
        ctx.needs("iOS16", "linear resize with asymmetric coordinates")
    extra = {} if ctx.target == "iOS15" else {"half_pixel_centers": coords in ("half_pixel", "pytorch_half_pixel")}
    return ctx.mb.upsample_bilinear(x=x, scale_factor_height=full[-2], scale_factor_width=full[-1],
                                    align_corners=coords == "align_corners", name=ctx.name(), **extra)


def _resize_to_runtime_sizes(ctx: Ctx, x, full: list, mode: str, coords: str):
    """``sizes`` holding flexible sizes (e.g. another input's Shape): iOS 17's ``resize`` of the last two axes to
    sizes computed at run time; the leading sizes must be the input's own."""
    if mode != "linear":
        ctx.refuse(f"{mode} mode to sizes known only at run time has no Core ML equivalent (linear mode has)")
    if any(_py_int(f) != _py_int(d) for f, d in zip(full[:-2], x.shape[:-2])):
        ctx.refuse("sizes known only at run time may change only the last two axes in Core ML")
    if coords not in SAMPLING or coords == "pytorch_half_pixel":
        ctx.refuse(f"coordinate_transformation_mode={coords} to sizes known only at run time has no Core ML "
                   "equivalent")
    ctx.needs("iOS17", "resizing to sizes known only at run time")
    shape = runtime_shape(ctx, np.array(full[-2:], dtype=object))
    return ctx.mb.resize(x=x, shape=shape, resized_dims=np.uint32(2), interpolation_mode="LINEAR",
                         sampling_mode=SAMPLING[coords], name=ctx.name())


def _axes(ctx: Ctx, index: int, rank: int) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or the constant input ``index`` (newer), made non-negative."""
    axes = ctx.attr("axes")
    if axes is None and index < len(ctx.node.input) and ctx.node.input[index]:
        axes = ctx.const(index, "axes").tolist()
    return None if axes is None else [int(a) % rank for a in axes]


@op("Squeeze")
def squeeze(ctx: Ctx):
    x = ctx.get(0)
    axes = _axes(ctx, 1, x.rank)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    if any(x.shape[a] != 1 for a in axes):  # MIL would silently ignore such an axis
        ctx.refuse(f"axes {axes} include a dimension that is not 1 in shape {list(x.shape)}")
    return ctx.mb.squeeze(x=x, axes=axes, name=ctx.name())


@op("Unsqueeze")
def unsqueeze(ctx: Ctx):
    x = ctx.get(0)
    axes = _axes(ctx, 1, x.rank + len(ctx.attr("axes") or ctx.const(1, "axes")))
    return ctx.mb.expand_dims(x=x, axes=sorted(axes), name=ctx.name())


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


@op("LayerNormalization")
def layer_norm(ctx: Ctx):
    x, gamma, beta = ctx.get(0), ctx.const(1, "scale"), ctx.const(2, "bias")
    axis = ctx.attr("axis", -1) % x.rank
    if len(ctx.node.output) > 1 and any(ctx.node.output[1:]):
        ctx.refuse("the Mean and InvStdDev outputs have no Core ML equivalent")
    shape = tuple(x.shape[axis:])
    gamma = np.broadcast_to(_f32(gamma), shape).astype(np.float32)
    beta = None if beta is None else np.broadcast_to(_f32(beta), shape).astype(np.float32)
    return ctx.mb.layer_norm(x=x, axes=list(range(axis, x.rank)), gamma=gamma, beta=beta,
                             epsilon=float(ctx.attr("epsilon", 1e-5)), name=ctx.name())


@op("Gather")
def gather(ctx: Ctx):
    x = ctx.get(0)
    axis = ctx.attr("axis", 0) % len(x.shape)
    indices = _nonnegative(ctx, x, ctx.get(1), axis)
    if isinstance(x, np.ndarray):  # a constant table (embeddings) looked up at run time
        x = narrow(x)
    return ctx.mb.gather(x=x, indices=indices, axis=axis, name=ctx.name())


def _nonnegative(ctx: Ctx, x, indices, axis: int):
    """Indices into ``axis`` of x made non-negative (negative ones are out of bounds from iOS 17 on), int32:
    constants here, run-time ones by select(idx < 0, idx + n, idx)."""
    n = x.shape[axis]
    if isinstance(indices, np.ndarray):
        if not isinstance(n, (int, np.integer)) and (indices < 0).any():
            ctx.refuse(f"negative indices into the flexible dim {axis} are not lowered")
        return narrow(np.where(indices < 0, indices + (n if (indices < 0).any() else 0), indices))
    if np_dtype(indices) != np.int32:
        indices = ctx.mb.cast(x=indices, dtype="int32")
    size = np.int32(n) if isinstance(n, (int, np.integer)) else ctx.mb.gather(
        x=ctx.mb.shape(x=x), indices=np.int32(axis), axis=0)
    return ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=size), b=indices)


@op("GatherND")
def gather_nd(ctx: Ctx):
    """Rows of x picked by the last axis of ``indices`` (``batch_dims`` 0: what ``weight[idx]`` exports as);
    negative indices made non-negative, per picked dim, as ``Gather``'s are."""
    x, indices = ctx.get(0), ctx.get(1)
    if ctx.attr("batch_dims", 0):
        ctx.refuse("batch_dims is not lowered")
    depth = indices.shape[-1]
    if not isinstance(depth, (int, np.integer)) or depth > len(x.shape):
        ctx.refuse(f"indices of shape {list(indices.shape)} into x of shape {list(x.shape)} are not lowered")
    x = narrow(x) if isinstance(x, np.ndarray) else x
    dims = list(x.shape[:depth])
    if isinstance(indices, np.ndarray):
        if (indices < 0).any() and not _static(dims):
            ctx.refuse("negative indices into flexible dims are not lowered")
        sizes = np.array([int(d) if isinstance(d, (int, np.integer)) else 0 for d in dims], np.int64)
        return ctx.mb.gather_nd(x=x, indices=narrow(np.where(indices < 0, indices + sizes, indices)),
                                name=ctx.name())
    indices = indices if np_dtype(indices) == np.int32 else ctx.mb.cast(x=indices, dtype="int32")
    sizes = np.array(dims, np.int32) if _static(dims) else ctx.mb.slice_by_index(
        x=ctx.mb.shape(x=x), begin=np.array([0], np.int32), end=np.array([depth], np.int32))
    fixed = ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=sizes), b=indices)
    return ctx.mb.gather_nd(x=x, indices=fixed, name=ctx.name())


@op("Slice")
def slice_(ctx: Ctx):
    """Constant starts/ends/axes/steps. Axes with negative steps are reversed first (``reverse``), so the
    slice itself always runs forwards: ``x[s:e:-k]`` is ``reverse(x)[n-1-s : n-1-e : k]``. A constant ``x`` cut at
    run-time sizes (a position table to the sequence length) becomes a MIL const first."""
    x = ctx.get(0)
    if isinstance(x, np.ndarray):
        x = ctx.mb.const(val=x)
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        starts, ends = ctx.const(1, "starts").tolist(), ctx.const(2, "ends").tolist()
        axes = ctx.const(3, "axes").tolist() if len(ctx.node.input) > 3 and ctx.node.input[3] else None
        steps = ctx.const(4, "steps").tolist() if len(ctx.node.input) > 4 and ctx.node.input[4] else None
    axes = [int(a) % x.rank for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(axes)
    begin, end, stride = [0] * x.rank, [0] * x.rank, [1] * x.rank
    end_mask = [True] * x.rank
    flipped = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = x.shape[a]
        if st == 0:
            ctx.refuse("a slice step of 0 is invalid")
        stride[a] = abs(int(st))
        if st < 0:
            flipped.append(a)
            if isinstance(n, (int, np.integer)):  # ONNX clamps starts to [0, n-1], ends to [-1, n-1]
                s = min(max(s + n if s < 0 else s, 0), int(n) - 1)
                e = min(max(e + n if e < 0 else e, -1), int(n) - 1)
                begin[a], end[a], end_mask[a] = int(n) - 1 - s, int(n) - 1 - e, False
            elif not ((s == -1 or s >= INT32.max) and e <= INT32.min):  # a flexible dim: reversed whole only
                ctx.refuse(f"a negative step on the flexible dim {a} is lowered only from the last to the first "
                           "element (starts -1 or INT_MAX, ends INT_MIN)")
        elif isinstance(n, (int, np.integer)):
            # saturate: INT64_MAX means "to the end" and must not wrap when narrowed to int32
            begin[a], end[a], end_mask[a] = _clamp(s, n), _clamp(e, n), False
        else:  # a flexible dim: MIL indices count from the end when negative and clamp, as ONNX's do
            begin[a] = _saturate(s)
            if e < INT32.max:
                end[a], end_mask[a] = _saturate(e), False
    if flipped:
        x = ctx.mb.reverse(x=x, axes=sorted(flipped))
        if all(begin[a] == 0 and end_mask[a] and stride[a] == 1 for a in range(x.rank)):
            return ctx.mb.identity(x=x, name=ctx.name())
    return ctx.mb.slice_by_index(x=x, begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                                 stride=np.array(stride, np.int32), end_mask=end_mask, name=ctx.name())


def _saturate(index: int) -> int:
    """An ONNX slice index as int32 (INT64_MIN/MAX mean "from the start"/"to the end" and stay so)."""
    return int(min(max(index, INT32.min), INT32.max))


def _clamp(index: int, n: int) -> int:
    return int(min(max(index + n if index < 0 else index, 0), n))


@op("Pad")
def pad(ctx: Ctx):
    """Constant/reflect/edge; opset 18's ``axes`` expanded to every dim; negative pads crop (a slice after)."""
    x = ctx.get(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.refuse(f"mode={mode} has no Core ML equivalent")
    pads = ctx.attr("pads") if ctx.opset < 11 else ctx.const(1, "pads").tolist()
    value = ctx.attr("value", 0.0) if ctx.opset < 11 else (ctx.const(2, "constant_value") if len(ctx.node.input) > 2
                                                            and ctx.node.input[2] else 0.0)
    rank = x.rank
    axes = ctx.const(3, "axes").tolist() if len(ctx.node.input) > 3 and ctx.node.input[3] else list(range(rank))
    begins, ends = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begins[a % rank], ends[a % rank] = int(pads[k]), int(pads[k + len(axes)])
    y = x
    if any(p > 0 for p in begins + ends):
        mil = [max(v, 0) for i in range(rank) for v in (begins[i], ends[i])]
        y = ctx.mb.pad(x=x, pad=np.array(mil, np.int32), mode="replicate" if mode == "edge" else mode,
                       constant_val=float(np.asarray(value).reshape(-1)[0]) if np.size(value) else 0.0)
    if any(p < 0 for p in begins + ends):
        if not _static([y.shape[i] for i in range(rank) if ends[i] < 0]):
            ctx.refuse("negative pads (cropping) at the end of a flexible dim are not lowered")
        stop = [int(y.shape[i]) + ends[i] if ends[i] < 0 else 0 for i in range(rank)]
        y = ctx.mb.slice_by_index(x=y, begin=np.array([max(-b, 0) for b in begins], np.int32),
                                  end=np.array(stop, np.int32), end_mask=[e >= 0 for e in ends])
    return ctx.mb.identity(x=y, name=ctx.name())


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


@op("LRN")
def lrn(ctx: Ctx):
    size = int(ctx.attr("size"))
    if size % 2 == 0:  # ONNX's window is lopsided for even sizes; MIL documents a symmetric one
        ctx.refuse(f"size={size}: only odd LRN windows have the same meaning in Core ML")
    return ctx.mb.local_response_norm(x=ctx.get(0), size=size, alpha=float(ctx.attr("alpha", 1e-4)),
                                      beta=float(ctx.attr("beta", 0.75)), k=float(ctx.attr("bias", 1.0)),
                                      name=ctx.name())


def _ifoc(w: np.ndarray) -> np.ndarray:
    """ONNX gate blocks [i, o, f, c] along axis 0 -> MIL's [i, f, o, c]."""
    i, o, f, c = np.split(w, 4, axis=0)
    return np.concatenate([i, f, o, c], axis=0).astype(np.float32)


# ONNX RNN activations: which of activation_alpha / activation_beta each takes (with ONNX's defaults)
RNN_PARAMS = {"Relu": (None, None), "Tanh": (None, None), "Sigmoid": (None, None), "Softsign": (None, None),
              "Softplus": (None, None), "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None),
              "ThresholdedRelu": (1.0, None), "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}


def _rnn_activations(ctx: Ctx, defaults: list[str], directions: int) -> list[Callable]:
    """The node's ``activations`` (default ``defaults`` per direction) as functions on MIL vars; alphas and
    betas are consumed in order by the activations that take them (as onnxruntime)."""
    names = ctx.attr("activations") or defaults * directions
    alphas, betas = list(ctx.attr("activation_alpha") or []), list(ctx.attr("activation_beta") or [])
    if len(names) != len(defaults) * directions:
        ctx.refuse(f"activations lists {len(names)} functions; {len(defaults) * directions} expected")
    fns = []
    for name in names:
        if name not in RNN_PARAMS:
            ctx.refuse(f"activation {name} is not an ONNX RNN activation")
        alpha, beta = RNN_PARAMS[name]
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        fns.append(_activation(ctx.mb, name, alpha, beta))
    return fns


def _activation(mb, name: str, alpha, beta) -> Callable:
    """One ONNX RNN activation from MIL elementwise ops."""
    f32 = np.float32
    return {"Relu": lambda v: mb.relu(x=v), "Tanh": lambda v: mb.tanh(x=v), "Sigmoid": lambda v: mb.sigmoid(x=v),
            "Softsign": lambda v: mb.real_div(x=v, y=mb.add(x=mb.abs(x=v), y=f32(1))),
            "Softplus": lambda v: mb.softplus(x=v),
            "Affine": lambda v: mb.add(x=mb.mul(x=v, y=f32(alpha)), y=f32(beta)),
            "LeakyRelu": lambda v: mb.leaky_relu(x=v, alpha=float(alpha)),
            "ThresholdedRelu": lambda v: mb.select(cond=mb.greater(x=v, y=f32(alpha)), a=v, b=f32(0)),
            "ScaledTanh": lambda v: mb.mul(x=mb.tanh(x=mb.mul(x=v, y=f32(beta))), y=f32(alpha)),
            "HardSigmoid": lambda v: mb.sigmoid_hard(x=v, alpha=float(alpha), beta=float(beta)),
            "Elu": lambda v: mb.elu(x=v, alpha=float(alpha))}[name]


def _rnn_input(ctx: Ctx):
    """X as [s, b, I] (transposed from [b, s, I] when ``layout=1``) and the per-step masks of ``sequence_lens``
    ([b, 1] bools, step < length; None when absent or every length is the sequence's)."""
    x = ctx.get(0)
    layout = int(ctx.attr("layout", 0))
    if layout:
        x = ctx.mb.transpose(x=x, perm=[1, 0, 2])
    lens, steps = ctx.get(4), x.shape[0]
    if lens is None or isinstance(lens, np.ndarray) and isinstance(steps, (int, np.integer)) and \
            np.all(lens == int(steps)):
        return x, None
    if not isinstance(steps, (int, np.integer)):
        ctx.refuse("sequence_lens with a flexible sequence length are not lowered")
    _check_unroll(ctx, int(steps))
    if isinstance(lens, np.ndarray):
        return x, [narrow(t < lens).reshape(-1, 1) for t in range(int(steps))]
    lens = ctx.mb.expand_dims(x=lens if np_dtype(lens) == np.int32 else ctx.mb.cast(x=lens, dtype="int32"), axes=[1])
    return x, [ctx.mb.less(x=np.int32(t), y=lens) for t in range(int(steps))]


def _rnn_state(ctx: Ctx, i: int, d: int, x, hidden: int):
    """Initial state input ``i`` of direction ``d`` as [b, H] (``layout=1``: stored [b, D, H])."""
    if ctx.attr("layout", 0) and ctx.get(i) is not None:
        state = ctx.get(i)
        state = state[:, d] if isinstance(state, np.ndarray) else ctx.mb.squeeze(x=ctx.mb.slice_by_index(
            x=state, begin=np.array([0, d, 0], np.int32), end=np.array([0, d + 1, 0], np.int32),
            begin_mask=[True, False, True], end_mask=[True, False, True]), axes=[1])
        return narrow(state) if isinstance(state, np.ndarray) else state
    return _state(ctx, i, d, x, hidden)


def _clipped(ctx: Ctx, v):
    """A gate's pre-activation bounded to [-clip, clip] when the node has ``clip``."""
    clip = ctx.attr("clip")
    if clip is None:
        return v
    return ctx.mb.minimum(x=ctx.mb.maximum(x=v, y=np.float32(-clip)), y=np.float32(clip))


def _step(ctx: Ctx, seq, t: int):
    """Row ``t`` of a [s, b, n] var as [b, n]."""
    return ctx.mb.squeeze(x=ctx.mb.slice_by_index(x=seq, begin=np.array([t, 0, 0], np.int32),
                                                  end=np.array([t + 1, 0, 0], np.int32),
                                                  end_mask=[False, True, True]), axes=[0])


def _check_unroll(ctx: Ctx, steps: int) -> None:
    if steps > MAX_UNROLL:
        ctx.refuse(f"a sequence of {steps} steps is too long to unroll (at most {MAX_UNROLL})")


def _masked(ctx: Ctx, mask, new, old):
    """``new`` where the step is within the batch row's sequence length, else ``old``."""
    return new if mask is None else ctx.mb.select(cond=mask, a=new, b=old)


@op("LSTM")
def lstm(ctx: Ctx):
    """Any direction, ``layout`` 0/1. MIL's own lstm (one per direction, the backward one over the reversed
    sequence) for the default activations; clip, other activations, peepholes, ``input_forget`` and
    ``sequence_lens`` shorter than the sequence: unrolled over the (static) sequence with ONNX's equations."""
    w, r, b = ctx.const(1, "W"), ctx.const(2, "R"), ctx.const(3, "B")
    backwards = _directions(ctx)
    hidden = w.shape[1] // 4
    x, masks = _rnn_input(ctx)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh", "Tanh"], len(backwards))
    peep = ctx.const(7, "P")
    plain = masks is None and ctx.attr("clip") is None and not ctx.attr("input_forget", 0) and \
        (peep is None or not np.any(peep)) and ctx.attr("activations") in (None, ["Sigmoid", "Tanh", "Tanh"]
                                                                              * len(backwards))
    if not plain and not isinstance(x.shape[0], (int, np.integer)):
        ctx.refuse("clip, peepholes, input_forget, sequence_lens or non-default activations need a static "
                   "sequence length (the LSTM is unrolled)")
    mb, ys, hs, cs = ctx.mb, [], [], []
    for d, backward in enumerate(backwards):
        h0, c0 = _rnn_state(ctx, 5, d, x, hidden), _rnn_state(ctx, 6, d, x, hidden)
        bias = np.zeros(8 * hidden, np.float32) if b is None else narrow(b[d])
        if plain:
            y, h, c = mb.lstm(x=mb.reverse(x=x, axes=[0]) if backward else x, initial_h=h0, initial_c=c0,
                              weight_ih=_ifoc(w[d]), weight_hh=_ifoc(r[d]), bias=_ifoc(bias[:4 * hidden])
                              + _ifoc(bias[4 * hidden:]), direction="forward", output_sequence=True,
                              recurrent_activation="sigmoid", cell_activation="tanh", activation="tanh")
            y = mb.reverse(x=y, axes=[0]) if backward else y
        else:
            p = np.zeros(3 * hidden, np.float32) if peep is None else narrow(peep[d])
            y, h, c = _lstm_direction(ctx, x, narrow(w[d]), narrow(r[d]), bias, p, h0, c0, acts[3 * d:3 * d + 3],
                                      masks, backward)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return _rnn_outputs(ctx, ys, hs, cs)


def _lstm_direction(ctx: Ctx, x, w, r, b, p, h, c, acts: list, masks, backward: bool) -> tuple:
    """One direction unrolled (ONNX gates [i, o, f, c], peepholes [i, o, f]): outputs [s, b, H] in time order
    (zeros past a row's sequence length) and the final h and c [b, H]."""
    mb, hidden, steps = ctx.mb, w.shape[0] // 4, int(x.shape[0])
    _check_unroll(ctx, steps)
    f, g, act_h = acts
    xw = mb.linear(x=x, weight=w, bias=b[:4 * hidden] + b[4 * hidden:])
    pi, po, pf = np.split(p, 3)
    outputs = [None] * steps
    for t in (reversed(range(steps)) if backward else range(steps)):
        gi, go, gf, gc = mb.split(x=mb.add(x=_step(ctx, xw, t), y=mb.linear(x=h, weight=r)), num_splits=4, axis=-1)
        i = f(_clipped(ctx, mb.add(x=gi, y=mb.mul(x=c, y=pi))))
        forget = mb.sub(x=np.float32(1), y=i) if ctx.attr("input_forget", 0) else \
            f(_clipped(ctx, mb.add(x=gf, y=mb.mul(x=c, y=pf))))
        c_new = mb.add(x=mb.mul(x=forget, y=c), y=mb.mul(x=i, y=g(_clipped(ctx, gc))))
        o = f(_clipped(ctx, mb.add(x=go, y=mb.mul(x=c_new, y=po))))
        h_new = mb.mul(x=o, y=act_h(c_new))
        mask = None if masks is None else masks[t]
        outputs[t] = h_new if mask is None else mb.select(cond=mask, a=h_new, b=np.float32(0))
        h, c = _masked(ctx, mask, h_new, h), _masked(ctx, mask, c_new, c)
    return mb.stack(values=outputs, axis=0), h, c


def _directions(ctx: Ctx) -> list[bool]:
    """Whether each ONNX direction (index 0, 1) runs over the reversed sequence."""
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        ctx.refuse(f"direction={direction} is not an RNN direction")
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


def _state(ctx: Ctx, i: int, d: int, x, hidden: int):
    """Initial state input ``i`` ([D, b, H]) of direction ``d`` as [b, H]; zeros when absent."""
    state = ctx.get(i)
    if state is None:
        return _zero_state(ctx, x, hidden)
    if isinstance(state, np.ndarray):
        return narrow(state[d])
    return ctx.mb.squeeze(x=ctx.mb.slice_by_index(x=state, begin=np.array([d, 0, 0], np.int32),
                                                  end=np.array([d + 1, 0, 0], np.int32),
                                                  end_mask=[False, True, True]), axes=[0])


def _rnn_outputs(ctx: Ctx, ys: list, *finals: list) -> tuple:
    """ONNX's Y [s, D, b, H] and final states [D, b, H] from per-direction [s, b, H] and [b, H] values."""
    outs = list(ctx.node.output) + [""] * (1 + len(finals) - len(ctx.node.output))
    layout = int(ctx.attr("layout", 0))  # 1: Y [b, s, D, H], final states [b, D, H]

    def stack(values, axis, i, perm=None):
        if not outs[i]:
            return None
        named = {} if perm else {"name": ctx.name(i)}
        y = ctx.mb.expand_dims(x=values[0], axes=[axis], **named) if len(values) == 1 else \
            ctx.mb.stack(values=values, axis=axis, **named)
        return ctx.mb.transpose(x=y, perm=perm, name=ctx.name(i)) if perm else y
    return (stack(ys, 1, 0, [2, 0, 1, 3] if layout else None),
            *(stack(f, 1 if layout else 0, i + 1) for i, f in enumerate(finals)))[:len(ctx.node.output)]


@op("ConvTranspose")
def conv_transpose(ctx: Ctx):
    """Explicit pads and ``output_padding`` (extra rows at the end: the cropping there shrinks, and what is
    left over is zero-padded); the bias is added last so it reaches those rows too."""
    x, w, b = ctx.get(0), ctx.const(1, "weight"), ctx.const(2, "bias")
    spatial = w.ndim - 2
    if ctx.attr("output_shape") is not None:
        ctx.refuse("the output_shape attribute is not lowered; give pads and output_padding instead")
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "VALID"):
        ctx.refuse(f"auto_pad={auto} is not lowered; give explicit pads")
    pads = [0] * (2 * spatial) if auto == "VALID" else list(ctx.attr("pads") or [0] * (2 * spatial))
    extra = list(ctx.attr("output_padding") or [0] * spatial)
    ends = [pads[spatial + i] - extra[i] for i in range(spatial)]
    mil_pad = [p for i in range(spatial) for p in (pads[i], max(ends[i], 0))]
    y = ctx.mb.conv_transpose(x=x, weight=narrow(w), pad_type="custom", pad=np.array(mil_pad, np.int32),
                              strides=np.array(ctx.attr("strides", [1] * spatial), np.int32),
                              dilations=np.array(ctx.attr("dilations", [1] * spatial), np.int32),
                              groups=np.int32(ctx.attr("group", 1)))
    if any(e < 0 for e in ends):
        y = ctx.mb.pad(x=y, pad=np.array([p for e in ends for p in (0, max(-e, 0))], np.int32), mode="constant",
                       constant_val=0.0)
    if b is not None:
        y = ctx.mb.add(x=y, y=narrow(b).reshape(-1, *[1] * spatial))
    return ctx.mb.identity(x=y, name=ctx.name())


@op("InstanceNormalization")
def instance_norm(ctx: Ctx):
    x, gamma, beta = ctx.get(0), narrow(ctx.const(1, "scale")), narrow(ctx.const(2, "bias"))
    eps = float(ctx.attr("epsilon", 1e-5))
    if x.rank in (3, 4):
        return ctx.mb.instance_norm(x=x, gamma=gamma, beta=beta, epsilon=np.float32(eps), name=ctx.name())
    axes = list(range(2, x.rank))  # other ranks: (x - mean) / sqrt(var + eps) * gamma + beta
    shape = (-1, *[1] * (x.rank - 2))
    centred = ctx.mb.sub(x=x, y=ctx.mb.reduce_mean(x=x, axes=axes, keep_dims=True))
    var = ctx.mb.reduce_mean(x=ctx.mb.mul(x=centred, y=centred), axes=axes, keep_dims=True)
    y = ctx.mb.mul(x=centred, y=ctx.mb.rsqrt(x=var, epsilon=np.float32(eps)))
    return ctx.mb.add(x=ctx.mb.mul(x=y, y=gamma.reshape(shape)), y=beta.reshape(shape), name=ctx.name())


@op("Split")
def split(ctx: Ctx):
    """Several outputs: sizes from ``split`` (attribute before 13, input after), else equal parts
    (opset 18's ``num_outputs`` with a smaller last part)."""
    x = ctx.get(0)
    axis = ctx.attr("axis", 0) % x.rank
    sizes = ctx.attr("split") if ctx.opset < 13 else (
        ctx.const(1, "split") if len(ctx.node.input) > 1 and ctx.node.input[1] else None)
    count = ctx.attr("num_outputs") or len(ctx.node.output)
    n = x.shape[axis]
    if sizes is None and isinstance(n, (int, np.integer)):
        part = -(-int(n) // count)
        sizes = [part] * (count - 1) + [int(n) - part * (count - 1)]
    name = f"{ctx.name()}_split"
    if sizes is None:  # a flexible dim: equal parts
        return tuple(ctx.mb.split(x=x, num_splits=count, axis=axis, name=name))
    return tuple(ctx.mb.split(x=x, split_sizes=narrow(np.asarray(sizes)), axis=axis, name=name))


@op("Expand")
def expand(ctx: Ctx):
    """Broadcast to ``shape``: expand_dims to the output rank, then tile the dims that are 1."""
    x, shape = ctx.get(0), ctx.get(1, raw=True)
    if not isinstance(shape, np.ndarray) or not _static([_py_int(d) for d in shape]):
        return _expand_at_run_time(ctx, x, shape)
    shape = [int(d) for d in shape]
    rank = max(x.rank, len(shape))
    if x.rank < rank:
        x = ctx.mb.expand_dims(x=x, axes=list(range(rank - x.rank)))
    shape = [1] * (rank - len(shape)) + shape
    reps = []
    for d, s in zip(x.shape, shape):
        if not isinstance(d, (int, np.integer)) and s != 1:
            ctx.refuse(f"expanding the flexible dim of {list(x.shape)} to {s} is not lowered")
        reps.append(s if d == 1 else 1)
    if all(r == 1 for r in reps):
        return ctx.mb.identity(x=x, name=ctx.name())
    return ctx.mb.tile(x=x, reps=np.array(reps, np.int32), name=ctx.name())


def _expand_at_run_time(ctx: Ctx, x, shape):
    """Expand to a shape known at run time only (flexible sizes, or computed from data): x plus zeros of that
    shape, which broadcasts both ways as ONNX's Expand (booleans go through int32)."""
    if isinstance(shape, np.ndarray):
        shape = runtime_shape(ctx, np.array([_py_int(d) for d in shape], dtype=object))
    elif np_dtype(shape) != np.int32:
        shape = ctx.mb.cast(x=shape, dtype="int32")
    x = narrow(x) if isinstance(x, np.ndarray) else x
    boolean = np_dtype(x) == np.bool_
    x = (x.astype(np.int32) if isinstance(x, np.ndarray) else ctx.mb.cast(x=x, dtype="int32")) if boolean else x
    y = ctx.mb.add(x=x, y=ctx.mb.fill(shape=shape, value=np.zeros((), np_dtype(x))))
    return ctx.mb.cast(x=y, dtype="bool", name=ctx.name()) if boolean else ctx.mb.identity(x=y, name=ctx.name())


@op("ConstantOfShape")
def constant_of_shape(ctx: Ctx):
    """Reached only with flexible sizes in the shape (static ones are folded): a fill computed at run time."""
    from onnx import numpy_helper

    value = ctx.attr("value")
    value = np.zeros(1, np.float32) if value is None else narrow(numpy_helper.to_array(value))
    return ctx.mb.fill(shape=ctx.get(0), value=value.reshape(-1)[0], name=ctx.name())


@op("Range")
def range_(ctx: Ctx):
    """Reached only when a bound is known at run time only (e.g. a flexible sequence length)."""
    start, limit, delta = same_dtype(ctx, ctx.get(0), ctx.get(1), ctx.get(2))
    return ctx.mb.range_1d(start=start, end=limit, step=delta, name=ctx.name())


@op("Tile")
def tile(ctx: Ctx):
    return ctx.mb.tile(x=ctx.get(0), reps=narrow(ctx.const(1, "repeats")), name=ctx.name())


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


def _zero_state(ctx: Ctx, x, hidden: int):
    """Zeros [batch, hidden] for a recurrent op's x [seq, batch, input], also when batch is flexible."""
    batch = x.shape[1]
    if isinstance(batch, (int, np.integer)):
        return np.zeros((int(batch), hidden), np.float32)
    rows = ctx.mb.slice_by_index(x=ctx.mb.shape(x=x), begin=np.array([1], np.int32), end=np.array([2], np.int32))
    return ctx.mb.fill(shape=ctx.mb.concat(values=[rows, np.array([hidden], np.int32)], axis=0), value=0.0)


@op("GRU")
def gru(ctx: Ctx):
    """GRU unrolled over the (static) sequence, any direction, ``layout`` 0/1, ``clip``, any activations,
    ``sequence_lens``: ONNX gates [z, r, h]; ``linear_before_reset`` 0 applies the reset gate before the
    recurrent product, 1 after it (MIL's own gru matches neither when Rbh != 0)."""
    w, r, b = (narrow(v) if v is not None else v for v in (ctx.const(1, "W"), ctx.const(2, "R"), ctx.const(3, "B")))
    backwards = _directions(ctx)
    hidden = w.shape[1] // 3
    x, masks = _rnn_input(ctx)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh"], len(backwards))
    steps = x.shape[0]
    if not isinstance(steps, (int, np.integer)):
        ctx.refuse("a flexible sequence length cannot be unrolled")
    b = np.zeros((len(backwards), 6 * hidden), np.float32) if b is None else b
    ys, hs = [], []
    for d, backward in enumerate(backwards):
        y, h = _gru_direction(ctx, x, w[d], r[d], b[d], _rnn_state(ctx, 5, d, x, hidden), int(steps), backward,
                              acts[2 * d:2 * d + 2], masks)
        ys.append(y)
        hs.append(h)
    return _rnn_outputs(ctx, ys, hs)


def _gru_direction(ctx: Ctx, x, w, r, b, h, steps: int, backward: bool, acts: list, masks) -> tuple:
    """One direction: outputs [s, b, H] in time order (zeros past a row's sequence length) and the final
    state [b, H]."""
    mb, hidden = ctx.mb, w.shape[0] // 3
    _check_unroll(ctx, steps)
    f, g = acts
    wb, rb = b[:3 * hidden], b[3 * hidden:]
    # input products for every step at once; the z and r recurrent biases fold into them
    xw = mb.linear(x=x, weight=w, bias=wb + np.concatenate([rb[:2 * hidden], np.zeros(hidden, np.float32)]))
    r_zr, r_h, rb_h = r[:2 * hidden], r[2 * hidden:], rb[2 * hidden:]
    lbr = bool(ctx.attr("linear_before_reset", 0))
    outputs = [None] * steps
    for t in (reversed(range(steps)) if backward else range(steps)):
        xz, xr, xh = mb.split(x=_step(ctx, xw, t), num_splits=3, axis=-1)
        hz, hr = mb.split(x=mb.linear(x=h, weight=r_zr), num_splits=2, axis=-1)
        z = f(_clipped(ctx, mb.add(x=xz, y=hz)))
        reset = f(_clipped(ctx, mb.add(x=xr, y=hr)))
        if lbr:
            rec = mb.mul(x=reset, y=mb.linear(x=h, weight=r_h, bias=rb_h))
        else:
            rec = mb.linear(x=mb.mul(x=reset, y=h), weight=r_h, bias=rb_h)
        cand = g(_clipped(ctx, mb.add(x=xh, y=rec)))
        h_new = mb.add(x=cand, y=mb.mul(x=z, y=mb.sub(x=h, y=cand)))  # (1 - z) * cand + z * h
        mask = None if masks is None else masks[t]
        outputs[t] = h_new if mask is None else mb.select(cond=mask, a=h_new, b=np.float32(0))
        h = _masked(ctx, mask, h_new, h)
    return mb.stack(values=outputs, axis=0), h


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


@op("CumSum")
def cumsum(ctx: Ctx):
    """MIL's cumsum has ONNX's ``exclusive`` and ``reverse``; the axis must be a constant."""
    x, axis = ctx.get(0), ctx.const(1, "axis")
    if axis is None or axis.dtype == object:
        ctx.refuse("its axis must be a constant for Core ML")
    return ctx.mb.cumsum(x=x, axis=int(axis.reshape(-1)[0]) % len(x.shape), exclusive=bool(ctx.attr("exclusive", 0)),
                         reverse=bool(ctx.attr("reverse", 0)), name=ctx.name())


@op("GatherElements")
def gather_elements(ctx: Ctx):
    """MIL's gather_along_axis; it wants x's sizes off the axis, so x is cut to smaller static index sizes."""
    x = ctx.get(0)
    x = narrow(x) if isinstance(x, np.ndarray) else x
    axis = ctx.attr("axis", 0) % len(x.shape)
    indices = _nonnegative(ctx, x, ctx.get(1), axis)
    ends = [i if a != axis and _static([d, i]) and i < d else 0 for a, (d, i) in enumerate(zip(x.shape, indices.shape))]
    if any(ends):
        x = ctx.mb.slice_by_index(x=x, begin=np.zeros(len(ends), np.int32), end=np.array(ends, np.int32),
                                  end_mask=[e == 0 for e in ends])
    return ctx.mb.gather_along_axis(x=x, indices=indices, axis=axis, name=ctx.name())


@op("IsNaN")
def is_nan(ctx: Ctx):
    """NaN is the only value not equal to itself (MIL has no isnan)."""
    x = ctx.get(0)
    return ctx.mb.not_equal(x=x, y=x, name=ctx.name())


@op("Trilu")
def trilu(ctx: Ctx):
    """x where the last two axes' (row i, column j) keep j - i >= k (upper) or j - i <= k (lower), else 0:
    a constant mask for static sizes, else one from ``band_part`` over ones of x's run-time shape."""
    x, k = ctx.get(0), ctx.const(1, "k") if len(ctx.node.input) > 1 and ctx.node.input[1] else np.zeros(1)
    if k.dtype == object:
        ctx.refuse("its k must be a constant for Core ML")
    k, upper = int(np.clip(k.reshape(-1)[0], INT32.min + 1, INT32.max - 1)), bool(ctx.attr("upper", 1))
    zero = np.zeros((), np_dtype(x))
    rows, cols = x.shape[-2:]
    if _static([rows, cols]):
        fn = np.triu if upper else np.tril
        keep = fn(np.ones((int(rows), int(cols)), np.bool_), k)
        return ctx.mb.select(cond=keep, a=x, b=zero, name=ctx.name())
    # band_part(ones, lower, upper) keeps i - j <= lower and j - i <= upper (-1: no bound)
    if upper:
        band, kept = ((-k, -1), True) if k <= 0 else ((-1, k - 1), False)
    else:
        band, kept = ((-1, k), True) if k >= 0 else ((-k - 1, -1), False)
    last_two = ctx.mb.slice_by_index(x=ctx.mb.shape(x=x), begin=np.array([len(x.shape) - 2], np.int32),
                                     end=np.array([len(x.shape)], np.int32))
    ones = ctx.mb.fill(shape=last_two, value=np.float32(1))
    mask = ctx.mb.cast(x=ctx.mb.band_part(x=ones, lower=np.int32(band[0]), upper=np.int32(band[1])), dtype="bool")
    return ctx.mb.select(cond=mask, a=x, b=zero, name=ctx.name()) if kept else \
        ctx.mb.select(cond=mask, a=zero, b=x, name=ctx.name())


@op("Shape")
def shape_of_shape_value(ctx: Ctx):
    """Reached only for a folded shape value that holds flexible sizes, e.g. torch's Shape of a Reshape of a
    Shape chain (a var's Shape is folded, its flexible dims read back at run time by ``runtime_shape``): that
    value's own shape is static."""
    dims = np.array(ctx.const(0, "input").shape, np.int64)
    return dims[slice(ctx.attr("start", 0), ctx.attr("end", len(dims)))]
