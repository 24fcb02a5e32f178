"""Decompositions below an op's first version. Tolerance: 1e-4 for fp32, 1e-2 for fp16 (rounding of the
op-by-op form); integers and bools exact."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from onnxbridge.adapters import engine
from onnxbridge.errors import UnsupportedError
from tests.core.adapters.helpers import model, roundtrip, run

F32, F16 = 1e-4, 1e-2
TYPES = [(T.FLOAT, np.float32, F32), (T.FLOAT16, np.float16, F16)]
rng = np.random.default_rng(0)


def unary(op, opset, et, shape=(2, 3, 4), **attrs):
    node = helper.make_node(op, ["x"], ["y"], name="n", **attrs)
    return model([node], [("x", et, list(shape))], [("y", et, list(shape))], opset)


def ops_of(m):
    return {n.op_type for n in m.graph.node}


@pytest.mark.parametrize("et,dt,tol", TYPES)
@pytest.mark.parametrize("target", [16, 13, 11])
@pytest.mark.parametrize("axis,bias", [(-1, True), (1, False), (0, True)])
def test_layer_norm(et, dt, tol, target, axis, bias):
    shape = [2, 3, 4]
    pshape = shape[axis % 3:]
    node = helper.make_node("LayerNormalization", ["x", "s"] + (["b"] if bias else []), ["y"], name="ln",
                            axis=axis, epsilon=1e-3)
    inits = [helper.make_tensor("s", et, pshape, rng.standard_normal(pshape).astype(dt).ravel().tolist())]
    if bias:
        inits.append(helper.make_tensor("b", et, pshape, rng.standard_normal(pshape).astype(dt).ravel().tolist()))
    m = model([node], [("x", et, shape)], [("y", et, shape)], 17, inits)
    out = roundtrip(m, target, {"x": rng.standard_normal(shape).astype(dt) * 3}, tol)
    assert "LayerNormalization" not in ops_of(out)


def test_layer_norm_refuses_mean_output():
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln")
    m = model([node], [("x", T.FLOAT, [2, 3]), ("s", T.FLOAT, [3])],
              [("y", T.FLOAT, [2, 3]), ("mean", T.FLOAT, [2, 1])], 17)
    with pytest.raises(UnsupportedError, match="'ln'.*Mean"):
        engine.convert(m, 16)


@pytest.mark.parametrize("et,dt,tol", TYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("target", [19, 13])
def test_gelu(et, dt, tol, approximate, target):
    m = unary("Gelu", 20, et, approximate=approximate)
    out = roundtrip(m, target, {"x": (rng.standard_normal((2, 3, 4)) * 3).astype(dt)}, tol)
    assert "Gelu" not in ops_of(out)


@pytest.mark.parametrize("et,dt,tol", TYPES)
@pytest.mark.parametrize("target", [13, 7])
def test_hard_swish(et, dt, tol, target):
    roundtrip(unary("HardSwish", 14, et), target, {"x": (rng.standard_normal((2, 3, 4)) * 4).astype(dt)}, tol)


@pytest.mark.parametrize("et,dt,tol", TYPES)
@pytest.mark.parametrize("target", [17, 13, 7])
def test_mish(et, dt, tol, target):
    roundtrip(unary("Mish", 18, et), target, {"x": (rng.standard_normal((2, 3, 4)) * 4).astype(dt)}, tol)


@pytest.mark.parametrize("target", [11, 7])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_celu(target, alpha):
    roundtrip(unary("Celu", 12, T.FLOAT, alpha=alpha), target,
              {"x": (rng.standard_normal((2, 3, 4)) * 4).astype(np.float32)}, F32)


def compare_model(op, et, opset):
    node = helper.make_node(op, ["a", "b"], ["c"], name="cmp")
    return model([node], [("a", et, [2, 5]), ("b", et, [5])], [("c", T.BOOL, [2, 5])], opset)


@pytest.mark.parametrize("op", ["GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("et,dt", [(T.FLOAT, np.float32), (T.FLOAT16, np.float16), (T.DOUBLE, np.float64)])
@pytest.mark.parametrize("target", [11, 7])
def test_compare_float_with_nan(op, et, dt, target):
    a = np.array([[1, 2, np.nan, np.inf, -np.inf], [0, np.nan, 3, np.inf, -np.inf]], dt)
    b = np.array([1, np.nan, 2, np.inf, np.inf], dt)
    roundtrip(compare_model(op, et, 12), target, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("et,dt", [(T.INT32, np.int32), (T.INT64, np.int64)])
def test_compare_int(op, et, dt):
    a = rng.integers(-3, 3, (2, 5)).astype(dt)
    roundtrip(compare_model(op, et, 12), 11, {"a": a, "b": rng.integers(-3, 3, 5).astype(dt)})


@pytest.mark.parametrize("start,end", [(1, None), (0, -1), (-2, None), (1, 2), (5, None), (0, None)])
@pytest.mark.parametrize("target", [14, 13, 9])
def test_shape_start_end(start, end, target):
    attrs = {"start": start} | ({"end": end} if end is not None else {})
    node = helper.make_node("Shape", ["x"], ["y"], name="shape", **attrs)
    m = model([node], [("x", T.FLOAT, [2, 3, 4])], [("y", T.INT64, ["n"])], 15)
    out = roundtrip(m, target, {"x": np.zeros((2, 3, 4), np.float32)})
    assert all(not n.attribute for n in out.graph.node if n.op_type == "Shape")


@pytest.mark.parametrize("et,dt,tol", TYPES)
@pytest.mark.parametrize("target", [20, 18, 13])
def test_group_norm_21_down(et, dt, tol, target):
    shape = [2, 6, 3, 2]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=3, epsilon=1e-3)
    m = model([node], [("x", et, shape), ("s", et, [6]), ("b", et, [6])], [("y", et, shape)], 21)
    feeds = {"x": rng.standard_normal(shape).astype(dt) * 2, "s": rng.standard_normal(6).astype(dt),
             "b": rng.standard_normal(6).astype(dt)}
    out = roundtrip(m, target, feeds, tol)
    assert "GroupNormalization" not in ops_of(out)


def test_decomposition_needs_rank():
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")
    m = model([node], [("x", T.FLOAT, None), ("s", T.FLOAT, [3])], [("y", T.FLOAT, None)], 17)
    with pytest.raises(UnsupportedError, match="'ln'.*rank"):
        engine.convert(m, 16)


def test_compare_operand_names_kept():
    node = helper.make_node("GreaterOrEqual", ["p", "x"], ["c"], name="cmp")
    m = model([node], [("p", T.FLOAT, [3]), ("x", T.FLOAT, [3])], [("c", T.BOOL, [3])], 12)
    roundtrip(m, 11, {"p": np.array([1, 2, 3], np.float32), "x": np.array([2, 2, 2], np.float32)})


@pytest.mark.parametrize("et,dt,tol", TYPES)
def test_swish(et, dt, tol):
    """onnxruntime stops at opset 23: compare the decomposition with the formula."""
    from tests.core.adapters.helpers import run

    out, _ = engine.convert(unary("Swish", 24, et, alpha=0.7), 23)
    assert "Swish" not in ops_of(out)
    x = (rng.standard_normal((2, 3, 4)) * 4).astype(dt)
    want = x.astype(np.float64) / (1 + np.exp(-0.7 * x.astype(np.float64)))
    np.testing.assert_allclose(run(out, {"x": x})[0], want, atol=tol, rtol=0)


@pytest.mark.parametrize("et,dt,tol", TYPES)
def test_thresholded_relu(et, dt, tol):
    x = np.array([[-1, 0.5, 1.0, 1.5, np.nan, np.inf]], dt)
    roundtrip(unary("ThresholdedRelu", 10, et, shape=(1, 6), alpha=1.0), 9, {"x": x}, tol)


@pytest.mark.parametrize("source,target", [(15, 14), (19, 13), (21, 9)])
def test_cast_like(source, target):
    node = helper.make_node("CastLike", ["x", "t"], ["y"], name="n")
    m = model([node], [("x", T.FLOAT, [4]), ("t", T.INT32, [1])], [("y", T.INT32, [4])], source)
    out = roundtrip(m, target, {"x": np.array([1.5, -2.7, 3, 0], np.float32), "t": np.zeros(1, np.int32)})
    assert "CastLike" not in ops_of(out)


def test_bfloat16_gelu_refused_where_erf_lacks_it():
    """Decomposed nodes keep their types, so steps further down still check them (Div and Erf take bf16 from 13)."""
    with pytest.raises(UnsupportedError, match="does not take bfloat16"):
        engine.convert(unary("Gelu", 20, T.BFLOAT16), 12)


@pytest.mark.parametrize("dst", [22, 18, 13])
@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization_below_23(dst, axis):
    """RMSNormalization-23 runs nowhere here (onnxruntime stops at 23 without it), so compare with the formula."""
    from onnxbridge.adapters import engine

    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    scale = np.random.default_rng(2).standard_normal((3, 4) if axis == 1 else (4,)).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-5, name="n")
    m = model([node], [("x", T.FLOAT, [2, 3, 4]), ("scale", T.FLOAT, list(scale.shape))], [("y", T.FLOAT, [2, 3, 4])], 23)
    out, _ = engine.convert(m, dst)
    axes = tuple(range(axis % 3, 3))
    want = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + 1e-5) * scale
    np.testing.assert_allclose(run(out, {"x": x, "scale": scale})[0], want, atol=1e-5)
