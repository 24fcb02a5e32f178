"""Resize to sizes known only at run time (a position table resized to the patch grid of a flexible image) by
interpolation tables computed in the program: per resized axis, ONNX's source coordinate of each output index (from
``range_1d`` over the run-time size), the tap weights of linear or cubic interpolation, and a [n_out, n_in] table
applied with a matmul. The same formulas as ``lower_resize``'s constant tables, in fp32, on any iOS target; an
input size known only at run time (a flexible image's feature map resized to another's size) is read from the
input's shape, so the table's both sides may be flexible."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import Ctx, _static, runtime_shape
from onnxbridge.backends.coreml.lower_shape import _py_int

COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def resize_by_tables(ctx: Ctx, x, full: list, mode: str, coords: str):
    """``x`` resized to ``full`` (ints and flexible sizes), one axis at a time."""
    if mode not in ("linear", "cubic"):
        ctx.refuse(f"{mode} mode to sizes known only at run time has no Core ML equivalent (linear and cubic have)")
    if coords not in COORDS:
        ctx.refuse(f"coordinate_transformation_mode={coords} to sizes known only at run time is not lowered")
    y = x
    for axis, (size, n_in) in enumerate(zip(full, x.shape)):
        if _py_int(size) == _py_int(n_in):  # the same static size, or the same flexible one (a batch)
            continue
        n_out = _size(ctx, size)
        table = _table(ctx, mode, coords, n_out, int(n_in) if _static([n_in]) else _size(ctx, n_in))
        y = _apply(ctx, y, axis, table)
    return ctx.mb.identity(x=y, name=ctx.name())


def _size(ctx: Ctx, size):
    """A size (an int or a flexible size) as an fp32 scalar computed at run time."""
    return ctx.mb.cast(x=ctx.mb.squeeze(x=runtime_shape(ctx, np.array([size], dtype=object))), dtype="fp32")


def _last(ctx: Ctx, n_in):
    """The last index of an input of size ``n_in`` (an int, or an fp32 scalar var) in fp32."""
    return np.float32(n_in - 1) if isinstance(n_in, int) else ctx.mb.sub(x=n_in, y=np.float32(1))


def _fp32(n_in):
    return np.float32(n_in) if isinstance(n_in, int) else n_in


def _source(ctx: Ctx, coords: str, n_out, n_in):
    """ONNX's source coordinate of each output index (fp32), as ``lower_resize._source_coords`` computes it."""
    mb = ctx.mb
    out = mb.range_1d(start=np.float32(0), end=n_out, step=np.float32(1))
    if coords == "align_corners":  # x * (n_in - 1) / (n_out - 1); 0 when n_out is 1
        span = mb.maximum(x=mb.sub(x=n_out, y=np.float32(1)), y=np.float32(1))
        return mb.real_div(x=mb.mul(x=out, y=_last(ctx, n_in)), y=span)
    scale = mb.real_div(x=n_out, y=_fp32(n_in))
    if coords == "asymmetric":
        return mb.real_div(x=out, y=scale)
    src = mb.sub(x=mb.real_div(x=mb.add(x=out, y=np.float32(0.5)), y=scale), y=np.float32(0.5))
    if coords == "pytorch_half_pixel":  # a single output samples index 0
        src = mb.select(cond=mb.greater(x=n_out, y=np.float32(1)), a=src, b=np.float32(0))
    return src


def _picks(ctx: Ctx, index, n_in):
    """[n_out, n_in] fp32 one-hot rows of the (float) tap indices, clamped to the input."""
    mb = ctx.mb
    clamped = mb.minimum(x=mb.maximum(x=index, y=np.float32(0)), y=_last(ctx, n_in))
    positions = np.arange(n_in, dtype=np.float32)[None, :] if isinstance(n_in, int) else \
        mb.expand_dims(x=mb.range_1d(start=np.float32(0), end=n_in, step=np.float32(1)), axes=[0])
    hits = mb.equal(x=mb.expand_dims(x=clamped, axes=[1]), y=positions)
    return mb.cast(x=hits, dtype="fp32")


def _table(ctx: Ctx, mode: str, coords: str, n_out, n_in):
    """The [n_out, n_in] interpolation table at run time (ONNX's linear or cubic weights); ``n_in`` an int, or an
    fp32 scalar var when the input's size is flexible."""
    mb = ctx.mb
    src = _source(ctx, coords, n_out, n_in)
    if mode == "linear":  # clamped to the input, then its two neighbours
        src = mb.minimum(x=mb.maximum(x=src, y=np.float32(0)), y=_last(ctx, n_in))
        lo = mb.floor(x=src)
        hi = mb.minimum(x=mb.add(x=lo, y=np.float32(1)), y=_last(ctx, n_in))
        w_hi = mb.sub(x=src, y=lo)
        weights = [(lo, mb.sub(x=np.float32(1), y=w_hi)), (hi, w_hi)]
    else:
        weights = _cubic(ctx, src, n_in)
    table = None
    for index, weight in weights:
        term = mb.mul(x=_picks(ctx, index, n_in), y=mb.expand_dims(x=weight, axes=[1]))
        table = term if table is None else mb.add(x=table, y=term)
    return table


def _cubic(ctx: Ctx, src, n_in) -> list:
    """(tap index, weight) for taps floor(x)-1 .. floor(x)+2 of ONNX's cubic convolution (``cubic_coeff_a``);
    with ``exclude_outside``, taps outside the input get weight 0 and the rest are renormalised."""
    mb, a = ctx.mb, float(ctx.attr("cubic_coeff_a", -0.75))
    base = mb.floor(x=src)
    t = mb.sub(x=src, y=base)
    taps = []
    for k, dist in zip((-1, 0, 1, 2), (mb.add(x=t, y=np.float32(1)), t, mb.sub(x=np.float32(1), y=t),
                                       mb.sub(x=np.float32(2), y=t))):
        near = mb.add(x=mb.mul(x=mb.mul(x=mb.sub(x=mb.mul(x=dist, y=np.float32(a + 2)), y=np.float32(a + 3)),
                                        y=dist), y=dist), y=np.float32(1))
        far = mb.sub(x=mb.mul(x=mb.add(x=mb.mul(x=mb.sub(x=mb.mul(x=dist, y=np.float32(a)), y=np.float32(5 * a)),
                                               y=dist), y=np.float32(8 * a)), y=dist), y=np.float32(4 * a))
        weight = mb.select(cond=mb.less_equal(x=dist, y=np.float32(1)), a=near, b=far)
        taps.append((mb.add(x=base, y=np.float32(k)), weight))
    if ctx.attr("exclude_outside", 0):
        kept = []
        for index, weight in taps:
            inside = mb.logical_and(x=mb.greater_equal(x=index, y=np.float32(0)),
                                    y=mb.less(x=index, y=_fp32(n_in)))
            kept.append((index, mb.mul(x=weight, y=mb.cast(x=inside, dtype="fp32"))))
        total = mb.add(x=mb.add(x=kept[0][1], y=kept[1][1]), y=mb.add(x=kept[2][1], y=kept[3][1]))
        taps = [(index, mb.real_div(x=weight, y=total)) for index, weight in kept]
    return taps


def _apply(ctx: Ctx, x, axis: int, table):
    """``table`` [n_out, n_in] applied along ``axis`` of x (moved last for a matmul, then back)."""
    last = x.rank - 1
    perm = list(range(x.rank))
    perm[axis], perm[last] = last, axis
    moved = x if axis == last else ctx.mb.transpose(x=x, perm=perm)
    y = ctx.mb.matmul(x=moved, y=table, transpose_y=True)
    return y if axis == last else ctx.mb.transpose(x=y, perm=perm)
