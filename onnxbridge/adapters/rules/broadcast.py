"""Variadic Sum/Max/Min/Mean broadcast only from opset 8: below, every input must have the same shape."""
from __future__ import annotations

from onnxbridge.adapters.registry import down
from onnxbridge.adapters.rewriter import refuse


@down(("Sum", "Max", "Min", "Mean"), 8)
def same_shapes_below_8(node, rw):
    shapes = {rw.shape(name) for name in node.input if name}
    if len(shapes) != 1 or None in shapes or any(d is None for d in next(iter(shapes))):
        refuse("inputs of different (or unknown) shapes, which broadcast only from opset 8")
