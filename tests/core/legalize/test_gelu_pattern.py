"""One GELU pattern (``onnxbridge.legalize.gelu``) for every rewrite that looks for GELU: the optimizer's move of
its 0.5 onto x, the DLC backend's exact-GELU rule and ``--allow-approx gelu-tanh`` all find it through
``gelu_products``; turned off there, none of them finds a GELU."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.backends.dlc.legalize.rules import GELU
from onnxbridge.legalize import apply, gelu
from onnxbridge.legalize.approx import GELU_TANH
from onnxbridge.optimize import optimize_model

# the three groupings of x * 0.5 * (1 + erf(x / sqrt 2)): (first Mul's inputs, the last Mul's other input)
GROUPINGS = {
    "dynamo": (["half", "a"], "x"),  # x * (0.5 * (1 + t)): the one the optimizer moves
    "torchscript": (["x", "half"], "a"),  # (x * 0.5) * (1 + t)
    "x-first": (["x", "a"], "half"),  # (x * (1 + t)) * 0.5
}


def _gelu(grouping: str) -> onnx.ModelProto:
    inner, other = GROUPINGS[grouping]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["u"]), helper.make_node("Erf", ["u"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["a"]), helper.make_node("Mul", inner, ["h"]),
             helper.make_node("Mul", [other, "h"], ["g"], name="gelu_root"), helper.make_node("Neg", ["g"], ["y"])]
    consts = {"sqrt2": math.sqrt(2), "one": 1.0, "half": 0.5}
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
                              [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _rewrites(model: onnx.ModelProto) -> dict[str, int]:
    """How many GELUs each rewrite found: the optimizer's, the DLC rule's, the approximation's."""
    return {"optimize": optimize_model(model)[1]["gelu_half_moved"],
            "legalize": len(apply(model, [GELU])[1]),
            "approx": len(apply(model, [GELU_TANH])[1])}


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_every_rewrite_finds_gelu_through_the_one_pattern(monkeypatch, grouping):
    seen: list[tuple[str, bool]] = []
    products = gelu.gelu_products

    def spy(graph, node, *args):
        for p in products(graph, node, *args):
            seen.append((p.root.name or p.root.output[0], p.half_on_tail))
            yield p

    monkeypatch.setattr(gelu, "gelu_products", spy)
    moved = int(grouping == "dynamo")
    assert _rewrites(_gelu(grouping)) == {"optimize": moved, "legalize": 1, "approx": 1}
    assert "gelu_root" in {root for root, _ in seen}
    assert {half for _, half in seen} == {grouping == "dynamo"}  # one reading of the product, whoever asks


def test_no_rewrite_finds_gelu_without_the_pattern(monkeypatch):
    """The proof that none of them has a GELU matcher of its own: with ``gelu_products`` finding nothing, the
    optimizer, the DLC rule and the approximation leave the GELU alone."""
    model = _gelu("dynamo")
    assert _rewrites(model) == {"optimize": 1, "legalize": 1, "approx": 1}
    monkeypatch.setattr(gelu, "gelu_products", lambda graph, node, *args: iter(()))
    assert _rewrites(model) == {"optimize": 0, "legalize": 0, "approx": 0}
