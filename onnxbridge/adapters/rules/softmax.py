"""Softmax, LogSoftmax, Hardmax 13: from "flatten to 2-D at axis" to "along one axis"."""
from __future__ import annotations

from onnxbridge.adapters.registry import down, up
from onnxbridge.adapters.rewriter import get_attr, refuse, set_attr

OPS = ("Softmax", "LogSoftmax", "Hardmax")


@up(OPS, 13)
def flatten_then_op(node, rw):
    """Before 13 the op ran over all axes from ``axis`` on: Flatten, run over axis 1, Reshape back."""
    axis = get_attr(node, "axis", 1)
    if axis == -1:  # the last axis: the same at any rank, no shape needed
        return None
    rank = rw.rank(node.input[0])
    if rank is not None and axis % max(rank, 1) == rank - 1:
        set_attr(node, "axis", -1)
        return None
    x, y = node.input[0], node.output[0]
    flat = rw.node("Flatten", [x], axis=axis, name=f"{node.name}_flatten")
    core = rw.node(node.op_type, [flat.output[0]], axis=1, name=node.name)
    shape = rw.node("Shape", [x], name=f"{node.name}_shape")
    back = rw.node("Reshape", [core.output[0], shape.output[0]], [y], name=f"{node.name}_reshape")
    return [flat, core, shape, back]


@down(OPS, 13)
def transpose_op_transpose(node, rw):
    """From 13 the op runs along one axis: move that axis last, run over it, move it back."""
    given = get_attr(node, "axis", -1)
    if given == -1:  # the last axis (opset 11's rule makes it non-negative further down)
        set_attr(node, "axis", -1)  # explicit: the default before 13 is 1
        return None
    rank = rw.rank(node.input[0])
    if rank is None:
        refuse("the input rank is unknown, so the axis cannot be moved last")
    axis = given % max(rank, 1)
    if axis == rank - 1:
        if given != axis:  # the default before 13 is 1, and negative axes need 11
            set_attr(node, "axis", axis)
        return None
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    x, y = node.input[0], node.output[0]
    first = rw.node("Transpose", [x], perm=perm, name=f"{node.name}_to_last")
    core = rw.node(node.op_type, [first.output[0]], axis=rank - 1, name=node.name)
    back = rw.node("Transpose", [core.output[0]], [y], perm=perm, name=f"{node.name}_back")
    return [first, core, back]
