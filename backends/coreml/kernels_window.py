"""Vectorized numpy kernels of the host evaluator's window ops (conv, max/avg pool): conv as im2col + one
(grouped) matrix product, depthwise conv and pools as a loop over the few kernel taps, each a whole-tensor op.

Numerics: fp32 inputs are computed in fp32 (BLAS sgemm; sums in another order than a naive loop, so within fp32
rounding of it); fp16 inputs are widened exactly to fp32, the products summed (and the bias added) in fp32, and
the result rounded to fp16 once, at the op's output (numpy's own fp16 matmul rounds the same way; the einsum this
replaced rounded partial sums to fp16 at chunk boundaries that depended on numpy's iteration order)."""
from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Pads = Sequence[tuple[int, int]]


def compute_dtype(*arrays: np.ndarray) -> np.dtype:
    """fp32 for fp16/fp32 (and integer) operands, fp64 only when an operand is fp64."""
    return np.dtype(np.float64) if any(a.dtype == np.float64 for a in arrays) else np.dtype(np.float32)


def padded(x: np.ndarray, pads: Pads, value: float = 0.0, dtype=None) -> np.ndarray:
    """``x`` [N, C, *spatial] padded on its spatial axes by ``pads`` ((begin, end) each) with ``value``, in
    ``dtype`` (x's by default); one copy at most (none when nothing changes)."""
    dtype = np.dtype(dtype or x.dtype)
    if not any(b or e for b, e in pads):
        return x.astype(dtype, copy=False)
    out = np.full(x.shape[:2] + tuple(n + b + e for n, (b, e) in zip(x.shape[2:], pads)), value, dtype)
    out[(slice(None), slice(None)) + tuple(slice(b, b + n) for n, (b, _) in zip(x.shape[2:], pads))] = x
    return out


def out_dims(padded_dims: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> list[int]:
    """Output sizes of a window op over already padded spatial dims."""
    return [(n - (k - 1) * d - 1) // s + 1 for n, k, s, d in zip(padded_dims, kernel, strides, dilations)]


def tap(xp: np.ndarray, offsets: Sequence[int], out: Sequence[int], strides: Sequence[int],
        dilations: Sequence[int]) -> np.ndarray:
    """The view of padded ``xp`` [N, C, *spatial] that kernel tap ``offsets`` reads at every output position."""
    return xp[(slice(None), slice(None)) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                                                 for t, d, o, s in zip(offsets, dilations, out, strides))]


# fp16 weights widened to fp32 once per weight array, kept while the array lives, within a byte budget (a large
# fp16 model's weights are widened per use instead of held twice over)
WIDE_CACHE_BYTES = 256 << 20
_WIDE: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def widened(w: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``w`` in ``dtype``; the widened copy of a narrower array is made once per array and cached while the
    array lives and the cache holds under ``WIDE_CACHE_BYTES``."""
    if w.dtype == dtype:
        return w
    key = id(w)
    hit = _WIDE.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    wide = w.astype(dtype)
    if wide.nbytes + sum(v.nbytes for _, v in _WIDE.values()) <= WIDE_CACHE_BYTES:
        try:
            _WIDE[key] = (weakref.ref(w, lambda _, key=key: _WIDE.pop(key, None)), wide)
        except TypeError:  # not weak-referenceable: no caching
            pass
    return wide


def conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, strides: Sequence[int],
         dilations: Sequence[int], pads: Pads, groups: int) -> np.ndarray:
    """N-d convolution (cross-correlation) of ``x`` [N, C, *spatial] with ``weight`` [O, C/groups, *kernel],
    zero ``pads`` per spatial axis; result in x's dtype."""
    spatial, n = x.ndim - 2, x.shape[0]
    o, cg, kernel = weight.shape[0], weight.shape[1], list(weight.shape[2:])
    g = int(groups)
    dt = compute_dtype(x, weight)
    xp = padded(x, pads, 0.0, dt)
    out = out_dims(xp.shape[2:], kernel, strides, dilations)
    w = widened(weight, dt)
    if cg == 1 and g > 1:  # depthwise (channel multiplier o // g): a tap loop, no im2col
        og = o // g
        wt = w.reshape(g, og, -1)
        y = np.zeros((n, g, og, *out), dt)
        x_axes = (slice(None), slice(None), None)
        w_axes = (None, slice(None), slice(None)) + (None,) * spatial
        for k, offsets in enumerate(np.ndindex(*kernel)):
            y += tap(xp, offsets, out, strides, dilations)[x_axes] * wt[..., k][w_axes]
        y = y.reshape(n, o, *out)
    else:
        extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        win = sliding_window_view(xp, extent, axis=tuple(range(2, x.ndim)))
        win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
                  + tuple(slice(None, None, d) for d in dilations)]  # N, C, *out, *kernel
        # columns [C, *kernel, N, *out] -> [g, C/g * prod(kernel), N * prod(out)]: one copy
        order = (1, *range(2 + spatial, 2 + 2 * spatial), 0, *range(2, 2 + spatial))
        cols = np.ascontiguousarray(win.transpose(order)).reshape(g, cg * int(np.prod(kernel)), -1)
        y = np.matmul(w.reshape(g, o // g, -1), cols)  # g, O/g, N * prod(out)
        y = y.reshape(o, n, *out)
        y = np.ascontiguousarray(np.moveaxis(y, 1, 0)) if n > 1 else y.reshape(n, o, *out)
    if bias is not None:
        y += bias.astype(dt, copy=False).reshape(1, -1, *([1] * spatial))  # y is this call's own array
    return y.astype(x.dtype, copy=False)


def conv_transpose_full(x: np.ndarray, weight: np.ndarray, strides: Sequence[int], dilations: Sequence[int],
                        groups: int) -> np.ndarray:
    """Transposed convolution of ``x`` [N, C, *spatial] with ``weight`` [C, O/groups, *kernel] before any crop
    or bias: every input position times the kernel, scatter-added (one matrix product, then a strided add per
    tap). In the compute dtype (fp32 for fp16/fp32)."""
    n, cin, dims = x.shape[0], x.shape[1], list(x.shape[2:])
    og, kernel, g = weight.shape[1], list(weight.shape[2:]), int(groups)
    dt = compute_dtype(x, weight)
    full = [(d - 1) * s + (k - 1) * dl + 1 for d, s, k, dl in zip(dims, strides, kernel, dilations)]
    xg = x.astype(dt, copy=False).reshape(n, g, cin // g, -1)
    wg = widened(weight, dt).reshape(g, cin // g, -1)
    parts = np.matmul(wg.transpose(0, 2, 1), xg).reshape(n, g, og, *kernel, *dims)
    y = np.zeros((n, g, og, *full), dt)
    lead = (slice(None),) * 3
    for offsets in np.ndindex(*kernel):
        at = tuple(slice(t * dl, t * dl + (d - 1) * s + 1, s) for t, dl, d, s in zip(offsets, dilations, dims, strides))
        y[lead + at] += parts[lead + offsets]
    return y.reshape(n, g * og, *full)


def max_pool(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], pads: Pads) -> np.ndarray:
    """Max over each window (padding never wins: it is -inf); exact (fp16 is compared in fp32, which numpy
    does faster, and narrowed back without loss)."""
    xp = padded(x, pads, -np.inf, compute_dtype(x) if x.dtype == np.float16 else x.dtype)
    out = out_dims(xp.shape[2:], kernel, strides, [1] * len(kernel))
    ones = [1] * len(kernel)
    taps = np.ndindex(*kernel)
    y = np.array(tap(xp, next(taps), out, strides, ones))
    for offsets in taps:
        np.maximum(y, tap(xp, offsets, out, strides, ones), out=y)
    return y.astype(x.dtype, copy=False)


def avg_pool(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], pads: Pads,
             exclude_padding: bool) -> np.ndarray:
    """Mean over each window, summed in fp32 (fp64 for fp64 x) and rounded to x's dtype once; the divisor counts
    only the real (unpadded) elements when ``exclude_padding``, else the whole kernel."""
    dt = compute_dtype(x)
    xp = padded(x, pads, 0.0, dt)
    out = out_dims(xp.shape[2:], kernel, strides, [1] * len(kernel))
    ones = [1] * len(kernel)
    total = np.zeros(x.shape[:2] + tuple(out), dt)
    for offsets in np.ndindex(*kernel):
        total += tap(xp, offsets, out, strides, ones)
    if not exclude_padding:
        return (total / dt.type(np.prod(kernel))).astype(x.dtype, copy=False)
    count = np.ones((), dt)  # the real elements per window: an outer product of the counts along each axis
    for n, k, s, o, (b, _) in zip(x.shape[2:], kernel, strides, out, pads):
        start = np.arange(o) * s - b  # first input index of each window along this axis
        count = count[..., None] * (np.minimum(start + k, n) - np.maximum(start, 0)).astype(dt)
    return (total / count).astype(x.dtype, copy=False)
