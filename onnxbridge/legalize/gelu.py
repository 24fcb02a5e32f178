"""GELU as a pattern: the one description of it that every rewrite looking for one uses (a backend's exact-GELU
rule, ``--allow-approx gelu-tanh``, and the optimizer moving GELU's 0.5 onto x).

GELU is the product ``x * 0.5 * (1 + t)``, ``t = erf(x / sqrt 2)`` in the exact form and ``t = tanh(sqrt(2 / pi)
(x + 0.044715 x^3))`` in the tanh form. Exporters write the three factors in any order and grouping (torch's
TorchScript exporter ``(x * 0.5) * (1 + t)``, its dynamo exporter ``x * (0.5 * (1 + t))``), and ``x / sqrt 2`` as
a Div or as a Mul by ``1 / sqrt 2``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from onnx import TensorProto

from onnxbridge.legalize import Graph, Match
from onnxbridge.legalize.common import other_input, scalar_equals

if TYPE_CHECKING:
    import onnx

GELU_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)  # what com.microsoft::Gelu and ONNX Gelu share
TAILS = ("Erf", "Tanh")


@dataclass
class GeluProduct:
    """``x * 0.5 * (1 + t)`` found from its last Mul (``root``): ``x`` and ``half`` (tensor names), ``add``
    (1 + t), ``t`` (the Erf or Tanh node) and ``inner`` (the Mul of two of the three factors)."""

    x: str
    half: str
    add: "onnx.NodeProto"
    t: "onnx.NodeProto"
    inner: "onnx.NodeProto"
    root: "onnx.NodeProto"

    @property
    def half_on_tail(self) -> bool:
        """Whether the inner Mul is ``0.5 * (1 + t)`` (the dynamo exporter's grouping)."""
        return sorted(self.inner.input) == sorted([self.half, self.add.output[0]])


def gelu_products(graph: Graph, node: "onnx.NodeProto", tails: tuple[str, ...] = TAILS) -> Iterator[GeluProduct]:
    """Each reading of Mul ``node`` as ``x * 0.5 * (1 + t)``, t the output of an op in ``tails``: one operand of
    ``node`` a Mul used only there, the Add ``1 + t`` used only in the product (t itself may be used elsewhere)."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return
    for i, name in enumerate(node.input):
        inner = graph.produced_by(name, "Mul")
        if inner is None:
            continue
        factors = [*inner.input, node.input[1 - i]]
        half = next((f for f in factors if scalar_equals(graph, f, 0.5)), None)
        if half is None:
            continue
        rest = list(factors)
        rest.remove(half)
        for x, one_plus_t in (rest, rest[::-1]):
            found = _one_plus(graph, one_plus_t, tails)
            if found is not None:
                yield GeluProduct(x, half, *found, inner, node)


def _one_plus(graph: Graph, name: str, tails: tuple[str, ...]):
    """``(add, t)`` when ``name`` is Add(t, 1) (in either order), used only once, t from an op in ``tails``."""
    add = graph.produced_by(name, "Add")
    if add is None:
        return None
    for t_out in add.input:
        t = graph.producer.get(t_out)
        if t is not None and t.op_type in tails and t.domain in ("", "ai.onnx") and \
                scalar_equals(graph, other_input(add, t_out), 1.0):
            return add, t
    return None


def gelu_pattern(graph: Graph, node: "onnx.NodeProto") -> Match | None:
    """Exact GELU, ``x * 0.5 * (1 + erf(x / sqrt 2))``, ending in Mul ``node``: its five nodes (the scaling of x,
    the Erf, the Add, the two Muls), each used only within it; input ``x``."""
    for p in gelu_products(graph, node, ("Erf",)):
        scale = _scaled_x(graph, p.t.input[0], p.x) if graph.single_use(p.t.output[0]) else None
        if scale is not None:
            return Match([scale, p.t, p.add, p.inner, node], {"x": p.x}, [node.output[0]])
    return None


def _scaled_x(graph: Graph, name: str, x: str):
    """The node making ``name`` as ``x / sqrt 2`` or ``x * (1 / sqrt 2)``, used only there; or None."""
    scale = graph.produced_by(name, "Div") or graph.produced_by(name, "Mul")
    if scale is None:
        return None
    if scale.op_type == "Div":
        return scale if scale.input[0] == x and scalar_equals(graph, scale.input[1], math.sqrt(2), 1e-6) else None
    other = other_input(scale, x)
    return scale if other is not None and scalar_equals(graph, other, 1 / math.sqrt(2), 1e-6) else None
