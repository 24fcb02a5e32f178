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
        return np.clip(v, INT32.min, INT32.max).astype(np.int32)
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


@op("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Abs", "Neg", "Reciprocal", "Floor", "Ceil")
def unary(ctx: Ctx):
    mil = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp", "Log": "log",
           "Sqrt": "sqrt", "Abs": "abs", "Neg": None, "Reciprocal": "inverse", "Floor": "floor", "Ceil": "ceil"}
    x = ctx.get(0)
    if ctx.node.op_type == "Neg":
        return ctx.mb.mul(x=x, y=np.float32(-1), name=ctx.name())
    return getattr(ctx.mb, mil[ctx.node.op_type])(x=x, name=ctx.name())


@op("LeakyRelu")
def leaky_relu(ctx: Ctx):
    return ctx.mb.leaky_relu(x=ctx.get(0), alpha=float(ctx.attr("alpha", 0.01)), name=ctx.name())


@op("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")
def binary(ctx: Ctx):
    mil = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "real_div", "Pow": "pow", "Max": "maximum",
           "Min": "minimum"}[ctx.node.op_type]
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
    if ctx.node.op_type == "Div" and not _is_float(x):
        ctx.refuse("integer division truncates in ONNX and floors in MIL; only float division is lowered")
    return getattr(ctx.mb, mil)(x=x, y=y, name=ctx.name())


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
    if ceil and any(pads[2 * i] != pads[2 * i + 1] for i in range(spatial)):
        ctx.refuse("ceil_mode with asymmetric pads has no Core ML equivalent")
    if any(d != 1 for d in ctx.attr("dilations", [1] * spatial)):
        ctx.refuse("dilated pooling has no Core ML equivalent")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        ctx.refuse("the Indices output has no Core ML equivalent")
    common = dict(x=ctx.get(0), kernel_sizes=kernel, strides=ctx.attr("strides", [1] * spatial),
                  pad_type=_pad_type(ctx), pad=pads, ceil_mode=ceil, name=ctx.name())
    if ctx.node.op_type == "MaxPool":
        return ctx.mb.max_pool(**common)
    return ctx.mb.avg_pool(**common, exclude_padding_from_average=not ctx.attr("count_include_pad", 0))


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
    x = ctx.get(0)
    if ctx.node.op_type == "Upsample":
        scales = ctx.const(1, "scales")
        mode, coords = ctx.attr("mode", "nearest"), "asymmetric"
    else:
        scales, sizes = ctx.const(2, "scales"), ctx.const(3, "sizes")
        if (scales is None or scales.size == 0) and sizes is not None:
            scales = np.array(sizes, np.float64) / np.array(x.shape, np.float64)
        mode, coords = ctx.attr("mode", "nearest"), ctx.attr("coordinate_transformation_mode", "half_pixel")
    scales = [float(s) for s in scales]
    if x.rank != 4 or scales[:2] != [1.0, 1.0]:
        ctx.refuse("only the last two axes of a rank-4 tensor can be resized in Core ML")
    sh, sw = scales[2], scales[3]
    if mode == "linear":
        if coords not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
            ctx.refuse(f"coordinate_transformation_mode={coords} has no Core ML equivalent")
        # iOS 15's op has no half_pixel_centers: align_corners=False means half-pixel there
        if coords == "asymmetric":
            ctx.needs("iOS16", "linear resize with asymmetric coordinates")
        extra = {} if ctx.target == "iOS15" else {"half_pixel_centers": coords in ("half_pixel", "pytorch_half_pixel")}
        return ctx.mb.upsample_bilinear(x=x, scale_factor_height=sh, scale_factor_width=sw,
                                        align_corners=coords == "align_corners", name=ctx.name(), **extra)
    if mode == "nearest":
        rounding = ctx.attr("nearest_mode", "round_prefer_floor")
        integer = sh.is_integer() and sw.is_integer() and min(sh, sw) >= 1
        # integer upscales copy each pixel s times (MIL's op) when: asymmetric coordinates with floor (or a
        # rounding that agrees up to 2x); half-pixel ones with round_prefer_* (sources stay within +-0.5 - 0.5/s
        # of the pixel, so no tie is ever met)
        asymmetric = coords == "asymmetric" and (rounding == "floor" or max(sh, sw) <= 2)
        half = coords in ("half_pixel", "pytorch_half_pixel") and rounding in ("round_prefer_floor",
                                                                               "round_prefer_ceil")
        if not integer or not (asymmetric or half):
            ctx.refuse(f"nearest resize with {coords} coordinates, {rounding} rounding and scales {sh}, {sw} "
                       "has no Core ML equivalent (integer upscales with asymmetric coordinates only)")
        return ctx.mb.upsample_nearest_neighbor(x=x, scale_factor_height=sh, scale_factor_width=sw, name=ctx.name())
    ctx.refuse(f"mode={mode} has no Core ML equivalent")


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
    if low is not None:
        y = ctx.mb.maximum(x=y, y=np.float32(low))
    if high is not None:
        y = ctx.mb.minimum(x=y, y=np.float32(high))
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
    x, indices = ctx.get(0), ctx.get(1)
    axis = ctx.attr("axis", 0) % len(x.shape)
    n = x.shape[axis]
    # negative indices are out of bounds from iOS 17 on: make them non-negative here
    if isinstance(indices, np.ndarray):
        if not isinstance(n, (int, np.integer)) and (indices < 0).any():
            ctx.refuse(f"negative indices into the flexible dim {axis} are not lowered")
        indices = narrow(np.where(indices < 0, indices + (n if (indices < 0).any() else 0), indices))
    else:  # at run time: select(idx < 0, idx + n, idx)
        if np_dtype(indices) != np.int32:
            indices = ctx.mb.cast(x=indices, dtype="int32")
        size = np.int32(n) if isinstance(n, (int, np.integer)) else ctx.mb.gather(
            x=ctx.mb.shape(x=x), indices=np.int32(axis), axis=0)
        indices = ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)),
                                a=ctx.mb.add(x=indices, y=size), b=indices)
    if isinstance(x, np.ndarray):  # a constant table (embeddings) looked up at run time
        x = narrow(x)
    return ctx.mb.gather(x=x, indices=indices, axis=axis, name=ctx.name())


@op("Slice")
def slice_(ctx: Ctx):
    x = ctx.get(0)
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
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = x.shape[a]
        if st < 0:
            ctx.refuse("negative slice steps are not lowered yet")
        stride[a] = int(st)
        if isinstance(n, (int, np.integer)):
            # saturate: INT64_MAX means "to the end" and must not wrap when narrowed to int32
            begin[a], end[a], end_mask[a] = _clamp(s, n), _clamp(e, n), False
        elif s < 0 or e < 0 and e > -2 ** 31:
            ctx.refuse(f"negative starts/ends on the flexible dim {a} are not lowered")
        else:  # a flexible dim: begin as given, to the end when ``e`` is "to the end"
            begin[a] = int(s)
            if e < INT32.max:
                end[a], end_mask[a] = int(e), False
    return ctx.mb.slice_by_index(x=x, begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                                 stride=np.array(stride, np.int32), end_mask=end_mask, name=ctx.name())


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


@op("LSTM")
def lstm(ctx: Ctx):
    """Forward, reverse or bidirectional (one MIL lstm per direction, over the reversed sequence for the
    backward one), default activations, no peepholes or sequence lengths."""
    x = ctx.get(0)
    w, r, b = ctx.const(1, "W"), ctx.const(2, "R"), ctx.const(3, "B")
    backwards = _directions(ctx)
    if ctx.get(4) is not None or ctx.get(7) is not None or ctx.attr("layout", 0) or ctx.attr("input_forget", 0):
        ctx.refuse("sequence_lens, peepholes, layout=1 and input_forget are not lowered")
    if ctx.attr("activations") not in (None, ["Sigmoid", "Tanh", "Tanh"] * len(backwards)) or \
            ctx.attr("clip") is not None:
        ctx.refuse("only the default activations without clipping are lowered")
    hidden = w.shape[1] // 4
    mb, ys, hs, cs = ctx.mb, [], [], []
    for d, backward in enumerate(backwards):
        bias = np.zeros(4 * hidden, np.float32) if b is None else _ifoc(b[d, :4 * hidden]) + _ifoc(b[d, 4 * hidden:])
        y, h, c = mb.lstm(x=mb.reverse(x=x, axes=[0]) if backward else x, initial_h=_state(ctx, 5, d, x, hidden),
                          initial_c=_state(ctx, 6, d, x, hidden), weight_ih=_ifoc(w[d]), weight_hh=_ifoc(r[d]),
                          bias=bias, direction="forward", output_sequence=True,
                          recurrent_activation="sigmoid", cell_activation="tanh", activation="tanh")
        ys.append(mb.reverse(x=y, axes=[0]) if backward else y)
        hs.append(h)
        cs.append(c)
    return _rnn_outputs(ctx, ys, hs, cs)


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

    def stack(values, axis, i):
        if not outs[i]:
            return None
        if len(values) == 1:
            return ctx.mb.expand_dims(x=values[0], axes=[axis], name=ctx.name(i))
        return ctx.mb.stack(values=values, axis=axis, name=ctx.name(i))
    return (stack(ys, 1, 0), *(stack(f, 0, i + 1) for i, f in enumerate(finals)))[:len(ctx.node.output)]


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
    x, shape = ctx.get(0), [_py_int(d) for d in ctx.const(1, "shape")]
    if not _static(shape):  # flexible sizes: broadcast against zeros of that shape, computed at run time
        zeros = ctx.mb.fill(shape=runtime_shape(ctx, np.array(shape, dtype=object)), value=np.zeros((), np_dtype(x)))
        return ctx.mb.add(x=x, y=zeros, name=ctx.name())
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
    x, y = same_dtype(ctx, ctx.get(0), ctx.get(1))
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
    """GRU unrolled over the (static) sequence, any direction: ONNX gates [z, r, h]; ``linear_before_reset`` 0
    applies the reset gate before the recurrent product, 1 after it (MIL's own gru matches neither when
    Rbh != 0)."""
    x = ctx.get(0)
    w, r, b = (narrow(v) if v is not None else v for v in (ctx.const(1, "W"), ctx.const(2, "R"), ctx.const(3, "B")))
    backwards = _directions(ctx)
    if ctx.get(4) is not None or ctx.attr("layout", 0) or ctx.attr("clip") is not None or \
            ctx.attr("activations") not in (None, ["Sigmoid", "Tanh"] * len(backwards)):
        ctx.refuse("sequence_lens, layout=1, clip and non-default activations are not lowered")
    steps = x.shape[0]
    if not isinstance(steps, (int, np.integer)):
        ctx.refuse("a flexible sequence length cannot be unrolled")
    hidden = w.shape[1] // 3
    b = np.zeros((len(backwards), 6 * hidden), np.float32) if b is None else b
    ys, hs = [], []
    for d, backward in enumerate(backwards):
        y, h = _gru_direction(ctx, x, w[d], r[d], b[d], _state(ctx, 5, d, x, hidden), int(steps), backward)
        ys.append(y)
        hs.append(h)
    return _rnn_outputs(ctx, ys, hs)


def _gru_direction(ctx: Ctx, x, w, r, b, h, steps: int, backward: bool) -> tuple:
    """One direction: outputs [s, b, H] in time order and the final state [b, H]."""
    mb, hidden = ctx.mb, w.shape[0] // 3
    wb, rb = b[:3 * hidden], b[3 * hidden:]
    # input products for every step at once; the z and r recurrent biases fold into them
    xw = mb.linear(x=x, weight=w, bias=wb + np.concatenate([rb[:2 * hidden], np.zeros(hidden, np.float32)]))
    r_zr, r_h, rb_h = r[:2 * hidden], r[2 * hidden:], rb[2 * hidden:]
    lbr = bool(ctx.attr("linear_before_reset", 0))
    outputs = [None] * steps
    for t in (reversed(range(steps)) if backward else range(steps)):
        xt = mb.squeeze(x=mb.slice_by_index(x=xw, begin=np.array([t, 0, 0], np.int32),
                                            end=np.array([t + 1, 0, 0], np.int32),
                                            end_mask=[False, True, True]), axes=[0])
        xz, xr, xh = mb.split(x=xt, num_splits=3, axis=-1)
        hz, hr = mb.split(x=mb.linear(x=h, weight=r_zr), num_splits=2, axis=-1)
        z = mb.sigmoid(x=mb.add(x=xz, y=hz))
        reset = mb.sigmoid(x=mb.add(x=xr, y=hr))
        if lbr:
            rec = mb.mul(x=reset, y=mb.linear(x=h, weight=r_h, bias=rb_h))
        else:
            rec = mb.linear(x=mb.mul(x=reset, y=h), weight=r_h, bias=rb_h)
        cand = mb.tanh(x=mb.add(x=xh, y=rec))
        h = mb.add(x=cand, y=mb.mul(x=z, y=mb.sub(x=h, y=cand)))  # (1 - z) * cand + z * h
        outputs[t] = h
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
