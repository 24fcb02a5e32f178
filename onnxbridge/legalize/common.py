"""What rules share: constant and attribute readers, the single-node pattern, and a builder for the nodes of one
replacement."""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from onnxbridge.legalize import Graph, Match


FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def scalar_equals(graph: Graph, name: str, want: float, rtol: float = 0.0) -> bool:
    """Whether ``name`` is a one-element constant equal to ``want`` (within ``rtol``)."""
    v = graph.value(name)
    return v is not None and v.size == 1 and v.ndim <= 1 and np.issubdtype(v.dtype, np.floating) and \
        math.isclose(float(v.reshape(())), want, rel_tol=rtol)


def other_input(node, name: str) -> str | None:
    """The other input of a two-input commutative ``node`` one of whose inputs is ``name``."""
    a, b = node.input
    return b if a == name else a if b == name else None


def float_attr(node, name: str, default: float) -> float:
    return next((a.f for a in node.attribute if a.name == name), default)


def int_attr(node, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def single(op_type: str):
    def pattern(graph: Graph, node) -> Match | None:
        if node.op_type != op_type or node.domain not in ("", "ai.onnx"):
            return None
        return Match([node], {f"in{i}": name for i, name in enumerate(node.input)}, list(node.output))
    return pattern


class Nodes:
    """The nodes of one replacement, each output named fresh from ``base`` unless given."""

    def __init__(self, graph: Graph, base: str):
        self.graph, self.base, self.nodes = graph, base, []

    def __call__(self, op_type: str, inputs: list[str], out: str = "", **attrs) -> str:
        out = out or self.graph.fresh(f"{self.base}_{op_type.lower()}")
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.graph.fresh(self.base), **attrs))
        return out

    def const(self, what: str, array) -> str:
        return self.graph.constant(f"{self.base}_{what}", np.asarray(array))

    def scalar(self, what: str, value: float, like: str) -> str:
        """A 0-d constant of ``like``'s element type."""
        return self.const(what, np.array(value, helper.tensor_dtype_to_np_dtype(self.graph.elem_type(like))))

    def reduce(self, op_type: str, x: str, axes: list[int], out: str = "", keepdims: int = 1) -> str:
        """``op_type`` over ``axes``: axes as an input from opset 18 (13 for ReduceSum)."""
        if self.graph.opset >= (13 if op_type == "ReduceSum" else 18):
            return self(op_type, [x, self.const("axes", np.array(axes, np.int64))], out, keepdims=keepdims)
        return self(op_type, [x], out, axes=axes, keepdims=keepdims)


def is_used(graph: Graph, name: str) -> bool:
    return bool(name) and (graph.consumers.get(name, 0) > 0 or name in graph.outputs)


def float_input(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["in0"]) in FLOATS


def base_name(match: Match, default: str) -> str:
    return match.nodes[-1].name or default


def ints_attr(node, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])
