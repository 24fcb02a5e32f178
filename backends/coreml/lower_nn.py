"""Core ML lowerings: convolutions, pooling and normalization."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import Ctx, MAX_TAPS, _f32, _static, narrow, op


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


@op("LRN")
def lrn(ctx: Ctx):
    size = int(ctx.attr("size"))
    if size % 2 == 0:  # ONNX's window is lopsided for even sizes; MIL documents a symmetric one
        ctx.refuse(f"size={size}: only odd LRN windows have the same meaning in Core ML")
    return ctx.mb.local_response_norm(x=ctx.get(0), size=size, alpha=float(ctx.attr("alpha", 1e-4)),
                                      beta=float(ctx.attr("beta", 0.75)), k=float(ctx.attr("bias", 1.0)),
                                      name=ctx.name())


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
