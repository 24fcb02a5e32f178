"""The host evaluator's vectorized window kernels (conv via im2col, depthwise and pools via tap loops) against
straightforward per-output-position loops in fp64, on small random cases through the MIL kernels' own arguments."""
from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest

from onnxbridge.backends.coreml import kernels_window
from onnxbridge.backends.coreml.evaluate import KERNELS


def reference_conv(x, w, b, strides, dilations, pads, groups):
    """fp64 cross-correlation, one output element at a time."""
    spatial = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads])
    n = x.shape[0]
    o, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    og = o // groups
    out = [(xp.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(spatial)]
    y = np.zeros((n, o, *out))
    for bi, oi in itertools.product(range(n), range(o)):
        g = oi // og
        for pos in itertools.product(*map(range, out)):
            window = xp[(bi, slice(g * cg, (g + 1) * cg)) + tuple(
                slice(p * s, p * s + (k - 1) * d + 1, d) for p, s, k, d in zip(pos, strides, kernel, dilations))]
            y[(bi, oi) + pos] = np.sum(window * w[oi].astype(np.float64))
    if b is not None:
        y += b.astype(np.float64).reshape(1, -1, *([1] * spatial))
    return y


CASES = [  # x shape, (O, C/g, *kernel), strides, dilations, pads (begin, end per axis), groups
    ((2, 4, 9, 8), (6, 4, 3, 3), [1, 1], [1, 1], [(1, 1), (1, 1)], 1),
    ((1, 6, 11, 10), (4, 3, 3, 2), [2, 3], [1, 1], [(0, 2), (1, 0)], 2),  # grouped, strided, uneven pads
    ((1, 3, 12, 12), (5, 3, 3, 3), [1, 2], [2, 3], [(2, 1), (0, 3)], 1),  # dilated
    ((2, 8, 7, 9), (8, 1, 3, 3), [2, 2], [1, 1], [(1, 1), (1, 1)], 8),  # depthwise
    ((1, 4, 7, 7), (8, 1, 5, 3), [1, 1], [2, 1], [(4, 4), (1, 1)], 4),  # depthwise, multiplier 2, dilated
    ((1, 5, 13), (7, 5, 4), [3], [2], [(2, 1)], 1),  # 1-d
    ((1, 4, 5, 6, 4), (6, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2], [(1, 0), (1, 1), (0, 2)], 2),  # 3-d grouped
    ((1, 16, 6, 6), (32, 16, 1, 1), [2, 2], [1, 1], [(0, 0), (0, 0)], 1),  # 1x1 downsample
]


def _mil_conv(x, w, b, strides, dilations, pads, groups):
    return KERNELS["conv"](x=x, weight=w, bias=b, strides=np.array(strides), dilations=np.array(dilations),
                           pad_type="custom", pad=np.array([p for pair in pads for p in pair]), groups=groups)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-g{c[5]}")
def test_conv_equals_the_reference_in_fp32(case):
    shape, wshape, strides, dilations, pads, groups = case
    rng = np.random.default_rng(len(shape) + sum(wshape))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    y = _mil_conv(x, w, b, strides, dilations, pads, groups)
    ref = reference_conv(x, w, b, strides, dilations, pads, groups)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    no_bias = _mil_conv(x, w, None, strides, dilations, pads, groups)
    np.testing.assert_allclose(no_bias, reference_conv(x, w, None, strides, dilations, pads, groups), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-g{c[5]}")
def test_fp16_conv_is_the_exact_sum_rounded_to_fp16_once(case):
    """fp16 in, fp16 out: the fp64 sum (bias included) rounded once; fp32 accumulation may land one fp16 step
    away only at a rounding boundary."""
    shape, wshape, strides, dilations, pads, groups = case
    rng = np.random.default_rng(7 + sum(shape))
    x = rng.standard_normal(shape).astype(np.float16)
    w = rng.standard_normal(wshape).astype(np.float16)
    b = rng.standard_normal(wshape[0]).astype(np.float16)
    y = _mil_conv(x, w, b, strides, dilations, pads, groups)
    ref = reference_conv(x, w, b, strides, dilations, pads, groups).astype(np.float16)
    assert y.dtype == np.float16
    steps = np.abs(y.astype(np.float64) - ref) / np.spacing(np.abs(ref))
    assert steps.max() <= 1 and np.mean(y == ref) > 0.99


@pytest.mark.slow
def test_same_padding_and_fp16_weight_cache():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 9, 10)).astype(np.float16)
    w = rng.standard_normal((4, 3, 3, 4)).astype(np.float16)
    y = KERNELS["conv"](x=x, weight=w, strides=np.array([2, 3]), pad_type="same")
    # same: out = ceil(n / s); total pad = (out - 1) * s + k - n, the smaller half first
    ref = reference_conv(x, w, None, [2, 3], [1, 1], [(1, 1), (1, 2)], 1).astype(np.float16)
    assert y.shape == (1, 4, 5, 4) and np.abs(y.astype(np.float64) - ref).max() <= np.spacing(np.abs(ref)).max()
    assert id(w) in kernels_window._WIDE  # the widened weight is kept while w lives ...
    w2 = -w
    np.testing.assert_array_equal(KERNELS["conv"](x=x, weight=w2, pad_type="valid"),
                                  -KERNELS["conv"](x=x, weight=w, pad_type="valid"))
    key = id(w)
    del w
    gc.collect()
    assert key not in kernels_window._WIDE  # ... and dropped with it


def reference_pool(x, kernel, strides, pads, reduce, fill, divisor=None):
    """Per-window loop in fp64; ``divisor``: 'real' (count of unpadded elements), 'kernel', or None (reduce only)."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pads], constant_values=fill)
    real = np.pad(np.ones(x.shape), [(0, 0), (0, 0), *pads])
    out = [(n - k) // s + 1 for n, k, s in zip(xp.shape[2:], kernel, strides)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for pos in itertools.product(*map(range, out)):
        index = (slice(None), slice(None)) + tuple(slice(p * s, p * s + k) for p, s, k in zip(pos, strides, kernel))
        axes = tuple(range(2, x.ndim))
        v = reduce(xp[index], axis=axes)
        if divisor == "real":
            v = v / real[index].sum(axis=axes)
        elif divisor == "kernel":
            v = v / np.prod(kernel)
        y[(slice(None), slice(None)) + pos] = v
    return y


POOLS = [  # x shape, kernel, strides, MIL pad list, ceil_mode
    ((2, 3, 9, 8), [3, 3], [2, 2], [1, 1, 1, 1], False),
    ((1, 4, 10, 7), [3, 3], [2, 2], [0, 1, 1, 0], True),
    ((1, 2, 11), [4], [3], [2, 1], True),
    ((1, 2, 5, 6, 7), [2, 3, 2], [1, 2, 2], [1, 0, 1, 1, 0, 1], False),
]


@pytest.mark.parametrize("case", POOLS, ids=lambda c: f"{c[0]}-k{c[1]}-ceil{c[4]}")
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pools_equal_the_reference(case, dtype):
    shape, kernel, strides, pad, ceil = case
    x = np.random.default_rng(5).standard_normal(shape).astype(dtype)
    pads = [(pad[2 * i], pad[2 * i + 1] + (strides[i] - 1 if ceil else 0)) for i in range(len(kernel))]
    args = {"x": x, "kernel_sizes": np.array(kernel), "strides": np.array(strides), "pad_type": "custom",
            "pad": np.array(pad), "ceil_mode": ceil}
    y = KERNELS["max_pool"](**args)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, reference_pool(x, kernel, strides, pads, np.max, -np.inf).astype(dtype))
    for exclude, divisor in [(True, "real"), (False, "kernel")]:
        y = KERNELS["avg_pool"](**args, exclude_padding_from_average=exclude)
        ref = reference_pool(x, kernel, strides, pads, np.sum, 0.0, divisor).astype(dtype)
        assert y.dtype == dtype
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-7 if dtype == np.float32 else 1e-3, atol=1e-7)


def reference_conv_transpose(x, w, b, strides, dilations, pads, groups):
    """fp64 scatter of each input element times its kernel, then the pads cropped."""
    n, cin = x.shape[:2]
    og, kernel, dims = w.shape[1], w.shape[2:], x.shape[2:]
    full = [(d - 1) * s + (k - 1) * dl + 1 for d, s, k, dl in zip(dims, strides, kernel, dilations)]
    y = np.zeros((n, og * groups, *full))
    x, w = x.astype(np.float64), w.astype(np.float64)
    for bi, ci in itertools.product(range(n), range(cin)):
        g = ci // (cin // groups)
        for pos in itertools.product(*map(range, dims)):
            for t in itertools.product(*map(range, kernel)):
                at = tuple(p * s + k * d for p, s, k, d in zip(pos, strides, t, dilations))
                y[(bi, slice(g * og, (g + 1) * og)) + at] += x[(bi, ci) + pos] * w[(ci, slice(None)) + t]
    y = y[(slice(None), slice(None)) + tuple(slice(b_, f - e) for (b_, e), f in zip(pads, full))]
    return y + b.astype(np.float64).reshape(1, -1, *([1] * (x.ndim - 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", [((1, 4, 5, 4), (4, 3, 3, 2), [2, 1], [1, 2], [(1, 0), (0, 1)], 2),
                                  ((2, 3, 6), (3, 2, 4), [3], [1], [(1, 2)], 1)], ids=["2d-grouped", "1d"])
def test_conv_transpose_equals_the_reference(case, dtype):
    shape, wshape, strides, dilations, pads, groups = case
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal(shape).astype(dtype), rng.standard_normal(wshape).astype(dtype)
    b = rng.standard_normal(wshape[1] * groups).astype(dtype)
    y = KERNELS["conv_transpose"](x=x, weight=w, bias=b, strides=np.array(strides), dilations=np.array(dilations),
                                  pad_type="custom", pad=np.array([p for pair in pads for p in pair]), groups=groups)
    ref = reference_conv_transpose(x, w, b, strides, dilations, pads, groups).astype(dtype)
    assert y.dtype == dtype and y.shape == ref.shape
    if dtype == np.float32:
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    else:
        assert (np.abs(y.astype(np.float64) - ref) <= np.spacing(np.abs(ref))).all()


def test_fp16_matmul_and_linear_round_the_fp32_sum_once():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 40)).astype(np.float16)
    w = rng.standard_normal((5, 40)).astype(np.float16)
    b = rng.standard_normal(5).astype(np.float16)
    exact = (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float16)
    y = KERNELS["matmul"](x=x, y=w, transpose_y=True)
    assert y.dtype == np.float16 and (np.abs(y.astype(np.float64) - exact) <= np.spacing(np.abs(exact))).all()
    np.testing.assert_array_equal(KERNELS["linear"](x=x, weight=w, bias=b), y + b)
    np.testing.assert_array_equal(y, np.matmul(x, w.T))  # numpy's own fp16 matmul: the same rounding


def test_vectorized_erf_matches_math_erf():
    import math

    from onnxbridge.backends.coreml import kernels_math

    x = np.concatenate([np.linspace(-9, 9, 40001), [0.0, -0.0, 2.0, -2.0, np.inf, -np.inf, 1e-300, 30.0]])
    ref = np.array([math.erf(v) for v in x])
    y = kernels_math.erf(x)
    assert np.abs(y - ref).max() < 1e-14
    assert np.isnan(kernels_math.erf(np.array([np.nan]))).all()
    for dtype in (np.float32, np.float16):
        narrow = x.astype(dtype)
        np.testing.assert_array_equal(KERNELS["erf"](x=narrow), np.array([math.erf(v) for v in narrow]).astype(dtype))


def test_widened_weights_stay_within_the_cache_budget(monkeypatch):
    monkeypatch.setattr(kernels_window, "WIDE_CACHE_BYTES", 1000)
    monkeypatch.setattr(kernels_window, "_WIDE", {})
    small, big = np.ones(100, np.float16), np.ones(300, np.float16)  # 400 and 1200 bytes in fp32
    for w in (small, big):
        np.testing.assert_array_equal(kernels_window.widened(w, np.dtype(np.float32)), w.astype(np.float32))
    assert id(small) in kernels_window._WIDE and id(big) not in kernels_window._WIDE
