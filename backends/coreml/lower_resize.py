"""Core ML lowerings: Resize and Upsample (nearest, linear, cubic; scales, sizes and run-time sizes)."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import MAX_TABLE, TARGETS, Ctx, _static, float_moved, op, runtime_shape
from onnxbridge.backends.coreml.lower_shape import _py_int


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
        if by_size and mode != "nearest":  # a flexible image to a fixed size: tables read its size at run time
            return _resize_to_runtime_sizes(ctx, x, full, mode, coords)
        ctx.refuse(f"resizing the flexible dims of {list(x.shape)} needs their sizes at build time ({mode} mode)")
    if mode == "linear" and native:
        return _resize_linear(ctx, x, full, by_size, coords)
    if mode == "nearest" and native:  # integers and bools through the float-only op exactly (``float_moved``)
        return float_moved(ctx, x, lambda v, k, **named: ctx.mb.upsample_nearest_neighbor(
            x=v, scale_factor_height=full[-2], scale_factor_width=full[-1], **named))
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
    """``sizes`` holding flexible sizes (e.g. another input's Shape): iOS 17's ``resize`` of the last two axes where
    it samples as ONNX (linear), else interpolation tables computed in the program (``resize_tables``: linear or
    cubic, any axis with a static input size, any target)."""
    native = mode == "linear" and coords in SAMPLING and coords != "pytorch_half_pixel" and \
        TARGETS.index(ctx.target) >= TARGETS.index("iOS17") and \
        all(_py_int(f) == _py_int(d) for f, d in zip(full[:-2], x.shape[:-2]))
    if not native:
        from onnxbridge.backends.coreml.resize_tables import resize_by_tables

        return resize_by_tables(ctx, x, full, mode, coords)
    shape = runtime_shape(ctx, np.array(full[-2:], dtype=object))
    return ctx.mb.resize(x=x, shape=shape, resized_dims=np.uint32(2), interpolation_mode="LINEAR",
                         sampling_mode=SAMPLING[coords], name=ctx.name())
