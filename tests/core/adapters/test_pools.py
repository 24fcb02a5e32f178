"""MaxPool / AveragePool / LpPool across opsets 7..21: new attributes pass up and refuse down when used."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnxbridge.adapters import engine
from onnxbridge.errors import UnsupportedError
from tests.core.adapters.helpers import model, roundtrip

F, I64 = TensorProto.FLOAT, TensorProto.INT64
X = (np.arange(2 * 5 * 5, dtype=np.float32).reshape(1, 2, 5, 5) * 0.7) % 3.1 - 1.2

OPSETS = {"MaxPool": [7, 8, 10, 11, 12, 18, 21], "AveragePool": [7, 10, 11, 18, 19, 21], "LpPool": [7, 11, 17, 18, 21]}
BASE = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
# op -> feature name -> (attributes, first opset, words in the refusal, with the Indices output)
FEATURES = {
    "MaxPool": {
        "plain": ({}, 7, None, False),
        "indices": ({}, 8, "Indices", True),
        "storage_order": ({"storage_order": 1}, 8, "storage_order=1", True),
        "ceil_mode": ({"kernel_shape": [2, 2], "pads": [0, 0, 0, 0], "ceil_mode": 1}, 10, "ceil_mode=1", False),
        "dilations": ({"kernel_shape": [2, 2], "dilations": [2, 2]}, 10, "dilations=[2, 2]", False),
        "defaults": ({"ceil_mode": 0, "dilations": [1, 1], "storage_order": 0}, 10, None, False),
    },
    "AveragePool": {
        "plain": ({}, 7, None, False),
        "count_include_pad": ({"count_include_pad": 1}, 7, None, False),
        "ceil_mode": ({"kernel_shape": [2, 2], "pads": [0, 0, 0, 0], "ceil_mode": 1}, 10, "ceil_mode=1", False),
        "dilations": ({"kernel_shape": [2, 2], "dilations": [2, 2]}, 19, "dilations=[2, 2]", False),
        "defaults": ({"ceil_mode": 0, "dilations": [1, 1], "count_include_pad": 0}, 19, None, False),
    },
    "LpPool": {
        "plain": ({"p": 2}, 7, None, False),
        "ceil_mode": ({"kernel_shape": [2, 2], "pads": [0, 0, 0, 0], "ceil_mode": 1}, 18, "ceil_mode=1", False),
        "dilations": ({"kernel_shape": [2, 2], "dilations": [2, 2]}, 18, "dilations=[2, 2]", False),
        "defaults": ({"ceil_mode": 0, "dilations": [1, 1]}, 18, None, False),
    },
}


def pool_model(op: str, feature: str, opset: int):
    attrs, _, _, indices = FEATURES[op][feature]
    outputs = ["y", "i"] if indices else ["y"]
    node = helper.make_node(op, ["x"], outputs, name="pool", **{**BASE, **attrs})
    outs = [("y", F, [None] * 4)] + ([("i", I64, [None] * 4)] if indices else [])
    return model([node], [("x", F, list(X.shape))], outs, opset)


CASES = [(op, feat, a, b) for op, feats in FEATURES.items() for feat, (_, first, _, _) in feats.items()
         for a in OPSETS[op] for b in OPSETS[op] if a != b and min(a, b) >= first
         and not (feat == "defaults" and a < b)]
REFUSALS = [(op, feat, first) for op, feats in FEATURES.items() for feat, (_, first, words, _) in feats.items()
            if words]


@pytest.mark.parametrize("op,feature,src,dst", CASES)
def test_pool_roundtrip(op, feature, src, dst):
    roundtrip(pool_model(op, feature, src), dst, {"x": X})


@pytest.mark.parametrize("op,feature,first", REFUSALS)
def test_pool_refusals(op, feature, first):
    words = FEATURES[op][feature][2]
    with pytest.raises(UnsupportedError) as info:
        engine.convert(pool_model(op, feature, 21), first - 1)
    msg = info.value.one_line()
    assert "'pool'" in msg and words in msg and str(first) in msg, msg


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pool_defaults_dropped(op):
    out = roundtrip(pool_model(op, "defaults", 21), 7, {"x": X})
    names = {a.name for a in out.graph.node[0].attribute}
    assert not names & {"ceil_mode", "dilations", "storage_order"}
