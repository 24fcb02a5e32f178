"""Host-evaluator kernels for the MIL ops the sampling, rearranging and scattering lowerings emit."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.evaluate import _in_bounds, _s, kernel
from onnxbridge.backends.coreml.gaps import EvaluatorGap
from onnxbridge.errors import UnsupportedError

# scatter modes the lowerings emit besides update: how an update combines with the value already there (duplicate
# indices apply in turn)
SCATTER = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(op: str, data: np.ndarray, where: tuple, updates: np.ndarray, mode) -> np.ndarray:
    """``data`` with ``updates`` written at the index arrays ``where`` (one per leading axis of data) by
    ``mode``; ``update`` writes them in order, so the last of duplicate indices wins."""
    where = tuple(_in_bounds(op, w, n) for w, n in zip(where, data.shape))
    out, mode = np.array(data, copy=True), str(_s(mode))
    if mode == "update":
        out[where] = updates
    elif mode in SCATTER:
        SCATTER[mode].at(out, where, updates.astype(out.dtype))
    else:
        raise EvaluatorGap(f"the host evaluator has no {op} mode {mode}")
    return out


@kernel("scatter_along_axis")
def scatter_along_axis(data, indices, updates, axis=0, mode="add", **_):
    """``output[..., indices[..., i, ...], ...] (mode)= updates[..., i, ...]`` along ``axis``; strict bounds."""
    axis = int(_s(axis)) % data.ndim
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = indices
    return _scatter("scatter_along_axis", data, tuple(where), updates, mode)


@kernel("scatter_nd")
def scatter_nd(data, indices, updates, mode="add", **_):
    """``output[indices[i_0, ..., i_{K-2}]] (mode)= updates[i_0, ..., i_{K-2}]``; strict bounds."""
    where = tuple(indices[..., k] for k in range(indices.shape[-1]))
    return _scatter("scatter_nd", data, where, updates, mode)


@kernel("depth_to_space")
def depth_to_space(x, block_size, **_):
    """TensorFlow's order (ONNX's DCR): channel ``(i * b + j) * C' + c`` moves to ``(c, h * b + i, w * b + j)``."""
    b = int(_s(block_size))
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel("pixel_shuffle")
def pixel_shuffle(x, upscale_factor, **_):
    """PyTorch's order (ONNX's CRD): channel ``c * b * b + i * b + j`` moves to ``(c, h * b + i, w * b + j)``."""
    b = int(_s(upscale_factor))
    n, c, h, w = x.shape
    y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel("space_to_depth")
def space_to_depth(x, block_size, **_):
    """The inverse of ``depth_to_space``: ``(c, h * b + i, w * b + j)`` moves to channel ``(i * b + j) * C + c``."""
    b = int(_s(block_size))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@kernel("reverse_sequence")
def reverse_sequence(x, lengths, seq_axis=0, batch_axis=0, **_):
    """For each index i along ``batch_axis``, its first ``lengths[i]`` elements along ``seq_axis`` reversed."""
    seq_axis, batch_axis = int(_s(seq_axis)) % x.ndim, int(_s(batch_axis)) % x.ndim
    n = x.shape[seq_axis]
    if np.any(lengths < 0) or np.any(lengths > n):
        raise UnsupportedError(f"reverse_sequence lengths outside [0, {n}] reached Core ML's reverse_sequence")
    out = np.array(x, copy=True)
    for i, length in enumerate(lengths.astype(np.int64)):
        index = [slice(None)] * x.ndim
        index[batch_axis], index[seq_axis] = i, slice(0, length)
        reversed_index = list(index)
        reversed_index[seq_axis] = slice(length - 1, None, -1) if length else slice(0, 0)
        out[tuple(index)] = x[tuple(reversed_index)]
    return out


@kernel("fill_like")
def fill_like(ref_tensor, value=0.0, **_):
    """``value`` in ``ref_tensor``'s shape (its dtype: the value's)."""
    value = np.asarray(value)
    return np.full(ref_tensor.shape, value, value.dtype)


# resample: GridSample ------------------------------------------------------------------------------------------
def _pixels(g: np.ndarray, size: int, mode: str, align_corners: bool) -> np.ndarray:
    """Coordinates in ``mode`` as pixel positions (0 .. size - 1 inside the image)."""
    if mode == "unnormalized":
        return g
    if mode == "normalized_zero_to_one":
        g = 2 * g - 1
    elif mode != "normalized_minus_one_to_one":
        raise EvaluatorGap(f"the host evaluator has no resample coordinates_mode {mode}")
    return (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2


def _reflect(p: np.ndarray, low: float, high: float) -> np.ndarray:
    """``p`` folded back into [low, high] by reflecting at its ends as often as needed."""
    span = high - low
    if span <= 0:
        return np.zeros_like(p)
    d = np.abs(p - low)
    flips, extra = np.floor(d / span), np.fmod(d, span)
    return np.where(flips % 2 == 0, low + extra, high - extra)


def _padded(p: np.ndarray, size: int, padding: str) -> np.ndarray:
    """Pixel positions outside the image moved in, as ``padding`` says: border clamps, reflection reflects at
    the edge pixels' centres, symmetric at the image's edges (then clamped, a half pixel that repeats the edge)."""
    if padding == "border":
        return np.clip(p, 0, size - 1)
    if padding == "reflection":
        return _reflect(p, 0, size - 1)
    if padding == "symmetric":
        return np.clip(_reflect(p, -0.5, size - 0.5), 0, size - 1)
    if padding != "constant":
        raise EvaluatorGap(f"the host evaluator has no resample padding_mode {padding}")
    return p


def _taps(x: np.ndarray, iy: np.ndarray, ix: np.ndarray, fill: float) -> np.ndarray:
    """x[b, :, iy, ix] for integer positions [B, H2, W2] -> [B, C, H2, W2], ``fill`` outside the image."""
    h, w = x.shape[2:]
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    batch = np.arange(x.shape[0]).reshape(-1, 1, 1)
    v = x[batch, :, np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]  # [B, H2, W2, C]
    return np.moveaxis(np.where(inside[..., None], v, fill), -1, 1)


@kernel("resample")
def resample(x, coordinates, sampling_mode="bilinear", padding_mode="constant", padding_value=0.0,
             coordinates_mode="normalized_minus_one_to_one", align_corners=False, **_):
    """``x`` [B, C, H, W] sampled at ``coordinates`` [B, H2, W2, (x, y)], as PyTorch's grid_sample (whose
    converter maps onto it: reflection with align_corners=False is Core ML's symmetric); nearest rounds half
    to even."""
    h, w = x.shape[2:]
    mode, ac, fill = str(_s(coordinates_mode)), bool(_s(align_corners)), float(_s(padding_value))
    g = coordinates.astype(np.float64)
    px = _padded(_pixels(g[..., 0], w, mode, ac), w, str(_s(padding_mode)))
    py = _padded(_pixels(g[..., 1], h, mode, ac), h, str(_s(padding_mode)))
    v = x.astype(np.float64)
    sampling = str(_s(sampling_mode))
    if sampling == "nearest":
        return _taps(v, np.rint(py).astype(np.int64), np.rint(px).astype(np.int64), fill).astype(x.dtype)
    if sampling != "bilinear":
        raise EvaluatorGap(f"the host evaluator has no resample sampling_mode {sampling}")
    x0, y0 = np.floor(px), np.floor(py)
    fx, fy = (px - x0)[:, None], (py - y0)[:, None]
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    y = (_taps(v, y0, x0, fill) * (1 - fx) * (1 - fy) + _taps(v, y0, x0 + 1, fill) * fx * (1 - fy)
         + _taps(v, y0 + 1, x0, fill) * (1 - fx) * fy + _taps(v, y0 + 1, x0 + 1, fill) * fx * fy)
    return y.astype(x.dtype)
