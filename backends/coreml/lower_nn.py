"""Core ML lowerings: convolutions, pooling and normalization."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import INT32, Ctx, MAX_TAPS, _f32, _static, narrow, np_dtype, op, same_dtype


def _mil_pads(pads: list[int] | None, spatial: int) -> list[int]:
    """ONNX [x1_begin, x2_begin, ..., x1_end, x2_end] -> MIL [x1_begin, x1_end, x2_begin, x2_end]."""
    pads = pads or [0] * (2 * spatial)
    return [p for i in range(spatial) for p in (pads[i], pads[i + spatial])]


def _pad_type(ctx: Ctx) -> str:
    auto = ctx.attr("auto_pad", "NOTSET")
    return {"NOTSET": "custom", "VALID": "valid", "SAME_UPPER": "same", "SAME_LOWER": "same_lower"}[auto]


@op("Conv")
def conv(ctx: Ctx):
    """MIL's conv; also a run-time weight (MIL takes dilations only with a constant one: a run-time weight is
    dilated with zeros instead) and a run-time bias (added after)."""
    x, w, b = ctx.get(0), ctx.get(1), ctx.get(2)
    spatial = len(w.shape) - 2
    w, dilations = _param(ctx, x, w), ctx.attr("dilations", [1] * spatial)
    if not isinstance(w, np.ndarray) and any(d != 1 for d in dilations):
        w, dilations = _dilated(ctx, w, dilations), [1] * spatial
    y = ctx.mb.conv(x=x, weight=w, bias=_f32(b) if isinstance(b, np.ndarray) else None,
                    strides=ctx.attr("strides", [1] * spatial), pad_type=_pad_type(ctx),
                    pad=_mil_pads(ctx.attr("pads"), spatial), dilations=dilations, groups=ctx.attr("group", 1))
    return _add_bias(ctx, y, None if isinstance(b, np.ndarray) else b, spatial)


def _param(ctx: Ctx, x, value):
    """A weight or statistic in x's dtype: a narrowed constant, or a var cast when its dtype differs."""
    return same_dtype(ctx, x, value)[1] if value is not None else None


def _dilated(ctx: Ctx, w, dilations: list[int]):
    """A run-time weight with ``dilation - 1`` zeros between its taps (MIL's conv takes dilations only with a
    constant weight)."""
    if not _static(w.shape):
        ctx.refuse(f"a run-time weight of flexible shape {list(w.shape)} with dilations is not lowered")
    for i, d in enumerate(dilations):
        w = _spread(ctx, w, 2 + i, int(d)) if d > 1 else w
    return w


def _add_bias(ctx: Ctx, y, b, spatial: int):
    """y plus a per-channel bias (a constant or a var; None: y as it is), named as the node's output."""
    if b is None:
        return ctx.mb.identity(x=y, name=ctx.name())
    b = narrow(b).reshape(-1, *[1] * spatial) if isinstance(b, np.ndarray) else \
        ctx.mb.reshape(x=_param(ctx, y, b), shape=np.array([-1] + [1] * spatial, np.int32))
    return ctx.mb.add(x=y, y=b, name=ctx.name())


@op("BatchNormalization")
def batch_norm(ctx: Ctx):
    """MIL's batch_norm for constant statistics; else (x - mean) * rsqrt(var + eps) * scale + bias from
    elementwise ops. ``training_mode`` normalizes by the batch's statistics (population variance) and returns the
    running ones, ``input * momentum + batch * (1 - momentum)``."""
    x, eps = ctx.get(0), float(ctx.attr("epsilon", 1e-5))
    gamma, beta, mean, var = (ctx.get(i) for i in (1, 2, 3, 4))
    training = bool(ctx.attr("training_mode", 0))
    if not training and all(isinstance(v, np.ndarray) and v.dtype != object for v in (gamma, beta, mean, var)):
        return ctx.mb.batch_norm(x=x, mean=_f32(mean), variance=_f32(var), gamma=_f32(gamma), beta=_f32(beta),
                                 epsilon=eps, name=ctx.name())
    axes = [0, *range(2, x.rank)]
    if training:
        batch_mean = ctx.mb.reduce_mean(x=x, axes=axes, keep_dims=True)
        centred = ctx.mb.sub(x=x, y=batch_mean)
        batch_var = ctx.mb.reduce_mean(x=ctx.mb.mul(x=centred, y=centred), axes=axes, keep_dims=True)
    else:
        centred, batch_var = ctx.mb.sub(x=x, y=_channel(ctx, x, mean)), _channel(ctx, x, var)
    y = ctx.mb.mul(x=centred, y=ctx.mb.rsqrt(x=batch_var, epsilon=np.float32(eps).astype(np_dtype(x))))
    y = ctx.mb.add(x=ctx.mb.mul(x=y, y=_channel(ctx, x, gamma)), y=_channel(ctx, x, beta), name=ctx.name())
    if not training:
        return y
    momentum = np.float32(ctx.attr("momentum", 0.9)).astype(np_dtype(x))
    running = []
    for i, (given, batch) in enumerate(((mean, batch_mean), (var, batch_var)), start=1):
        if i < len(ctx.node.output) and ctx.node.output[i]:
            batch = ctx.mb.reshape(x=batch, shape=np.array([-1], np.int32))
            given = ctx.mb.mul(x=_param(ctx, x, given), y=momentum)
            running.append(ctx.mb.add(x=given, y=ctx.mb.mul(x=batch, y=1 - momentum), name=ctx.name(i)))
        else:
            running.append(None)
    return (y, *running)


def _channel(ctx: Ctx, x, v):
    """A per-channel parameter (a constant or a var) in x's dtype, shaped [C, 1, ...] to broadcast over x."""
    shape = np.array([-1] + [1] * (x.rank - 2), np.int32)
    v = _param(ctx, x, v)
    return v.reshape(shape) if isinstance(v, np.ndarray) else ctx.mb.reshape(x=v, shape=shape)


@op("MaxPool", "AveragePool")
def pool(ctx: Ctx):
    """MIL's pools where they mean what ONNX's do; by taps (one slice per kernel tap) for dilations and MaxPool's
    Indices, and ceil_mode as explicit end pads (MIL's ceil_mode drops a last window in the end padding only when
    a dim is padded, onnxruntime always). Integer inputs (int8/uint8 MaxPool) go through fp32, which holds them
    exactly."""
    kernel = ctx.attr("kernel_shape")
    spatial = len(kernel)
    indices = len(ctx.node.output) > 1 and bool(ctx.node.output[1])
    x = ctx.get(0)
    integer = np_dtype(x).kind in "iu"
    if integer:
        x = ctx.mb.cast(x=x, dtype="fp32")
    average, include = ctx.node.op_type == "AveragePool", bool(ctx.attr("count_include_pad", 0))
    dilated = any(d != 1 for d in ctx.attr("dilations", [1] * spatial))
    ceil = bool(ctx.attr("ceil_mode", 0)) and ctx.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")  # SAME: no say
    static = _static(x.shape[-spatial:])
    if indices:
        y, where = _pool_by_taps(ctx, x, kernel, average, indices=True)
        y = ctx.mb.cast(x=y, dtype="int32", name=ctx.name()) if integer else ctx.mb.identity(x=y, name=ctx.name())
        return y, ctx.mb.identity(x=where, name=ctx.name(1))
    if dilated or ceil and static and average and include:
        y = _pool_by_taps(ctx, x, kernel, average)
    else:
        pads = _mil_pads(ctx.attr("pads"), spatial)
        if ceil and static:  # the windows onnxruntime counts, as floor-mode windows over explicit end pads
            _, _, begin, _, extra, _ = _windows(ctx, x, kernel)
            pads = [v for b, e in zip(begin, extra) for v in (b, e)]
        elif ceil and not _ceil_agrees(ctx, kernel, pads):
            ctx.refuse("ceil_mode over flexible dims with stride > kernel and no pads: Core ML and onnxruntime "
                       "differ on whether a last window that starts past the input counts")
        common = dict(x=x, kernel_sizes=kernel, strides=ctx.attr("strides", [1] * spatial),
                      pad_type="custom" if ceil and static else _pad_type(ctx), pad=pads,
                      ceil_mode=ceil and not static)
        y = ctx.mb.avg_pool(**common, exclude_padding_from_average=not include) if average else \
            ctx.mb.max_pool(**common)
    return ctx.mb.cast(x=y, dtype="int32", name=ctx.name()) if integer else ctx.mb.identity(x=y, name=ctx.name())


def _ceil_agrees(ctx: Ctx, kernel: list[int], pads: list[int]) -> bool:
    """Whether MIL's ceil_mode keeps the windows onnxruntime's does for any size: they differ only on an unpadded
    dim whose stride exceeds the kernel."""
    strides = ctx.attr("strides", [1] * len(kernel))
    return not any(s > k and pads[2 * i] == pads[2 * i + 1] == 0 for i, (k, s) in enumerate(zip(kernel, strides)))


def _windows(ctx: Ctx, x, kernel: list[int]) -> tuple[list[int], ...]:
    """Per spatial dim, onnxruntime's pooling windows over static dims: strides, dilations, begin pads, output
    sizes, end pads that the last window reaches into, and the explicit end pads (ceil_mode: a last window must
    start inside the input or its begin padding)."""
    spatial = len(kernel)
    strides, dilations = ctx.attr("strides", [1] * spatial), ctx.attr("dilations", [1] * spatial)
    pads, auto = list(ctx.attr("pads") or [0] * (2 * spatial)), ctx.attr("auto_pad", "NOTSET")
    same = auto in ("SAME_UPPER", "SAME_LOWER")
    if same and any(d != 1 for d in dilations):  # the spec's ceil(n / s) outputs; onnxruntime's are fewer
        ctx.refuse(f"auto_pad={auto} with dilations: onnxruntime and the ONNX spec disagree on the output "
                   "size; give explicit pads")
    begin, out, extra, end = [], [], [], []
    for i, (n, k, s, d) in enumerate(zip(x.shape[-spatial:], kernel, strides, dilations)):
        span = (k - 1) * d + 1
        pb, pe = (0, 0) if auto == "VALID" else (pads[i], pads[i + spatial])
        if same:  # ceil(n / s) outputs, the odd padding row at the end (SAME_UPPER) or the start
            total = max((-(-n // s) - 1) * s + span - n, 0)
            pb = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pe = total - pb
        size = (n + pb + pe - span) / s
        o = int(np.ceil(size) if ctx.attr("ceil_mode", 0) else np.floor(size)) + 1
        if (o - 1) * s >= n + pb:
            o -= 1
        begin.append(pb)
        out.append(o)
        extra.append(max((o - 1) * s + span - n - pb, 0))
        end.append(pe)
    return strides, dilations, begin, out, extra, end


def _pool_by_taps(ctx: Ctx, x, kernel: list[int], average: bool, indices: bool = False):
    """x padded (-inf for max, 0 for average), one strided slice per kernel tap, and their maximum or sum; an
    average divides by onnxruntime's per-window counts (real elements, or with count_include_pad also the explicit
    pads), a constant as the dims are static. ``indices``: also MaxPool's flat argmax positions (the first
    largest tap, as onnxruntime), returned with y."""
    spatial = len(kernel)
    if int(np.prod(kernel)) > MAX_TAPS:
        ctx.refuse(f"pooling by taps (dilations or ceil_mode) with kernel {kernel} takes over {MAX_TAPS} slices")
    if not _static(x.shape[-spatial:]):
        ctx.refuse(f"pooling by taps (dilations or ceil_mode) over the flexible dims of {list(x.shape)} is not "
                   "lowered")
    strides, dilations, begin, out, extra, end = _windows(ctx, x, kernel)
    rank = x.rank
    padded = ctx.mb.pad(x=x, pad=np.array([v for b, e in zip(begin, extra) for v in (b, e)], np.int32),
                        mode="constant", constant_val=0.0 if average else float("-inf"))
    y, where = None, None
    for tap in np.ndindex(*kernel):
        start = [0] * (rank - spatial) + [t * d for t, d in zip(tap, dilations)]
        stop = [0] * (rank - spatial) + [t * d + (o - 1) * s + 1 for t, d, o, s in zip(tap, dilations, out, strides)]
        part = ctx.mb.slice_by_index(x=padded, begin=np.array(start, np.int32), end=np.array(stop, np.int32),
                                     stride=np.array([1] * (rank - spatial) + list(strides), np.int32),
                                     end_mask=[True] * (rank - spatial) + [False] * spatial)
        if indices:
            position = _tap_positions(ctx, x, tap, strides, dilations, begin, out)
            larger = None if y is None else ctx.mb.greater(x=part, y=y)
            where = position if y is None else ctx.mb.select(cond=larger, a=position, b=where)
            y = part if y is None else ctx.mb.select(cond=larger, a=part, b=y)
            continue
        y = part if y is None else (ctx.mb.add if average else ctx.mb.maximum)(x=y, y=part)
    if indices:
        return y, ctx.mb.add(x=where, y=_channel_offsets(ctx, x, spatial))
    if not average:
        return y
    include = bool(ctx.attr("count_include_pad", 0))
    counts = np.ones((), np.float64)
    for n, k, s, d, pb, o, pe in zip(x.shape[-spatial:], kernel, strides, dilations, begin, out, end):
        positions = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d  # padded coordinates of each tap
        counted = (positions < pb + n + pe) if include else (positions >= pb) & (positions < pb + n)
        counts = np.multiply.outer(counts, counted.sum(axis=1))
    return ctx.mb.real_div(x=y, y=counts.astype(np_dtype(y)))


def _tap_positions(ctx: Ctx, x, tap: tuple, strides, dilations, begin, out) -> np.ndarray:
    """Flat positions within one (n, c) plane of x that a kernel tap reads for each output, row-major
    (``storage_order`` 0) or column-major (1): int32 [*out]."""
    dims = [int(n) for n in x.shape[2:]]
    coords = np.meshgrid(*[np.arange(o) * s + t * d - b for o, s, t, d, b in zip(out, strides, tap, dilations, begin)],
                         indexing="ij")
    order = range(len(dims)) if ctx.attr("storage_order", 0) else reversed(range(len(dims)))
    flat, step = np.zeros(out, np.int64), 1
    for i in order:
        flat += coords[i] * step
        step *= dims[i]
    return flat.astype(np.int32)


def _channel_offsets(ctx: Ctx, x, spatial: int) -> np.ndarray:
    """The flat position where each (n, c) plane of the static x starts: int32 [N, C, 1, ...]."""
    if not _static(x.shape) or int(np.prod(x.shape)) > INT32.max:
        ctx.refuse(f"the Indices output of x of shape {list(x.shape)} needs static sizes within int32")
    n, c = (int(d) for d in x.shape[:2])
    plane = int(np.prod(x.shape[2:]))
    return (np.arange(n * c, dtype=np.int64) * plane).astype(np.int32).reshape(n, c, *[1] * spatial)


@op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: Ctx):
    x = ctx.get(0)
    axes = list(range(2, x.rank))
    fn = ctx.mb.reduce_mean if ctx.node.op_type == "GlobalAveragePool" else ctx.mb.reduce_max
    return fn(x=x, axes=axes, keep_dims=True, name=ctx.name())


@op("LayerNormalization")
def layer_norm(ctx: Ctx):
    """MIL's layer_norm over ``axis`` and after, with constant scale/bias folded in, run-time ones multiplied and
    added after; the optional Mean and InvStdDev outputs (kept dims) computed as reductions. ``stash_type`` 1
    (fp32) computes fp16 inputs in fp32."""
    x, gamma, beta = ctx.get(0), ctx.get(1), ctx.get(2)
    axis, eps = ctx.attr("axis", -1) % x.rank, float(ctx.attr("epsilon", 1e-5))
    axes, shape = list(range(axis, x.rank)), tuple(x.shape[axis:])
    stash = np_dtype(x) == np.float16 and ctx.attr("stash_type", 1) == 1
    if stash:
        x = ctx.mb.cast(x=x, dtype="fp32")
    folded = all(v is None or isinstance(v, np.ndarray) and v.dtype != object for v in (gamma, beta))
    if folded:
        gamma = np.broadcast_to(_f32(gamma), shape).astype(np_dtype(x))
        beta = None if beta is None else np.broadcast_to(_f32(beta), shape).astype(np_dtype(x))
    y = ctx.mb.layer_norm(x=x, axes=axes, gamma=gamma if folded else None, beta=beta if folded else None,
                          epsilon=np.float32(eps).astype(np_dtype(x)))
    if not folded:
        y = ctx.mb.mul(x=y, y=same_dtype(ctx, y, gamma)[1])
        y = y if beta is None else ctx.mb.add(x=y, y=same_dtype(ctx, y, beta)[1])
    y = ctx.mb.cast(x=y, dtype="fp16", name=ctx.name()) if stash else ctx.mb.identity(x=y, name=ctx.name())
    wanted = [i < len(ctx.node.output) and bool(ctx.node.output[i]) for i in (1, 2)]
    if not any(wanted):
        return y
    mean = ctx.mb.reduce_mean(x=x, axes=axes, keep_dims=True)
    centred = ctx.mb.sub(x=x, y=mean)
    var = ctx.mb.reduce_mean(x=ctx.mb.mul(x=centred, y=centred), axes=axes, keep_dims=True)
    inv = ctx.mb.rsqrt(x=var, epsilon=np.float32(eps).astype(np_dtype(x)))
    return (y, ctx.mb.identity(x=mean, name=ctx.name(1)) if wanted[0] else None,
            ctx.mb.identity(x=inv, name=ctx.name(2)) if wanted[1] else None)


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
    left over is zero-padded); the bias is added last so it reaches those rows too. A run-time weight (MIL's
    conv_transpose wants a constant) goes through ``_transposed_by_conv``."""
    x, w, b = ctx.get(0), ctx.get(1), ctx.get(2)
    spatial = len(w.shape) - 2
    pads, extra = _transpose_pads(ctx, x, w)
    if not isinstance(w, np.ndarray):
        return _add_bias(ctx, _transposed_by_conv(ctx, x, w, pads, extra), b, spatial)
    ends = [pads[spatial + i] - extra[i] for i in range(spatial)]
    mil_pad = [p for i in range(spatial) for p in (pads[i], max(ends[i], 0))]
    y = ctx.mb.conv_transpose(x=x, weight=narrow(w), pad_type="custom", pad=np.array(mil_pad, np.int32),
                              strides=np.array(ctx.attr("strides", [1] * spatial), np.int32),
                              dilations=np.array(ctx.attr("dilations", [1] * spatial), np.int32),
                              groups=np.int32(ctx.attr("group", 1)))
    if any(e < 0 for e in ends):
        y = ctx.mb.pad(x=y, pad=np.array([p for e in ends for p in (0, max(-e, 0))], np.int32), mode="constant",
                       constant_val=0.0)
    return _add_bias(ctx, y, b, spatial)


def _transpose_pads(ctx: Ctx, x, w) -> tuple[list[int], list[int]]:
    """ConvTranspose's explicit pads and output_padding; from ``output_shape`` or auto_pad SAME (output =
    input * stride) the total padding is split as onnxruntime does (SAME_UPPER: the smaller half first; a
    negative total: zeros at the end)."""
    spatial = len(w.shape) - 2
    auto, shape = ctx.attr("auto_pad", "NOTSET"), ctx.attr("output_shape")
    extra = list(ctx.attr("output_padding") or [0] * spatial)
    if auto == "VALID" and shape is None:
        return [0] * (2 * spatial), extra
    if auto == "NOTSET" and shape is None:
        return list(ctx.attr("pads") or [0] * (2 * spatial)), extra
    dims = list(x.shape[2:])
    if not _static(dims + list(w.shape[2:])):
        ctx.refuse(f"output_shape or auto_pad={auto} over flexible dims {list(x.shape)} is not lowered")
    strides, dilations = ctx.attr("strides", [1] * spatial), ctx.attr("dilations", [1] * spatial)
    wanted = list(shape)[-spatial:] if shape is not None else [int(n) * s for n, s in zip(dims, strides)]
    begin, end = [], []
    for n, k, s, d, e, o in zip(dims, w.shape[2:], strides, dilations, extra, wanted):
        total = s * (int(n) - 1) + e + (int(k) - 1) * d + 1 - int(o)
        small = max(total, 0) // 2  # a larger output_shape: zeros at the end (a negative end pad)
        begin.append(small if auto == "SAME_UPPER" else max(total, 0) - small)
        end.append(total - begin[-1])
    return begin + end, extra


def _transposed_by_conv(ctx: Ctx, x, w, pads: list[int], extra: list[int]):
    """ConvTranspose with a run-time weight as a conv: x with stride - 1 zeros between its elements, padded by
    kernel - 1 - pads (output_padding more at the end), convolved with the weight flipped spatially and its
    in/out channels swapped per group."""
    spatial = len(w.shape) - 2
    strides, group = ctx.attr("strides", [1] * spatial), int(ctx.attr("group", 1))
    dilations = ctx.attr("dilations", [1] * spatial)
    if not _static(list(x.shape[2:]) + list(w.shape)):
        ctx.refuse(f"a run-time weight over flexible sizes ({list(x.shape)}, {list(w.shape)}) is not lowered")
    kernel, (cin, cout) = [int(k) for k in w.shape[2:]], (int(w.shape[0]), int(w.shape[1]) * group)
    conv_pad = []
    for i, (k, d) in enumerate(zip(kernel, dilations)):
        conv_pad += [(k - 1) * d - pads[i], (k - 1) * d - pads[spatial + i] + extra[i]]
    if any(p < 0 for p in conv_pad):
        ctx.refuse(f"pads {pads} reach past the kernel {kernel}; not lowered with a run-time weight")
    for i, s in enumerate(strides):
        x = _spread(ctx, x, 2 + i, int(s)) if s > 1 else x
    w = ctx.mb.reverse(x=_param(ctx, x, w), axes=list(range(2, 2 + spatial)))
    w = ctx.mb.reshape(x=w, shape=np.array([group, cin // group, cout // group, *kernel], np.int32))
    w = ctx.mb.transpose(x=w, perm=[0, 2, 1, *range(3, 3 + spatial)])
    w = ctx.mb.reshape(x=w, shape=np.array([cout, cin // group, *kernel], np.int32))
    return ctx.mb.conv(x=x, weight=_dilated(ctx, w, dilations), pad_type="custom", pad=conv_pad, groups=group)


def _spread(ctx: Ctx, x, axis: int, stride: int):
    """x with ``stride - 1`` zeros between neighbours along ``axis``: a new axis after it padded to ``stride``,
    merged into it, the trailing zeros cut. Only the batch dim (the first) may be flexible."""
    n = int(x.shape[axis])
    shape = [d if isinstance(d, (int, np.integer)) else -1 for d in x.shape]
    y = ctx.mb.expand_dims(x=x, axes=[axis + 1])
    pad = [0] * (2 * (x.rank + 1))
    pad[2 * (axis + 1) + 1] = stride - 1
    y = ctx.mb.pad(x=y, pad=np.array(pad, np.int32), mode="constant", constant_val=np_dtype(x).type(0))
    y = ctx.mb.reshape(x=y, shape=np.array(shape[:axis] + [n * stride] + shape[axis + 1:], np.int32))
    end = np.zeros(x.rank, np.int32)
    end[axis] = (n - 1) * stride + 1
    return ctx.mb.slice_by_index(x=y, begin=np.zeros(x.rank, np.int32), end=end,
                                 end_mask=[a != axis for a in range(x.rank)])


@op("InstanceNormalization")
def instance_norm(ctx: Ctx):
    """MIL's instance_norm for ranks 3 and 4 with constant scale and bias; else (x - mean) / sqrt(var + eps) *
    scale + bias from reductions over the spatial axes."""
    x, gamma, beta = ctx.get(0), ctx.get(1), ctx.get(2)
    eps = np.float32(ctx.attr("epsilon", 1e-5)).astype(np_dtype(x))
    if x.rank in (3, 4) and all(isinstance(v, np.ndarray) and v.dtype != object for v in (gamma, beta)):
        return ctx.mb.instance_norm(x=x, gamma=_param(ctx, x, gamma), beta=_param(ctx, x, beta), epsilon=eps,
                                    name=ctx.name())
    axes = list(range(2, x.rank))
    centred = ctx.mb.sub(x=x, y=ctx.mb.reduce_mean(x=x, axes=axes, keep_dims=True))
    var = ctx.mb.reduce_mean(x=ctx.mb.mul(x=centred, y=centred), axes=axes, keep_dims=True)
    y = ctx.mb.mul(x=centred, y=ctx.mb.rsqrt(x=var, epsilon=eps))
    return ctx.mb.add(x=ctx.mb.mul(x=y, y=_channel(ctx, x, gamma)), y=_channel(ctx, x, beta), name=ctx.name())
