"""Values known before run time: initializers, Constants, and chains of cheap ops over them.

Older opsets need some inputs as attributes (axes, split, pads, scales, k, starts/ends). When such an
input is computed, e.g. ``Concat(Constant, Constant)`` or ``Gather(Shape(x), 1)`` with a static
shape, it is evaluated here with onnx's reference evaluator on the model as it was before any
rewrite, so values do not depend on the order of rewrites.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx

FOLDABLE = frozenset({
    "Abs", "Add", "Cast", "Ceil", "Concat", "ConstantOfShape", "Div", "Equal", "Expand", "Flatten", "Floor",
    "Gather", "Identity", "Less", "Greater", "Max", "Min", "Mul", "Neg", "Not", "Range", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceSum", "Reshape", "Shape", "Size", "Slice", "Squeeze", "Sub", "Tile",
    "Transpose", "Unsqueeze", "Where",
})
MAX_ELEMENTS = 1 << 16  # fold shape-like values, not weights


class ConstantFolder:
    def __init__(self, source: bytes, opset: int, shape_of):
        self._source = source
        self._opset = opset
        self._shape_of = shape_of  # name -> static dims (ints) or None
        self._graph = None
        self._producers: dict = {}
        self._values: dict[str, "np.ndarray | None"] = {}

    def _index(self) -> None:
        import onnx

        model = onnx.load_from_string(self._source)
        self._graph = model.graph
        self._producers = {o: n for n in model.graph.node for o in n.output if o}
        self._inits = {t.name: t for t in model.graph.initializer}

    def value(self, name: str, depth: int = 0) -> "np.ndarray | None":
        """The value of ``name`` if it can be computed without the model's inputs, else None."""
        if name in self._values:
            return self._values[name]
        if self._graph is None:
            self._index()
        self._values[name] = None  # cycles and failures stay None
        result = self._compute(name, depth)
        if result is not None and result.size <= MAX_ELEMENTS:
            self._values[name] = result
        return self._values[name]

    def _compute(self, name: str, depth: int) -> "np.ndarray | None":
        import numpy as np
        from onnx import TensorProto, numpy_helper

        if name in self._inits:
            t = self._inits[name]
            return None if t.data_location == TensorProto.EXTERNAL else numpy_helper.to_array(t)
        node = self._producers.get(name)
        if node is None or depth > 32 or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Constant":
            from onnxbridge.adapters.rewriter import _constant_value
            import onnx

            attr = node.attribute[0]
            return _constant_value(onnx.helper.get_attribute_value(attr), attr.name)
        if node.op_type not in FOLDABLE:
            return None
        if node.op_type == "Shape":
            dims = self._shape_of(node.input[0])
            if dims is None or not all(isinstance(d, int) for d in dims):
                return None
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), None)
            return np.array(dims[start:end], np.int64)
        inputs = [self.value(i, depth + 1) if i else None for i in node.input]
        if any(v is None for i, v in zip(node.input, inputs) if i):
            return None
        return self._evaluate(node, inputs)[list(node.output).index(name)]

    def _evaluate(self, node: "onnx.NodeProto", inputs: list) -> list:
        import onnx
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
        single = helper.make_node(node.op_type, names, [f"out{i}" for i in range(len(node.output))],
                                  domain=node.domain)
        single.attribute.extend(node.attribute)
        graph = helper.make_graph([single], "fold", [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                                                     for n in names if n],
                                  [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                                   for o in single.output])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self._opset)])
        feeds = {n: v for n, v in zip(names, inputs) if n}
        return ReferenceEvaluator(model).run(None, feeds)
