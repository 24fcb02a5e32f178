"""Attributes that became inputs (and back): axes, split, starts/ends, k, pads, min/max."""
from __future__ import annotations

import numpy as np

from onnxbridge.adapters.registry import down, up
from onnxbridge.adapters.rewriter import attr_to_input, drop_attr, get_attr, refuse, set_attr, set_input

REDUCE_18 = ("ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
             "ReduceLogSumExp", "ReduceSumSquare")


def _axes_to_input(node, rw, index: int = 1):
    attr_to_input(node, rw, "axes", index, np.int64)


def _axes_to_attr(node, rw, index: int = 1, *, reduce: bool = False):
    axes = rw.require_const(node, index, "axes")
    if index < len(node.input):
        set_input(node, index, "")
    if reduce and get_attr(node, "noop_with_empty_axes", 0):
        if axes is None or axes.size == 0:
            refuse("noop_with_empty_axes=1 with no axes (identity) has no older equivalent")
    drop_attr(node, "noop_with_empty_axes")
    if axes is not None and axes.size:
        set_attr(node, "axes", [int(a) for a in axes.ravel()])
    elif axes is not None and reduce:
        refuse("an empty axes input reduces nothing only with noop_with_empty_axes; older opsets reduce all")


@up(("Squeeze", "Unsqueeze", "ReduceSum"), 13)
def axes_up_13(node, rw):
    _axes_to_input(node, rw)


@down(("Squeeze", "Unsqueeze"), 13)
def axes_down_13(node, rw):
    _axes_to_attr(node, rw)


@down("ReduceSum", 13)
def reduce_sum_down(node, rw):
    _axes_to_attr(node, rw, reduce=True)


@up(REDUCE_18, 18)
def reduce_up_18(node, rw):
    _axes_to_input(node, rw)


@down(REDUCE_18, 18)
def reduce_down_18(node, rw):
    _axes_to_attr(node, rw, reduce=True)


@up("Split", 13)
def split_up_13(node, rw):
    attr_to_input(node, rw, "split", 1, np.int64)


@down("Split", 13)
def split_down_13(node, rw):
    split = rw.require_const(node, 1, "split")
    if len(node.input) > 1:
        set_input(node, 1, "")
    if split is not None:
        set_attr(node, "split", [int(s) for s in split])


@up("Split", 18)
def split_up_18(node, rw):
    if len(node.input) < 2 or not node.input[1]:
        set_attr(node, "num_outputs", len(node.output))


@down("Split", 18)
def split_down_18(node, rw):
    n = get_attr(node, "num_outputs")
    drop_attr(node, "num_outputs")
    if n is None or (len(node.input) > 1 and node.input[1]):
        return None
    dims = rw.shape(node.input[0])
    axis = get_attr(node, "axis", 0)
    size = dims[axis] if dims is not None and len(dims) > axis % len(dims) else None
    if isinstance(size, int) and size % n:
        chunk = -(-size // n)
        sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
        set_input(node, 1, rw.constant(np.array(sizes, np.int64), f"{node.name}_split"))
    elif not isinstance(size, int):
        refuse(f"num_outputs={n} over an axis of unknown size may leave an uneven last chunk")


@up("Slice", 10)
def slice_up_10(node, rw):
    for index, attr in enumerate(("starts", "ends", "axes"), start=1):
        attr_to_input(node, rw, attr, index, np.int64)


@down("Slice", 10)
def slice_down_10(node, rw):
    starts, ends = rw.require_const(node, 1, "starts"), rw.require_const(node, 2, "ends")
    axes, steps = rw.require_const(node, 3, "axes"), rw.require_const(node, 4, "steps")
    if steps is not None and np.any(steps != 1):
        refuse("steps other than 1 need opset 10")
    del node.input[1:]
    set_attr(node, "starts", [int(v) for v in starts])
    set_attr(node, "ends", [int(v) for v in ends])
    if axes is not None:
        set_attr(node, "axes", [int(v) for v in axes])


@up("TopK", 10)
def topk_up_10(node, rw):
    attr_to_input(node, rw, "k", 1, np.int64, shape=(1,))


@down("TopK", 10)
def topk_down_10(node, rw):
    k = rw.require_const(node, 1, "k")
    del node.input[1:]
    set_attr(node, "k", int(np.asarray(k).ravel()[0]))


@down("TopK", 11)
def topk_down_11(node, rw):
    if not get_attr(node, "largest", 1) or not get_attr(node, "sorted", 1):
        refuse("largest=0 or sorted=0 needs opset 11")
    drop_attr(node, "largest", "sorted")
    normalize_axis(node, rw)


def normalize_axis(node, rw, name: str = "axis", default: int | None = None):
    """Negative axes are valid only from opset 11: make them non-negative using the input rank."""
    value = get_attr(node, name, default)
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    if all(v >= 0 for v in values):
        return None
    rank = rw.rank(node.input[0])
    if rank is None:
        refuse(f"negative {name} needs the input rank, which is unknown")
    if node.op_type == "Unsqueeze":
        rank += len(values)
    fixed = [v % rank for v in values]
    set_attr(node, name, fixed if isinstance(value, list) else fixed[0])
    return None


@down(("Concat", "Gather", "Flatten", "ArgMax", "ArgMin", "Compress", "OneHot", "ReduceSum", "ReduceMax",
       "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
       "ReduceSumSquare", "Squeeze", "Unsqueeze", "Split", "Softmax", "LogSoftmax", "Hardmax"), 11)
def negative_axes_down_11(node, rw):
    name = "axes" if node.op_type.startswith("Reduce") or node.op_type in ("Squeeze", "Unsqueeze") else "axis"
    return normalize_axis(node, rw, name)


@down("Slice", 11)
def slice_down_11(node, rw):
    if len(node.input) < 4 or not node.input[3]:
        return None
    axes = rw.require_const(node, 3, "axes")
    if np.any(axes < 0):
        rank = rw.rank(node.input[0])
        if rank is None:
            refuse("negative axes need the input rank, which is unknown")
        set_input(node, 3, rw.constant((axes % rank).astype(np.int64), f"{node.name}_axes"))
