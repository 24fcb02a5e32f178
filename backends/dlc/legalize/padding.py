"""QNN rule for a constant Pad of the last axis at its end only, which the HTP computes wrongly depending on what
feeds it (onnxruntime-qnn 2.7's simulator, measured: shifted data and the pad value ignored after Relu, Exp, Softmax
and in EfficientViT-B0's linear attention, which pads v with ones that way: its output fell to cosine 0.33; right
after Sigmoid, Tanh or a graph input). Since which producers trip it cannot be told, every such Pad is rewritten."""
from __future__ import annotations

import numpy as np
from onnx import helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import Nodes, base_name, float_attr, ints_attr, single


def _mode(node) -> bytes:
    return next((a.s for a in node.attribute if a.name == "mode"), b"constant")


def pad_amounts(graph: Graph, match: Match) -> list[int] | None:
    """The pads of a Pad (begins, then ends, for every axis of its static input), from its attribute (opset < 11)
    or its constant ``pads`` and ``axes`` inputs; None where they are not known."""
    node, shape = match.nodes[0], graph.shape(match.inputs["in0"])
    if shape is None:
        return None
    rank = len(shape)
    if graph.opset < 11:
        pads = ints_attr(node, "pads")
        return pads if len(pads) == 2 * rank else None
    value = graph.value(match.inputs.get("in1", ""))
    if value is None or value.dtype.kind not in "iu":
        return None
    pads = [int(p) for p in value.reshape(-1)]
    axes_name = match.inputs.get("in3", "")
    if not axes_name:
        return pads if len(pads) == 2 * rank else None
    axes = graph.value(axes_name)
    if axes is None or axes.dtype.kind not in "iu" or len(pads) != 2 * axes.size or \
            any(not -rank <= a < rank for a in axes.reshape(-1)):
        return None
    axes = [int(a) % rank for a in axes.reshape(-1)]
    if len(set(axes)) != len(axes):
        return None
    full = [0] * 2 * rank
    for i, a in enumerate(axes):
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    return full


def _pad_value(graph: Graph, match: Match) -> np.ndarray | None:
    """The constant a Pad fills with, as a 0-d array of the input's type; None where it is not a constant."""
    node, x = match.nodes[0], match.inputs["in0"]
    dtype = helper.tensor_dtype_to_np_dtype(graph.elem_type(x))
    if graph.opset < 11:
        return np.array(float_attr(node, "value", 0.0)).astype(dtype)
    name = match.inputs.get("in2", "")
    if not name:
        return np.zeros((), dtype)
    value = graph.value(name)
    return None if value is None or value.size != 1 else value.reshape(()).astype(dtype)


def end_pad_condition(graph: Graph, match: Match) -> bool:
    """A constant-mode Pad of known pads and value on a static input that pads the last axis at its end and not at
    its start."""
    elem = graph.elem_type(match.inputs["in0"])
    if _mode(match.nodes[0]) != b"constant" or not elem or helper.tensor_dtype_to_np_dtype(elem).kind not in "biuf":
        return False
    pads = pad_amounts(graph, match)
    if not pads or _pad_value(graph, match) is None:
        return False
    rank = len(pads) // 2
    return pads[rank - 1] == 0 and pads[-1] > 0


def end_pad_replacement(graph: Graph, match: Match) -> list:
    """Concat(x', fill) along the last axis, fill a constant block of the pad value, x' the Pad of the other
    axes (x itself where only the last is padded): the same elements in the same places."""
    node, x = match.nodes[0], match.inputs["in0"]
    pads, value, shape = pad_amounts(graph, match), _pad_value(graph, match), graph.shape(x)
    rank = len(shape)
    e = Nodes(graph, base_name(match, "pad"))
    others = pads[:rank - 1] + [0] + pads[rank:2 * rank - 1] + [0]
    if any(others):
        if graph.opset < 11:
            x = e("Pad", [x], pads=others, mode="constant", value=float(value))
        else:
            x = e("Pad", [x, e.const("pads", np.array(others, np.int64)), e.const("value", value)], mode="constant")
    inner = [d + b + a for d, b, a in zip(shape[:-1], pads[:rank - 1], pads[rank:2 * rank - 1])]
    fill = e.const("fill", np.full(inner + [pads[-1]], value, value.dtype))
    e("Concat", [x, fill], node.output[0], axis=rank - 1)
    return e.nodes


END_PAD = Rule("last-axis-end-pad-to-concat", single("Pad"), end_pad_condition, end_pad_replacement)
