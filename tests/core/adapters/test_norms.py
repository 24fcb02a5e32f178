"""BatchNormalization, Dropout, Clip and Pad across opsets 7..21."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.adapters import engine
from onnxbridge.errors import UnsupportedError
from tests.core.adapters.helpers import model, roundtrip

F, H = TensorProto.FLOAT, TensorProto.FLOAT16
NP = {F: np.float32, H: np.float16}


def pairs(opsets):
    return [(a, b) for a in opsets for b in opsets if a != b]


def refused(m, target, *words):
    with pytest.raises(UnsupportedError) as info:
        engine.convert(m, target)
    msg = info.value.one_line()
    for w in words:
        assert w in msg, msg
    return msg


# BatchNormalization -------------------------------------------------------------------------------
BN_X = np.linspace(-2, 3, 2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)


def bn_model(opset, attrs=None, outputs=1):
    stats = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("s", [1.0, 0.5, 2.0]), ("b", [0.1, -0.2, 0.3]), ("m", [0.0, 1.0, -1.0]), ("v", [1.0, 0.25, 4.0]))]
    outs = ["y", "rm", "rv"][:outputs]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, name="bn", **(attrs or {}))
    return model([node], [("x", F, [2, 3, 2, 2])], [("y", F, [2, 3, 2, 2])] + [(o, F, [3]) for o in outs[1:]],
                 opset, stats)


@pytest.mark.parametrize("src,dst", pairs([7, 9, 14, 15, 21]))
def test_batchnorm_roundtrip(src, dst):
    attrs = {"epsilon": 1e-3, **({"spatial": 1} if src < 9 else {})}
    roundtrip(bn_model(src, attrs), dst, {"x": BN_X})


def test_batchnorm_refuses_spatial0():
    refused(bn_model(7, {"spatial": 0}), 9, "'bn'", "spatial=0")


def test_batchnorm_refuses_training_mode():
    refused(bn_model(14, {"training_mode": 1}, outputs=3), 13, "'bn'", "training_mode=1", "14")
    refused(bn_model(15, {}, outputs=3), 9, "'bn'", "running_mean")


def test_batchnorm_15_is_type_only():
    src = bn_model(15, {"training_mode": 0})
    out = roundtrip(src, 14, {"x": BN_X})
    assert out.graph.node[0] == src.graph.node[0]


def test_batchnorm_15_mixed_types_refused():
    stats = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")
    m = model([node], [("x", H, [2, 3, 2, 2])], [("y", H, [2, 3, 2, 2])], 15, stats)
    refused(m, 14, "'bn'", "scale/B of type float", "15")
    roundtrip(m, 21, {"x": BN_X.astype(np.float16)})


@pytest.mark.parametrize("src,dst", [(14, 15), (15, 14), (15, 21), (21, 14)])
def test_batchnorm_fp16(src, dst):
    stats = [numpy_helper.from_array(np.ones(3, np.float16) * k, n) for k, n in zip((1, 0.5, 0.2, 2), "sbmv")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")
    m = model([node], [("x", H, [2, 3, 2, 2])], [("y", H, [2, 3, 2, 2])], src, stats)
    roundtrip(m, dst, {"x": BN_X.astype(np.float16)})


# Dropout ----------------------------------------------------------------------------------------
DX = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def dropout_model(opset, ratio=0.3, training=None):
    inits = []
    if opset < 12:
        node = helper.make_node("Dropout", ["x"], ["y"], name="drop", ratio=ratio)
    else:
        inits = [numpy_helper.from_array(np.array(ratio, np.float32), "r")]
        ins = ["x", "r"]
        if training is not None:
            inits.append(numpy_helper.from_array(np.array(training, np.bool_), "t"))
            ins.append("t")
        node = helper.make_node("Dropout", ins, ["y"], name="drop", seed=3)
    return model([node], [("x", F, [3, 4])], [("y", F, [3, 4])], opset, inits)


@pytest.mark.parametrize("src,dst", pairs([7, 10, 12, 13, 21]))
def test_dropout_roundtrip(src, dst):
    out = roundtrip(dropout_model(src, training=False if src >= 12 else None), dst, {"x": DX})
    node = out.graph.node[0]
    if dst < 12:
        assert len(node.input) == 1 and helper.get_attribute_value(node.attribute[0]) == pytest.approx(0.3)


@pytest.mark.parametrize("src,dst", pairs([7, 10]) + pairs([12, 13, 21]) + [(7, 12), (21, 10)])
def test_dropout_mask(src, dst):
    node = helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop", ratio=0.3)
    if src >= 12:
        node = helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop")
    mask = ("mask", F if src < 10 else TensorProto.BOOL, [3, 4])
    m = model([node], [("x", F, [3, 4])], [("y", F, [3, 4]), mask], src)
    if (src < 12) != (dst < 12):
        refused(m, dst, "'drop'", "the mask output")
    else:
        out = roundtrip(m, dst, {"x": DX})
        assert [o.name for o in out.graph.output] == ["y", "mask"]


def test_dropout_refuses_training():
    refused(dropout_model(13, training=True), 11, "'drop'", "training_mode=true", "12")


def test_dropout_refuses_runtime_ratio():
    node = helper.make_node("Dropout", ["x", "r"], ["y"], name="drop")
    m = model([node], [("x", F, [3, 4]), ("r", F, [])], [("y", F, [3, 4])], 13)
    refused(m, 10, "'drop'", "ratio")


# Clip -------------------------------------------------------------------------------------------
def clip_model(opset, et, lo=-0.5, hi=0.8):
    inits, attrs, ins = [], {}, ["x"]
    if opset < 11:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    else:
        for name, v in (("lo", lo), ("hi", hi)):
            if v is not None:
                inits.append(numpy_helper.from_array(np.array(v, NP[et]), name))
                ins.append(name)
            else:
                ins.append("")
        while not ins[-1]:
            ins.pop()
    node = helper.make_node("Clip", ins, ["y"], name="clip", **attrs)
    return model([node], [("x", et, [2, 5])], [("y", et, [2, 5])], opset, inits)


@pytest.mark.parametrize("bounds", [(-0.5, 0.8), (-0.5, None), (None, 0.25)])
@pytest.mark.parametrize("et", [F, H])
@pytest.mark.parametrize("src,dst", pairs([7, 10, 11, 12, 13, 21]))
def test_clip_roundtrip(src, dst, et, bounds):
    x = np.linspace(-1, 1, 10).reshape(2, 5).astype(NP[et])
    out = roundtrip(clip_model(src, et, *bounds), dst, {"x": x})
    if dst >= 11:
        for t in out.graph.initializer:
            assert t.data_type == et


def test_clip_refuses_runtime_bounds():
    node = helper.make_node("Clip", ["x", "lo"], ["y"], name="clip")
    m = model([node], [("x", F, [2]), ("lo", F, [])], [("y", F, [2])], 13)
    refused(m, 10, "'clip'", "min")


# Pad --------------------------------------------------------------------------------------------
PX = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5
PADS = [1, 0, 2, 3]  # begin axis 0, begin axis 1, end axis 0, end axis 1


def pad_model(opset, et, mode="constant", value=1.5, axes=None):
    pads = PADS if axes is None else [PADS[a] for a in axes] + [PADS[2 + a] for a in axes]
    inits, attrs, ins = [], {"mode": mode}, ["x"]
    if opset < 11:
        attrs.update(pads=pads, **({"value": value} if mode == "constant" else {}))
    else:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "p"))
        ins.append("p")
        if mode == "constant":
            inits.append(numpy_helper.from_array(np.array(value, NP[et]), "c"))
            ins.append("c")
        if axes is not None:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "a"))
            ins += [""] * (3 - len(ins)) + ["a"]
    node = helper.make_node("Pad", ins, ["y"], name="pad", **attrs)
    return model([node], [("x", et, [3, 4])], [("y", et, [6, 7])], opset, inits)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("et", [F, H])
@pytest.mark.parametrize("src,dst", pairs([7, 10, 11, 13, 18, 19, 21]))
def test_pad_roundtrip(src, dst, et, mode):
    roundtrip(pad_model(src, et, mode), dst, {"x": PX.astype(NP[et])})


@pytest.mark.parametrize("axes", [[1], [0, 1], [-1, 0]])
@pytest.mark.parametrize("et", [F, H])
@pytest.mark.parametrize("dst", [7, 10, 11, 13, 17])
def test_pad_axes_expand(dst, et, axes):
    src_m = pad_model(18, et, axes=axes)
    x = PX.astype(NP[et])
    if axes == [1]:  # only axis 1 padded
        src_m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 3
    roundtrip(src_m, dst, {"x": x})


def test_pad_refuses_wrap():
    refused(pad_model(19, F, "wrap"), 18, "'pad'", "mode=wrap", "19")


def test_pad_refuses_runtime_pads():
    node = helper.make_node("Pad", ["x", "p"], ["y"], name="pad")
    m = model([node], [("x", F, [3, 4]), ("p", TensorProto.INT64, [4])], [("y", F, None)], 13)
    refused(m, 10, "'pad'", "pads")
