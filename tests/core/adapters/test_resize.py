"""Upsample / Resize across opsets 7..21: same numbers, refusals name the node and the feature."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.adapters import engine
from onnxbridge.errors import UnsupportedError
from tests.core.adapters.helpers import model, roundtrip

F = TensorProto.FLOAT
X = np.arange(1, 1 + 2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4) * 0.37
X7 = np.arange(7 * 9, dtype=np.float32).reshape(1, 1, 7, 9)


def _out_shape(scales):
    return [int(d * s) for d, s in zip(X.shape, scales)]


def resize_model(opset: int, mode: str, scales, sizes=None, **attrs):
    """The natural Upsample/Resize node for ``opset`` with Upsample-compatible semantics."""
    full = np.array([1, 1, *scales], np.float32)
    out = ("y", F, list(sizes) if sizes is not None else _out_shape(full))
    inits = []
    if opset < 9:
        node = helper.make_node("Upsample", ["x"], ["y"], name="up", mode=mode, scales=full.tolist())
    elif opset < 11:
        op = "Upsample" if opset == 9 else "Resize"
        node = helper.make_node(op, ["x", "s"], ["y"], name="up", mode=mode)
        inits = [numpy_helper.from_array(full, "s")]
    else:
        extra = {"coordinate_transformation_mode": "asymmetric"}
        if mode == "nearest":
            extra["nearest_mode"] = "floor"
        extra.update(attrs)
        if opset == 11:
            inits = [numpy_helper.from_array(np.zeros([0], np.float32), "roi")]
            ins = ["x", "roi", "s"]
        else:
            ins = ["x", "", "s"]
        if sizes is not None:
            ins = ins[:2] + ["", "z"] if opset > 11 else ["x", "roi", "empty", "z"]
            inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "z"))
            if opset == 11:
                inits.append(numpy_helper.from_array(np.zeros([0], np.float32), "empty"))
        else:
            inits.append(numpy_helper.from_array(full, "s"))
        node = helper.make_node("Resize", ins, ["y"], name="up", mode=mode, **extra)
    return model([node], [("x", F, list(X.shape))], [out], opset, inits)


OPSETS = [7, 9, 10, 11, 13, 18, 19, 21]
PAIRS = [(a, b) for a in OPSETS for b in OPSETS if a != b]


@pytest.mark.parametrize("scales", [(2.0, 2.0), (1.7, 1.3)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("src,dst", PAIRS)
def test_resize_roundtrip(src, dst, mode, scales):
    out = roundtrip(resize_model(src, mode, scales), dst, {"x": X})
    ops = {n.op_type for n in out.graph.node}
    assert ops == ({"Upsample"} if dst < 10 else {"Resize"})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("dst", [7, 9, 10])
@pytest.mark.parametrize("src", [11, 13, 18])
def test_resize_sizes_become_scales(src, dst, mode):
    roundtrip(resize_model(src, mode, (7 / 3, 1.75), sizes=[1, 2, 7, 7]), dst, {"x": X})


@pytest.mark.parametrize("dst", [11, 13, 19])
@pytest.mark.parametrize("scales", [(0.6, 0.5), (0.5, 2.0), (0.75, 0.4)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_downsampling(mode, scales, dst):
    full = np.array([1, 1, *scales], np.float32)
    node = helper.make_node("Resize", ["x", "s"], ["y"], name="up", mode=mode)
    m = model([node], [("x", F, list(X7.shape))], [("y", F, [int(d * k) for d, k in zip(X7.shape, full)])], 10,
              [numpy_helper.from_array(full, "s")])
    roundtrip(m, dst, {"x": X7})
    back, _ = engine.convert(m, dst)
    roundtrip(back, 10, {"x": X7})


def test_resize_10_mixed_nearest_refused():
    node = helper.make_node("Resize", ["x", "s"], ["y"], name="up", mode="nearest")
    m = model([node], [("x", F, list(X7.shape))], [("y", F, [1, 1, 5, 13])], 10,
              [numpy_helper.from_array(np.array([1, 1, 0.75, 1.5], np.float32), "s")])
    _refused(m, 11, "scales both below and above 1")


def test_shrinking_resize_refused_as_upsample():
    node = helper.make_node("Resize", ["x", "s"], ["y"], name="up", mode="linear")
    m = model([node], [("x", F, list(X7.shape))], [("y", F, [1, 1, 3, 4])], 10,
              [numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "s")])
    _refused(m, 9, "scales below 1")


def test_refuse_tf_half_pixel_for_nn_up_13():
    _refused(resize_model(11, "nearest", (2.0, 2.0), coordinate_transformation_mode="tf_half_pixel_for_nn"), 13,
             "tf_half_pixel_for_nn")


def test_upgrade_sets_asymmetric_floor():
    out, _ = engine.convert(resize_model(9, "nearest", (1.7, 1.3)), 11)
    node = out.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["coordinate_transformation_mode"] == b"asymmetric" and attrs["nearest_mode"] == b"floor"
    assert len(node.input) == 3


def test_down_13_fills_empty_inputs():
    out, _ = engine.convert(resize_model(13, "linear", (2.0, 2.0)), 11)
    assert all(out.graph.node[0].input)


def _refused(m, target, *words):
    with pytest.raises(UnsupportedError) as info:
        engine.convert(m, target)
    msg = info.value.one_line()
    assert "'up'" in msg, msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("attrs,target,word", [
    ({"coordinate_transformation_mode": "half_pixel"}, 10, "coordinate_transformation_mode=half_pixel"),
    ({"nearest_mode": "round_prefer_floor"}, 9, "nearest_mode=round_prefer_floor"),
])
def test_refuse_modes_below_11(attrs, target, word):
    _refused(resize_model(13, "nearest", (2.0, 2.0), **attrs), target, word)


def test_refuse_cubic_below_11():
    _refused(resize_model(13, "cubic", (2.0, 2.0)), 10, "mode=cubic")


@pytest.mark.parametrize("attrs,word", [
    ({"antialias": 1}, "antialias=1"),
    ({"keep_aspect_ratio_policy": "not_larger"}, "keep_aspect_ratio_policy=not_larger"),
])
def test_refuse_18_features(attrs, word):
    _refused(resize_model(18, "linear", (2.0, 2.0), **attrs), 17, word)


def test_refuse_half_pixel_symmetric():
    m = resize_model(19, "linear", (2.0, 2.0), coordinate_transformation_mode="half_pixel_symmetric")
    _refused(m, 18, "half_pixel_symmetric", "19")


def test_refuse_runtime_upsample_scales():
    node = helper.make_node("Upsample", ["x", "s"], ["y"], name="up", mode="nearest")
    m = model([node], [("x", F, [1, 2, 3, 4]), ("s", F, [4])], [("y", F, None)], 9)
    _refused(m, 8, "scales")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_axes_spread_to_full_rank_below_18(mode, by):
    """Resize-18 over axes [2, 3] becomes full-rank scales/sizes for 13 and below."""
    value = np.array([2.0, 1.5], np.float32) if by == "scales" else np.array([6, 5], np.int64)
    ins = ["x", "", "v"] if by == "scales" else ["x", "", "", "v"]
    node = helper.make_node("Resize", ins, ["y"], name="up", mode=mode, axes=[2, 3],
                            coordinate_transformation_mode="asymmetric")
    m = model([node], [("x", F, [1, 2, 3, 4])], [("y", F, [1, 2, 6, 6] if by == "scales" else [1, 2, 6, 5])], 18,
              [numpy_helper.from_array(value, "v")])
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    for target in (17, 13, 11):
        roundtrip(m, target, {"x": x})
