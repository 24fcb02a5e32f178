"""Core ML lowerings: sampling, rearranging and scattering ops (GridSample, AffineGrid, DeformConv, DepthToSpace,
SpaceToDepth, LpPool, CenterCropPad, Col2Im, Scatter*, ReverseSequence, MaxUnpool, OneHot, EyeLike)."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import (
    MAX_TABLE, Ctx, _static, float_moved, moved, narrow, np_dtype, op, same_dtype,
)
from onnxbridge.backends.coreml.lower_nn import _mil_pads, _pad_type
from onnxbridge.backends.coreml.lower_shape import _nonnegative

# ONNX reduction -> MIL scatter mode
SCATTER_MODES = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}
# GridSample's modes (opset 16 names and opset 20 names) -> MIL resample's sampling_mode
SAMPLING = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest"}
# EyeLike's dtype -> the MIL dtype that holds it
EYE_DTYPES = {"FLOAT": np.float32, "DOUBLE": np.float32, "FLOAT16": np.float16, "INT32": np.int32,
              "INT64": np.int32, "BOOL": np.bool_}


def _float_input(ctx: Ctx, x, what: str):
    """``x`` (a constant narrowed) when it holds floats, else refused: the MIL op has no integer form."""
    if np_dtype(x).kind != "f":
        ctx.refuse(f"{what} takes float tensors only in Core ML, not {np_dtype(x)}")
    return narrow(x) if isinstance(x, np.ndarray) else x


def _sizes(ctx: Ctx, sizes: list[int], what: str) -> list[int]:
    """``sizes`` (from a model's attributes or constants), refused unless positive and, multiplied, at most
    MAX_TABLE (a constant built from them must stay small)."""
    if any(n < 1 for n in sizes) or float(np.prod(sizes, dtype=np.float64)) > MAX_TABLE:
        ctx.refuse(f"{what} {sizes}: sizes must be positive and their product at most {MAX_TABLE}")
    return sizes


def _int32(ctx: Ctx, v):
    """Indices or lengths as int32: a constant narrowed, a var cast when it is not int32 already."""
    if isinstance(v, np.ndarray):
        return narrow(np.asarray(v, np.int64))
    return v if np_dtype(v) == np.int32 else ctx.mb.cast(x=v, dtype="int32")


@op("GridSample")
def grid_sample(ctx: Ctx):
    """MIL's resample: bilinear or nearest, zeros/border/reflection padding, 2-D (rank 4) only. ONNX's
    reflection about the edge pixels' centres (align_corners=1) is Core ML's reflection, about the image's edges
    (align_corners=0) its symmetric, as coremltools maps PyTorch's grid_sample."""
    x, grid = ctx.get(0), ctx.get(1)
    mode, padding = ctx.attr("mode", "bilinear"), ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if len(x.shape) != 4:
        ctx.refuse(f"{len(x.shape) - 2}-D sampling: Core ML's resample samples 2-D images (rank 4) only")
    if mode not in SAMPLING:
        ctx.refuse(f"mode={mode}: Core ML's resample has bilinear and nearest sampling only")
    if padding not in ("zeros", "border", "reflection"):
        ctx.refuse(f"padding_mode={padding} is not lowered")
    mil_padding = {"zeros": "constant", "border": "border"}.get(padding, "reflection" if align else "symmetric")
    x = _float_input(ctx, x, "GridSample")
    grid = narrow(grid) if isinstance(grid, np.ndarray) else grid
    return ctx.mb.resample(x=x, coordinates=grid, sampling_mode=SAMPLING[mode], padding_mode=mil_padding,
                           padding_value=0.0, coordinates_mode="normalized_minus_one_to_one", align_corners=align,
                           name=ctx.name())


@op("AffineGrid")
def affine_grid(ctx: Ctx):
    """theta [N, k, k + 1] applied to the constant homogeneous grid of the output's pixel centres (x first, in
    [-1, 1]) by one matmul; ``size`` must be a constant (it sets the output's size)."""
    theta, size = ctx.get(0), ctx.const(1, "size")
    if size.dtype == object:
        ctx.refuse("its size must be a constant for Core ML (it sets the output's size)")
    dims = _sizes(ctx, [int(d) for d in size.reshape(-1).tolist()[2:]], "output size")
    align = bool(ctx.attr("align_corners", 0))
    axes = [np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1 for n in dims]
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([*mesh[::-1], np.ones(dims)], axis=-1).reshape(-1, len(dims) + 1).astype(np.float32)
    grid = ctx.mb.matmul(x=base, y=_float_input(ctx, theta, "AffineGrid"), transpose_y=True)
    return ctx.mb.reshape(x=grid, shape=np.array([-1, *dims, len(dims)], np.int32), name=ctx.name())


@op("DeformConv")
def deform_conv(ctx: Ctx):
    """2-D deformable convolution: for each offset group, x sampled bilinearly (zeros outside, as ONNX's) at every
    kernel tap's shifted positions by one resample over all taps stacked along the height, scaled by the mask, then
    contracted with the weights by a matmul per group (weights, offsets, mask and bias may be run-time values)."""
    x, weight, offset = _float_input(ctx, ctx.get(0), "DeformConv"), ctx.get(1), ctx.get(2)
    bias, mask = (ctx.get(i) if len(ctx.node.input) > i and ctx.node.input[i] else None for i in (3, 4))
    if len(x.shape) != 4 or not _static(x.shape[1:]) or not _static(weight.shape):
        ctx.refuse(f"only 2-D deformable convolutions of static channels and sizes are lowered, not {list(x.shape)}")
    (n_out, c_in, kh, kw), channels = (int(d) for d in weight.shape), int(x.shape[1])
    groups, offset_groups = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    if channels % offset_groups or channels != c_in * groups or n_out % groups:
        ctx.refuse(f"{channels} channels do not split into {groups} groups of weights {list(weight.shape)} and "
                   f"{offset_groups} offset groups")
    taps, out = kh * kw, _deform_out_size(ctx, [int(d) for d in x.shape[2:]], [kh, kw])
    columns = []
    for g in range(offset_groups):
        part = channels // offset_groups
        image = ctx.mb.slice_by_index(x=x, begin=np.array([0, g * part, 0, 0], np.int32),
                                      end=np.array([0, (g + 1) * part, 0, 0], np.int32),
                                      end_mask=[True, False, True, True])
        sampled = ctx.mb.resample(x=image, coordinates=_deform_coordinates(ctx, offset, g, taps, [kh, kw], out),
                                  sampling_mode="bilinear", padding_mode="constant", padding_value=0.0,
                                  coordinates_mode="unnormalized", align_corners=False)
        sampled = ctx.mb.reshape(x=sampled, shape=np.array([-1, part, taps, *out], np.int32))
        if mask is not None:
            scale = ctx.mb.slice_by_index(x=mask, begin=np.array([0, g * taps, 0, 0], np.int32),
                                          end=np.array([0, (g + 1) * taps, 0, 0], np.int32),
                                          end_mask=[True, False, True, True])
            sampled = ctx.mb.mul(x=sampled, y=ctx.mb.expand_dims(x=scale, axes=[1]))
        columns.append(sampled)
    stacked = ctx.mb.concat(values=columns, axis=1) if offset_groups > 1 else columns[0]
    stacked = ctx.mb.reshape(x=stacked, shape=np.array([-1, channels * taps, out[0] * out[1]], np.int32))
    kernels = ctx.mb.reshape(x=narrow(weight) if isinstance(weight, np.ndarray) else weight,
                             shape=np.array([n_out, c_in * taps], np.int32))
    per_out, per_in = n_out // groups, c_in * taps
    y = ctx.mb.concat(values=[ctx.mb.matmul(
        x=ctx.mb.slice_by_index(x=kernels, begin=np.array([i * per_out, 0], np.int32),
                                end=np.array([(i + 1) * per_out, per_in], np.int32)),
        y=ctx.mb.slice_by_index(x=stacked, begin=np.array([0, i * per_in, 0], np.int32),
                                end=np.array([0, (i + 1) * per_in, 0], np.int32), end_mask=[True, False, True]))
        for i in range(groups)], axis=1) if groups > 1 else ctx.mb.matmul(x=kernels, y=stacked)
    y = ctx.mb.reshape(x=y, shape=np.array([-1, n_out, *out], np.int32))
    if bias is not None:
        y = ctx.mb.add(x=y, y=ctx.mb.reshape(x=narrow(bias) if isinstance(bias, np.ndarray) else bias,
                                             shape=np.array([n_out, 1, 1], np.int32)))
    return ctx.mb.identity(x=y, name=ctx.name())


def _deform_out_size(ctx: Ctx, dims: list[int], kernel: list[int]) -> list[int]:
    strides, dilations = ctx.attr("strides", [1, 1]), ctx.attr("dilations", [1, 1])
    pads = list(ctx.attr("pads") or [0] * 4)
    return _sizes(ctx, [(n + pads[i] + pads[i + 2] - (k - 1) * d - 1) // s + 1
                        for i, (n, k, s, d) in enumerate(zip(dims, kernel, strides, dilations))], "output size")


def _deform_coordinates(ctx: Ctx, offset, group: int, taps: int, kernel: list[int], out: list[int]):
    """[N, taps * oH, oW, (x, y)] pixel positions of offset group ``group``'s taps: each tap's place on the
    strided, padded, dilated grid plus its (dy, dx) offsets."""
    strides, dilations = ctx.attr("strides", [1, 1]), ctx.attr("dilations", [1, 1])
    pads = list(ctx.attr("pads") or [0] * 4)
    rows = np.arange(out[0]) * strides[0] - pads[0]
    cols = np.arange(out[1]) * strides[1] - pads[1]
    base = np.zeros([taps, *out, 2], np.float32)
    for t, (i, j) in enumerate(np.ndindex(*kernel)):
        base[t, ..., 0] = (cols + j * dilations[1])[None, :]
        base[t, ..., 1] = (rows + i * dilations[0])[:, None]
    shifts = ctx.mb.slice_by_index(x=offset, begin=np.array([0, 2 * group * taps, 0, 0], np.int32),
                                   end=np.array([0, 2 * (group + 1) * taps, 0, 0], np.int32),
                                   end_mask=[True, False, True, True])
    shifts = ctx.mb.reshape(x=shifts, shape=np.array([-1, taps, 2, *out], np.int32))  # (dy, dx) per tap
    shifts = ctx.mb.reverse(x=ctx.mb.transpose(x=shifts, perm=[0, 1, 3, 4, 2]), axes=[-1])  # -> (dx, dy)
    return ctx.mb.reshape(x=ctx.mb.add(x=shifts, y=base), shape=np.array([-1, taps * out[0], out[1], 2], np.int32))


def _scatter_mode(ctx: Ctx) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction not in SCATTER_MODES:
        ctx.refuse(f"reduction={reduction} has no Core ML scatter mode")
    return SCATTER_MODES[reduction]


def _scatter_values(ctx: Ctx):
    """data and updates in one dtype; MIL scatters take fp32, fp16 or int32, so ``_scattered`` moves bools."""
    return same_dtype(ctx, ctx.get(0), ctx.get(2))


def _scattered(ctx: Ctx, scatter, data, updates):
    """``scatter(data=, updates=, **named)`` as the node's output; bools as int32 0/1 and back (exact)."""
    return moved(ctx, data, lambda v, **named: scatter(data=v, updates=same_dtype(ctx, v, updates)[1], **named))


@op("ScatterElements", "Scatter")
def scatter_elements(ctx: Ctx):
    """MIL's scatter_along_axis (negative indices made non-negative). It wants the indices' sizes off the axis
    equal to data's; smaller ones (static) go to scatter_nd with each element's full coordinates instead."""
    data, updates = _scatter_values(ctx)
    rank = len(data.shape)
    axis = ctx.attr("axis", 0) % rank
    indices = _nonnegative(ctx, data, ctx.get(1), axis)
    mode = _scatter_mode(ctx)
    pairs = [(d, i) for a, (d, i) in enumerate(zip(data.shape, indices.shape)) if a != axis]
    if all(_static([d, i]) and d == i for d, i in pairs):
        return _scattered(ctx, lambda **kw: ctx.mb.scatter_along_axis(indices=indices, axis=axis, mode=mode, **kw),
                          data, updates)
    if not _static(indices.shape):
        ctx.refuse(f"flexible indices of shape {list(indices.shape)} smaller than data {list(data.shape)} off the "
                   "axis are not lowered")
    coordinates = _coordinates(ctx, indices, axis)
    return _scattered(ctx, lambda **kw: ctx.mb.scatter_nd(indices=coordinates, mode=mode, **kw), data, updates)


def _coordinates(ctx: Ctx, indices, axis: int):
    """[*indices.shape, rank] coordinates of each index's target: its own position, ``indices`` along ``axis``."""
    grid = np.indices([int(d) for d in indices.shape], np.int32)
    along = indices if isinstance(indices, np.ndarray) else ctx.mb.expand_dims(x=indices, axes=[0])
    if isinstance(along, np.ndarray):
        grid[axis] = along
        return np.moveaxis(grid, 0, -1)
    parts = [p for p in (grid[:axis], along, grid[axis + 1:]) if not isinstance(p, np.ndarray) or p.size]
    stacked = ctx.mb.concat(values=parts, axis=0)
    return ctx.mb.transpose(x=stacked, perm=[*range(1, indices.rank + 1), 0])


@op("ScatterND")
def scatter_nd(ctx: Ctx):
    """MIL's scatter_nd; negative indices made non-negative per indexed dim, as GatherND's are (by the run-time
    sizes of flexible dims)."""
    data, updates = _scatter_values(ctx)
    indices = ctx.get(1)
    depth = indices.shape[-1]
    if not isinstance(depth, (int, np.integer)) or depth > len(data.shape):
        ctx.refuse(f"indices of shape {list(indices.shape)} into data of shape {list(data.shape)} are not lowered")
    dims = list(data.shape[:depth])
    sizes = np.array(dims, np.int32) if _static(dims) else ctx.mb.slice_by_index(
        x=ctx.mb.shape(x=data), begin=np.array([0], np.int32), end=np.array([depth], np.int32))
    if isinstance(indices, np.ndarray) and (isinstance(sizes, np.ndarray) or not (indices < 0).any()):
        indices = narrow(np.where(indices < 0, indices + sizes, indices) if isinstance(sizes, np.ndarray) else indices)
    else:
        indices = _int32(ctx, indices)
        indices = ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=sizes),
                                b=indices)
    mode = _scatter_mode(ctx)
    return _scattered(ctx, lambda **kw: ctx.mb.scatter_nd(indices=indices, mode=mode, **kw), data, updates)


def _block(ctx: Ctx, x) -> int:
    """The block size, refused when x is not an image batch (rank 4); integers and bools move through the MIL
    ops (floats only) by ``float_moved``, exactly."""
    if len(x.shape) != 4:
        ctx.refuse(f"rank {len(x.shape)}: Core ML rearranges image batches (rank 4) only")
    return _sizes(ctx, [int(ctx.attr("blocksize"))], "blocksize")[0]


@op("DepthToSpace")
def depth_to_space(ctx: Ctx):
    """DCR (TensorFlow's order) is MIL's depth_to_space, CRD (PyTorch's) its pixel_shuffle; a block of 1 moves
    nothing."""
    x = ctx.get(0)
    b = _block(ctx, x)
    if b == 1:
        return ctx.mb.identity(x=x, name=ctx.name())
    if ctx.attr("mode", "DCR") == "CRD":
        return float_moved(ctx, x, lambda v, k, **named: ctx.mb.pixel_shuffle(x=v, upscale_factor=np.int32(b), **named))
    return float_moved(ctx, x, lambda v, k, **named: ctx.mb.depth_to_space(x=v, block_size=np.int32(b), **named))


@op("SpaceToDepth")
def space_to_depth(ctx: Ctx):
    x = ctx.get(0)
    b = _block(ctx, x)
    if b == 1:
        return ctx.mb.identity(x=x, name=ctx.name())
    return float_moved(ctx, x, lambda v, k, **named: ctx.mb.space_to_depth(x=v, block_size=np.int32(b), **named))


@op("LpPool")
def lp_pool(ctx: Ctx):
    """(sum over each window of |x|^p)^(1/p): the window sums by a depthwise convolution with a kernel of ones
    (pads add zeros, which add nothing; strides and dilations as ONNX's; ceil_mode as zeros padded at the end)."""
    x = _float_input(ctx, ctx.get(0), "LpPool")
    kernel = list(ctx.attr("kernel_shape"))
    spatial, p = len(kernel), float(ctx.attr("p", 2))
    strides, dilations = ctx.attr("strides", [1] * spatial), ctx.attr("dilations", [1] * spatial)
    channels = x.shape[1]
    if not _static([channels]):
        ctx.refuse("a flexible channel count is not lowered (the window sums are a per-channel convolution)")
    pad_type, pads = _pad_type(ctx), ctx.attr("pads")
    if ctx.attr("ceil_mode", 0):
        pad_type, pads = "custom", _ceil_pads(ctx, x, kernel, strides, dilations)
    powered = ctx.mb.abs(x=x) if p == 1 else ctx.mb.mul(x=x, y=x) if p == 2 else ctx.mb.pow(
        x=ctx.mb.abs(x=x), y=np.array(p, np_dtype(x)))
    ones = np.ones([int(channels), 1, *kernel], np_dtype(x))
    sums = ctx.mb.conv(x=powered, weight=ones, strides=strides, pad_type=pad_type, pad=_mil_pads(pads, spatial),
                       dilations=dilations, groups=int(channels))
    if p == 1:
        return ctx.mb.identity(x=sums, name=ctx.name())
    if p == 2:
        return ctx.mb.sqrt(x=sums, name=ctx.name())
    return ctx.mb.pow(x=sums, y=np.array(1 / p, np_dtype(x)), name=ctx.name())


def _ceil_pads(ctx: Ctx, x, kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """ONNX pads that give ceil_mode's output sizes (as onnxruntime's: a last window must start inside the input
    or its begin padding) by padding the end."""
    auto, spatial = ctx.attr("auto_pad", "NOTSET"), len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        ctx.refuse(f"ceil_mode with auto_pad={auto} is not lowered; give explicit pads")
    dims = list(x.shape[2:])
    if not _static(dims):
        ctx.refuse(f"ceil_mode over the flexible dims of {list(x.shape)} is not lowered")
    pads = [0] * (2 * spatial) if auto == "VALID" else list(ctx.attr("pads") or [0] * (2 * spatial))
    for i, (n, k, s, d) in enumerate(zip(dims, kernel, strides, dilations)):
        span, begin = (k - 1) * d + 1, pads[i]
        out = int(np.ceil((n + begin + pads[i + spatial] - span) / s)) + 1
        if (out - 1) * s >= n + begin:
            out -= 1
        pads[i + spatial] = max(pads[i + spatial], (out - 1) * s + span - n - begin)
    return pads


@op("CenterCropPad")
def center_crop_pad(ctx: Ctx):
    """A slice for the axes that shrink and a zero pad for those that grow, centred (the odd element at the end)
    as ONNX's; the target sizes must be constants."""
    x, shape = ctx.get(0), ctx.const(1, "shape")
    if shape.dtype == object:
        ctx.refuse("its shape must be a constant for Core ML")
    rank = len(x.shape)
    axes = [a % rank for a in ctx.attr("axes", list(range(rank)))]
    dims = [x.shape[a] for a in axes]
    if not _static(dims):
        ctx.refuse(f"cropping or padding the flexible dims of {list(x.shape)} is not lowered")
    targets = _sizes(ctx, [int(v) for v in shape.reshape(-1)], "target shape")
    if len(targets) != len(axes):
        ctx.refuse(f"{len(targets)} target sizes for {len(axes)} axes")
    begin, end, pads = [0] * rank, [0] * rank, [0] * (2 * rank)
    for a, d, s in zip(axes, dims, targets):
        if s < d:
            begin[a], end[a] = (d - s) // 2, (d - s) // 2 + s
        elif s > d:
            pads[2 * a], pads[2 * a + 1] = (s - d) // 2, s - d - (s - d) // 2
    y = x
    if any(end):
        y = ctx.mb.slice_by_index(x=y, begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                                  end_mask=[e == 0 for e in end])
    if any(pads):
        y = ctx.mb.pad(x=y, pad=np.array(pads, np.int32), mode="constant", constant_val=0.0)
    return ctx.mb.identity(x=y, name=ctx.name())


@op("Col2Im")
def col2im(ctx: Ctx):
    """The sum of the columns' blocks back in the image: the columns as a [N, C * K, *positions] image, and a
    grouped transposed convolution whose kernels of zeros put each of the K block entries at its offset (strides,
    dilations and pads as ONNX's; rows no block covers are zeros). image_shape and block_shape must be constants."""
    x, image, block = ctx.get(0), ctx.const(1, "image_shape"), ctx.const(2, "block_shape")
    if image.dtype == object or block.dtype == object:
        ctx.refuse("its image_shape and block_shape must be constants for Core ML (they set the output's size)")
    image, block = (_sizes(ctx, [int(v) for v in a.reshape(-1)], what) for a, what in
                    ((image, "image_shape"), (block, "block_shape")))
    spatial, k = len(image), int(np.prod(block))
    strides, dilations = ctx.attr("strides", [1] * spatial), ctx.attr("dilations", [1] * spatial)
    pads = list(ctx.attr("pads") or [0] * (2 * spatial))
    spans = [(b - 1) * d + 1 for b, d in zip(block, dilations)]
    positions = [(n + pads[i] + pads[i + spatial] - span) // s + 1
                 for i, (n, span, s) in enumerate(zip(image, spans, strides))]
    if not _static(x.shape[1:]) or x.shape[1] % k or x.shape[2] != int(np.prod(positions)) or min(positions) < 1:
        ctx.refuse(f"input of shape {list(x.shape)} does not hold {k}-entry blocks at {positions} positions")
    channels = int(x.shape[1]) // k
    _sizes(ctx, [channels, k, k], "the kernels' channels, blocks and entries")
    kernels = np.zeros([channels, k, *block], np_dtype(x))
    for i, offset in enumerate(np.ndindex(*block)):
        kernels[(slice(None), i, *offset)] = 1
    columns = ctx.mb.reshape(x=_float_input(ctx, x, "Col2Im"), shape=np.array([-1, channels * k, *positions], np.int32))
    full = [(p - 1) * s + span for p, s, span in zip(positions, strides, spans)]
    ends = [full[i] - pads[i] - image[i] for i in range(spatial)]  # to crop at the end (negative: to add)
    y = ctx.mb.conv_transpose(x=columns, weight=kernels.reshape(channels * k, 1, *block), pad_type="custom",
                              pad=np.array([v for i in range(spatial) for v in (pads[i], max(ends[i], 0))], np.int32),
                              strides=np.array(strides, np.int32), dilations=np.array(dilations, np.int32),
                              groups=np.int32(channels))
    if any(e < 0 for e in ends):
        y = ctx.mb.pad(x=y, pad=np.array([v for e in ends for v in (0, max(-e, 0))], np.int32), mode="constant",
                       constant_val=0.0)
    return ctx.mb.identity(x=y, name=ctx.name())


@op("ReverseSequence")
def reverse_sequence(ctx: Ctx):
    """MIL's reverse_sequence; the lengths may be computed at run time."""
    x, lengths = ctx.get(0), _int32(ctx, ctx.get(1))
    return ctx.mb.reverse_sequence(x=x, lengths=lengths, seq_axis=np.int32(ctx.attr("time_axis", 0)),
                                   batch_axis=np.int32(ctx.attr("batch_axis", 1)), name=ctx.name())


@op("MaxUnpool")
def max_unpool(ctx: Ctx):
    """Zeros of the unpooled shape with x written at its flat ``indices`` (MIL's scatter_nd into the flattened
    tensor). The shape is ``output_shape`` (a constant: it sets the output's size) or else the inferred one."""
    x, indices = _float_input(ctx, ctx.get(0), "MaxUnpool"), ctx.get(1)
    if not _static(x.shape):
        ctx.refuse(f"unpooling the flexible shape {list(x.shape)} is not lowered")
    shape = _unpooled_shape(ctx, [int(d) for d in x.shape])
    flat = ctx.mb.reshape(x=x, shape=np.array([-1], np.int32))
    where = ctx.mb.reshape(x=_int32(ctx, indices), shape=np.array([-1, 1], np.int32))
    zeros = np.zeros(int(np.prod(shape)), np_dtype(x))
    y = ctx.mb.scatter_nd(data=zeros, indices=where, updates=flat, mode="update")
    return ctx.mb.reshape(x=y, shape=np.array(shape, np.int32), name=ctx.name())


def _unpooled_shape(ctx: Ctx, dims: list[int]) -> list[int]:
    """``output_shape`` when given (a constant of x's batch and channels, at least the inferred size), else
    ``(d - 1) * stride - pads + kernel`` per spatial dim."""
    kernel = list(ctx.attr("kernel_shape"))
    spatial = len(kernel)
    strides, pads = ctx.attr("strides", [1] * spatial), list(ctx.attr("pads") or [0] * (2 * spatial))
    inferred = dims[:2] + [(d - 1) * s - pads[i] - pads[i + spatial] + k
                           for i, (d, s, k) in enumerate(zip(dims[2:], strides, kernel))]
    if len(ctx.node.input) < 3 or not ctx.node.input[2]:
        return _sizes(ctx, inferred, "unpooled shape")
    given = ctx.const(2, "output_shape")
    if given.dtype == object:
        ctx.refuse("its output_shape must be a constant for Core ML (it sets the output's size)")
    shape = _sizes(ctx, [int(v) for v in given.reshape(-1)], "output_shape")
    if len(shape) != len(dims) or shape[:2] != dims[:2] or any(g < i for g, i in zip(shape, inferred)):
        ctx.refuse(f"output_shape {shape} does not hold the unpooled {inferred}")
    return shape


@op("OneHot")
def one_hot(ctx: Ctx):
    """``values[1]`` where an index (negative ones counted from the end) equals the position along the new
    ``axis``, else ``values[0]``: a comparison with a constant range picking from ``values`` by gather, so
    ``depth`` must be a constant (it sets the output's size); indices and values may be computed at run time."""
    indices, depth, values = ctx.get(0), ctx.const(1, "depth"), ctx.get(2)
    if depth.dtype == object:
        ctx.refuse("its depth must be a constant for Core ML (it sets the output's size)")
    (depth,) = _sizes(ctx, [int(np.asarray(depth).reshape(-1)[0])], "depth")
    rank = len(indices.shape) + 1
    axis = ctx.attr("axis", -1) % rank
    indices = _int32(ctx, indices)
    fixed = ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=np.int32(depth)),
                          b=indices)
    positions = np.arange(depth, dtype=np.int32).reshape([-1 if a == axis else 1 for a in range(rank)])
    hit = ctx.mb.equal(x=ctx.mb.expand_dims(x=fixed, axes=[axis]), y=positions)
    values = narrow(values.reshape(-1)) if isinstance(values, np.ndarray) else values
    return ctx.mb.gather(x=values, indices=ctx.mb.cast(x=hit, dtype="int32"), axis=0, name=ctx.name())


@op("EyeLike")
def eye_like(ctx: Ctx):
    """Ones on diagonal ``k`` of a matrix shaped as x, zeros elsewhere: a constant mask selecting 1 over
    ``fill_like(x, 0)``, so the output is computed from x (Core ML outputs cannot be constants)."""
    import onnx

    x = ctx.get(0)
    if isinstance(x, np.ndarray) or len(x.shape) != 2 or not _static(x.shape):
        ctx.refuse("only a run-time matrix (rank 2) of static shape is lowered")
    ctx.needs("iOS16", "fill_like")
    wanted = ctx.attr("dtype")
    dtypes = {getattr(onnx.TensorProto, k): v for k, v in EYE_DTYPES.items()}
    dtype = np_dtype(x) if wanted is None else dtypes.get(wanted)
    if dtype is None:
        ctx.refuse(f"dtype {wanted} has no Core ML equivalent")
    rows, cols = (int(d) for d in x.shape)
    zeros = ctx.mb.fill_like(ref_tensor=x, value=np.zeros((), dtype))
    return ctx.mb.select(cond=np.eye(rows, cols, int(ctx.attr("k", 0)), dtype=np.bool_), a=np.ones((), dtype),
                         b=zeros, name=ctx.name())
