"""ONNX nodes as MIL ops: one function per ONNX op in ``OPS``; ``lower`` builds the MIL program.

Values are MIL vars, or numpy arrays for constants (initializers, Constant nodes), which MIL takes
directly where it wants constants (conv weights, shapes, axes). Shapes must be static: the ONNX model is
shape-inferred first and any symbolic input dim is refused (flexible shapes are not built yet).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx

OPS: dict[str, Callable] = {}


def op(*names: str):
    def register(fn):
        for name in names:
            OPS[name] = fn
        return fn
    return register


class Ctx:
    """Values by ONNX name, the node being lowered, and the MIL builder."""

    def __init__(self, mb, opset: int):
        self.mb, self.opset, self.values = mb, opset, {}
        self.node: "onnx.NodeProto | None" = None

    def get(self, i: int):
        name = self.node.input[i] if i < len(self.node.input) else ""
        return self.values[name] if name else None

    def const(self, i: int, what: str) -> np.ndarray | None:
        value = self.get(i)
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
    x, y = _f32(ctx.get(0)), _f32(ctx.get(1))
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
    lead = int(np.prod(x.shape[:axis])) if axis else 1
    return ctx.mb.reshape(x=x, shape=np.array([lead, -1], np.int32), name=ctx.name())


@op("Reshape")
def reshape(ctx: Ctx):
    x, shape = ctx.get(0), ctx.const(1, "shape")
    if ctx.attr("allowzero", 0) and 0 in shape:
        ctx.refuse("allowzero=1 with a 0 in the shape has no Core ML equivalent")
    dims = [int(x.shape[i]) if d == 0 else int(d) for i, d in enumerate(shape)]  # ONNX 0: copy that dim
    return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())


@op("Transpose")
def transpose(ctx: Ctx):
    x = ctx.get(0)
    perm = ctx.attr("perm") or list(range(x.rank))[::-1]
    return ctx.mb.transpose(x=x, perm=perm, name=ctx.name())


@op("Concat")
def concat(ctx: Ctx):
    values = [_f32(ctx.get(i)) for i in range(len(ctx.node.input))]
    return ctx.mb.concat(values=values, axis=ctx.attr("axis"), name=ctx.name())


@op("Softmax", "LogSoftmax")
def softmax(ctx: Ctx):
    x = ctx.get(0)
    axis = ctx.attr("axis", -1 if ctx.opset >= 13 else 1) % x.rank
    log = ctx.node.op_type == "LogSoftmax"
    if ctx.opset < 13 and axis != x.rank - 1:  # before 13: over all axes from ``axis`` on, as one flat axis
        shape = np.array(x.shape, np.int32)
        flat = ctx.mb.reshape(x=x, shape=np.array([int(np.prod(x.shape[:axis])), -1], np.int32))
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
        return ctx.mb.upsample_bilinear(x=x, scale_factor_height=sh, scale_factor_width=sw,
                                        align_corners=coords == "align_corners",
                                        half_pixel_centers=coords in ("half_pixel", "pytorch_half_pixel"),
                                        name=ctx.name())
    if mode == "nearest":
        rounding = ctx.attr("nearest_mode", "round_prefer_floor")
        integer = sh.is_integer() and sw.is_integer()
        # with integer scales and asymmetric coordinates, floor and round_prefer_floor agree up to 2x
        if coords != "asymmetric" or not integer or (rounding != "floor" and max(sh, sw) > 2):
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


@op("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")
def reduce(ctx: Ctx):
    x = ctx.get(0)
    axes = _axes(ctx, 1, x.rank)
    if axes is None:
        if ctx.attr("noop_with_empty_axes", 0):
            return ctx.mb.identity(x=x, name=ctx.name())
        axes = list(range(x.rank))
    fn = getattr(ctx.mb, {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
                          "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}[ctx.node.op_type])
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
    x, indices = ctx.get(0), ctx.const(1, "indices")
    axis = ctx.attr("axis", 0) % x.rank
    # negative indices are out of bounds from iOS 17 on: make them non-negative here
    indices = np.where(indices < 0, indices + x.shape[axis], indices).astype(np.int32)
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
    begin, end, stride = [0] * x.rank, list(x.shape), [1] * x.rank
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = x.shape[a]
        if st < 0:
            ctx.refuse("negative slice steps are not lowered yet")
        # saturate: INT64_MAX means "to the end" and must not wrap when narrowed to int32
        begin[a], end[a], stride[a] = _clamp(s, n), _clamp(e, n), int(st)
    return ctx.mb.slice_by_index(x=x, begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                                 stride=np.array(stride, np.int32), name=ctx.name())


def _clamp(index: int, n: int) -> int:
    return int(min(max(index + n if index < 0 else index, 0), n))


@op("Pad")
def pad(ctx: Ctx):
    x = ctx.get(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.refuse(f"mode={mode} has no Core ML equivalent")
    pads = ctx.attr("pads") if ctx.opset < 11 else ctx.const(1, "pads").tolist()
    value = ctx.attr("value", 0.0) if ctx.opset < 11 else (ctx.const(2, "constant_value") if len(ctx.node.input) > 2
                                                            and ctx.node.input[2] else 0.0)
    if len(ctx.node.input) > 3 and ctx.node.input[3]:
        ctx.refuse("the axes input of Pad 18 is not lowered yet")
    if any(p < 0 for p in pads):
        ctx.refuse("negative pads (cropping) are not lowered yet")
    rank = x.rank
    mil = [int(v) for i in range(rank) for v in (pads[i], pads[i + rank])]
    return ctx.mb.pad(x=x, pad=np.array(mil, np.int32), mode="replicate" if mode == "edge" else mode,
                      constant_val=float(np.asarray(value).reshape(-1)[0]) if np.size(value) else 0.0,
                      name=ctx.name())


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
    """Forward direction, default activations, no peepholes or sequence lengths."""
    x = ctx.get(0)
    w, r, b = ctx.const(1, "W"), ctx.const(2, "R"), ctx.const(3, "B")
    direction = ctx.attr("direction", "forward")
    if direction != "forward":
        ctx.refuse(f"direction={direction} is not lowered yet")
    if ctx.get(4) is not None or ctx.get(7) is not None or ctx.attr("layout", 0) or ctx.attr("input_forget", 0):
        ctx.refuse("sequence_lens, peepholes, layout=1 and input_forget are not lowered")
    if ctx.attr("activations") not in (None, ["Sigmoid", "Tanh", "Tanh"]) or ctx.attr("clip") is not None:
        ctx.refuse("only the default activations without clipping are lowered")
    hidden = w.shape[1] // 4
    batch = x.shape[1]
    bias = np.zeros(4 * hidden, np.float32) if b is None else _ifoc(b[0, :4 * hidden]) + _ifoc(b[0, 4 * hidden:])
    h0, c0 = ctx.get(5), ctx.get(6)  # ONNX [1, b, H] -> MIL [b, H]
    h0 = np.zeros((batch, hidden), np.float32) if h0 is None else ctx.mb.squeeze(x=h0, axes=[0])
    c0 = np.zeros((batch, hidden), np.float32) if c0 is None else ctx.mb.squeeze(x=c0, axes=[0])
    y, h, c = ctx.mb.lstm(x=x, initial_h=h0, initial_c=c0, weight_ih=_ifoc(w[0]), weight_hh=_ifoc(r[0]), bias=bias,
                          direction="forward", output_sequence=True,
                          recurrent_activation="sigmoid", cell_activation="tanh", activation="tanh")
    outs = ctx.node.output
    ctx.values[outs[0]] = ctx.mb.expand_dims(x=y, axes=[1], name=ctx.name(0)) if outs[0] else None
    for i, state in ((1, h), (2, c)):
        if len(outs) > i and outs[i]:
            ctx.values[outs[i]] = ctx.mb.expand_dims(x=state, axes=[0], name=ctx.name(i))
    return ctx.values[outs[0]] if outs[0] else ctx.values[outs[1]]
