"""Folding: a node's outputs computed before run time when its inputs are known (constants, shapes, and the
shape arithmetic torch exports on flexible dims, done symbolically), so the MIL program holds values, not ops."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx


def fold(node: "onnx.NodeProto", values: dict, opset: int, sources: dict | None = None) -> list[np.ndarray] | None:
    """The node's outputs when they are known before run time: a Constant, a Shape, a Size, or any op whose inputs
    are all constants (evaluated with onnx's reference evaluator), else None.

    A Shape (or Size) with flexible dims gives an object array holding ints and the MIL symbols of those dims
    (``sources`` learns which var and axis each symbol can be read from at run time); shape arithmetic on such
    arrays is folded symbolically (``_fold_symbolic``)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    if node.op_type == "Constant":
        return [constant_value(node)]
    inputs = [values.get(name) for name in node.input if name]
    if node.op_type in ("Shape", "Size") and inputs and not isinstance(inputs[0], np.ndarray):
        shape = list(inputs[0].shape)
        for axis, d in enumerate(shape):
            if sources is not None and not isinstance(d, (int, np.integer)):
                sources.setdefault(d, (inputs[0], axis))
        if node.op_type == "Size":
            return [_as_shape_value(np.array(math.prod(shape), dtype=object))]
        return [_as_shape_value(np.array(shape, dtype=object)[shape_slice(node, len(shape))])]
    if any(isinstance(v, np.ndarray) and v.dtype == object for v in inputs):
        if not all(isinstance(v, np.ndarray) for v in inputs):
            return None
        try:
            out = _fold_symbolic(node, inputs)
        except Exception:  # leave it to the lowering
            return None
        return None if out is None else [_as_shape_value(out)]
    if not inputs or not all(isinstance(v, np.ndarray) for v in inputs) or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    feeds = dict(zip([n for n in node.input if n], inputs))
    try:
        size = _folded_size(node, feeds, opset)
        if size > FOLD_LIMIT:
            raise UnsupportedError(f"node '{node.name}' ({node.op_type}): it would fold to a constant of {size:,} "
                                   f"elements, over the {FOLD_LIMIT:,} onnxbridge folds")
        return list(ReferenceEvaluator(_node_model(node, feeds, opset, set())).run(None, feeds))
    except UnsupportedError:
        raise
    except Exception:  # e.g. string constants, or inputs the op refuses: the lowering says why it cannot
        return None


# folding stops at outputs this large (2**27 elements: 512 MB of fp32); a model that needs more is refused
FOLD_LIMIT = 1 << 27
SHAPE_LIKE = 4096  # constant inputs up to this size are shown to shape inference (shapes, repeats, pads, scales)


def _node_model(node: "onnx.NodeProto", inputs: dict, opset: int, known: set) -> "onnx.ModelProto":
    """A model of ``node`` alone: ``inputs`` (name -> array) are graph inputs, those named in ``known``
    initializers."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                         for n, v in inputs.items() if n not in known],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o],
        [numpy_helper.from_array(v, n) for n, v in inputs.items() if n in known])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])


def _folded_size(node: "onnx.NodeProto", inputs: dict, opset: int) -> int:
    """How many elements folding ``node`` would make, as far as ONNX shape inference tells from its small
    constant inputs (before any is made)."""
    import onnx

    model = _node_model(node, inputs, opset, {n for n, v in inputs.items() if v.size <= SHAPE_LIKE})
    total = 0
    for out in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.output:
        dims = out.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            total += math.prod(d.dim_value for d in dims)
    return total


# a Constant node's value attributes other than ``value`` (a tensor), and the numpy dtype each holds
CONSTANT_ATTRIBUTES = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                       "value_ints": np.int64, "value_string": object, "value_strings": object}


def constant_value(node: "onnx.NodeProto") -> np.ndarray:
    """A Constant node's value, from whichever value attribute it has (``onnx_file.read_onnx`` made sure of one)."""
    import onnx
    from onnx import numpy_helper

    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name not in CONSTANT_ATTRIBUTES:
        raise UnsupportedError(f"node '{node.name}' (Constant): a {attr.name} is not lowered")
    return np.array(onnx.helper.get_attribute_value(attr), dtype=CONSTANT_ATTRIBUTES[attr.name])


def _as_shape_value(v: np.ndarray) -> np.ndarray:
    """An int64 array once every entry is known, else the object array."""
    v = np.asarray(v, dtype=object)
    return v.astype(np.int64) if all(isinstance(e, (int, np.integer)) for e in v.reshape(-1)) else v


def _fold_symbolic(node: "onnx.NodeProto", inputs: list) -> np.ndarray | None:
    """The shape arithmetic torch exports (Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Reshape, +, -, *, /)
    on object arrays of ints and symbols; None for anything else."""
    import onnx
    import sympy

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op, x = node.op_type, inputs[0]
    ints = [np.asarray(v).astype(np.int64).tolist() if v.dtype != object else None for v in inputs[1:]]
    if op in ("Identity", "Cast") and (op == "Identity" or attrs["to"] in (6, 7)):
        return x
    if op == "Gather":
        axis = attrs.get("axis", 0)
        idx = np.asarray(inputs[1]).astype(np.int64)
        return np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)
    if op in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes", ints[0] if ints else None)
        if op == "Unsqueeze":
            rank = x.ndim + len(axes)
            return x.reshape(_unsqueezed(x.shape, [a % rank for a in axes]))
        return np.squeeze(x, None if axes is None else tuple(axes))
    if op == "Concat":
        return np.concatenate([np.asarray(v, dtype=object).reshape(-1) if v.ndim == 0 else np.asarray(v, dtype=object)
                               for v in inputs], axis=attrs["axis"])
    if op == "Slice" and x.ndim == 1 and all(i is not None for i in ints):
        starts, ends = ints[0], ints[1]
        steps = ints[3] if len(ints) > 3 else [1]
        return x[slice(int(np.clip(starts[0], -2 ** 31, 2 ** 31)), int(np.clip(ends[0], -2 ** 31, 2 ** 31)),
                       steps[0])]
    if op == "Reshape" and ints[0] is not None:
        return x.reshape(ints[0])
    arith = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
             "Div": lambda a, b: a // b if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer))
             else sympy.floor(a / b)}  # sizes are positive: floor is ONNX's truncation
    if op in arith:
        a, b = np.broadcast_arrays(np.asarray(x, dtype=object), np.asarray(inputs[1], dtype=object))
        return np.array([arith[op](_py(u), _py(v)) for u, v in zip(a.reshape(-1), b.reshape(-1))],
                        dtype=object).reshape(a.shape)
    return None


def _unsqueezed(shape: tuple, axes: list[int]) -> list[int]:
    """``shape`` with 1s inserted at ``axes`` (of the result)."""
    dims = iter(shape)
    return [1 if i in axes else next(dims) for i in range(len(shape) + len(axes))]


def _py(v):
    return int(v) if isinstance(v, np.integer) else v


def shape_slice(node: "onnx.NodeProto", rank: int) -> slice:
    """The dims a Shape node keeps of a rank-``rank`` input (its ``start`` and ``end``)."""
    attrs = {a.name: a.i for a in node.attribute}
    return slice(attrs.get("start", 0), attrs.get("end", rank))
