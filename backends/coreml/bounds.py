"""Upper bounds of sizes MIL knows only at run time, from the ops that made them: a non_zero's count is at most its
input's size, a gather keeps its indices' sizes (gather_nd: all but the last), a slice or a selection never grows (a
slice to a run-time end that cannot be negative, no further than that end can be: ``min(k, n)`` of a detection
head's top-k), a concat adds its parts, broadcasting takes the largest operand's size, a reshape divides its
input's size by its other (static) sizes. A lowering that must pad to a constant size (NMS's ``max_boxes``) pads to
the bound, which is exact: the run-time size never exceeds it."""
from __future__ import annotations

import math

import numpy as np

# ops whose output has the shape of their input ``x`` (or of their broadcast inputs)
SAME = {"cast", "identity", "abs", "exp", "log", "sqrt", "floor", "ceil", "round", "sign", "relu", "sigmoid", "tanh",
        "clip", "logical_not", "inverse", "rsqrt", "sin", "cos", "erf", "softmax"}
BROADCAST = {"add", "sub", "mul", "real_div", "floor_div", "pow", "maximum", "minimum", "mod", "select", "equal",
             "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
             "logical_xor"}
NOT_LARGER = {"slice_by_index", "slice_by_size", "topk", "argsort", "reverse"}
DEPTH = 256  # ops walked back at most


def upper_bound(var, axis: int, depth: int = 0) -> int | None:
    """The largest size dim ``axis`` of MIL var ``var`` can have at run time, or None when unknown."""
    d = var.shape[axis]
    if isinstance(d, int):
        return d
    op = getattr(var, "op", None)
    if op is None or depth > DEPTH:
        return None
    kind, step = op.op_type, depth + 1
    inputs = op.inputs
    if kind == "non_zero":
        return _size(inputs["x"], step) if axis == 0 else None
    if kind == "slice_by_index" and _from_start(op, axis):  # to an end that cannot be negative: at most that end
        ends = [upper_bound(inputs["x"], axis, step)]
        floor = value_floor(inputs["end"], axis, step)
        if floor is not None and floor >= 0:
            ends.append(value_bound(inputs["end"], axis, step))
        ends = [b for b in ends if b is not None]
        return min(ends) if ends else None
    if kind in SAME or kind in NOT_LARGER:
        return upper_bound(inputs["x"], axis, step)
    if kind in BROADCAST:  # the size of an operand not 1 there (a flexible one may be 1 at run time: the largest)
        rank, found = len(var.shape), []
        for value in inputs.values():
            shape = getattr(value, "shape", None)
            if shape is None or len(shape) < rank - axis:
                continue
            a = axis - (rank - len(shape))
            if shape[a] != 1:
                found.append(upper_bound(value, a, step))
        return None if not found or None in found else max(found)
    if kind == "fill":  # the size its shape input holds there
        return value_bound(inputs["shape"], axis, step)
    if kind == "gather_along_axis":  # the indices' shape
        return upper_bound(inputs["indices"], axis, step)
    if kind == "transpose":
        return upper_bound(inputs["x"], int(inputs["perm"].val[axis]), step)
    if kind == "gather":
        x, indices, at = inputs["x"], inputs["indices"], int(inputs["axis"].val) % inputs["x"].rank
        if axis < at:
            return upper_bound(x, axis, step)
        if axis < at + indices.rank:
            return upper_bound(indices, axis - at, step)
        return upper_bound(x, axis - indices.rank + 1, step)
    if kind == "gather_nd":  # indices' sizes but the last, then x's past the ones it indexes
        x, indices = inputs["x"], inputs["indices"]
        lead = indices.rank - 1
        return upper_bound(indices, axis, step) if axis < lead else \
            upper_bound(x, axis - lead + int(indices.shape[-1]), step)
    if kind == "concat":
        at = int(inputs["axis"].val) % len(var.shape)
        if axis != at:
            return upper_bound(inputs["values"][0], axis, step)
        parts = [upper_bound(v, axis, step) for v in inputs["values"]]
        return None if None in parts else sum(parts)
    if kind in ("squeeze", "expand_dims"):
        return _moved_axis(var, op, axis, step)
    if kind == "reshape":
        x = inputs["x"]
        if d in x.shape:  # the same size, carried over
            return upper_bound(x, list(x.shape).index(d), step)
        others = [e for i, e in enumerate(var.shape) if i != axis]
        total = _size(x, step) if all(isinstance(e, int) for e in others) else None
        return None if total is None else total // max(math.prod(others), 1)
    return None


def _size(var, depth: int) -> int | None:
    """An upper bound of the number of elements of ``var``."""
    dims = [upper_bound(var, a, depth) for a in range(var.rank)]
    return None if None in dims else math.prod(dims)


def _moved_axis(var, op, axis: int, depth: int) -> int | None:
    """Through squeeze / expand_dims: the input axis that output ``axis`` is."""
    x = op.inputs["x"]
    axes = op.inputs.get("axes")
    if op.op_type == "squeeze":
        if axes is None:
            kept = [a for a, d in enumerate(x.shape) if d != 1]
        else:
            dropped = {int(a) % x.rank for a in axes.val}
            kept = [a for a in range(x.rank) if a not in dropped]
        return upper_bound(x, kept[axis], depth) if axis < len(kept) else None
    added = {int(a) % var.rank for a in axes.val}
    if axis in added:
        return 1
    return upper_bound(x, axis - sum(1 for a in added if a < axis), depth)


def _from_start(op, axis: int) -> bool:
    """Whether a slice_by_index starts at 0 along ``axis``, stride 1, and ends at its ``end`` there."""
    begin, stride = op.inputs["begin"].val, op.inputs.get("stride")
    masks = {k: op.inputs[k].val for k in ("begin_mask", "end_mask") if k in op.inputs}
    return begin is not None and int(begin[axis]) == 0 and (stride is None or int(stride.val[axis]) == 1) and \
        not ("end_mask" in masks and masks["end_mask"][axis])


def value_bound(var, index: int, depth: int = 0) -> int | None:
    """The largest value element ``index`` of the 1-D integer var ``var`` (or a one-element one) can hold."""
    if var.val is not None:
        value = var.val.reshape(-1)
        return int(value[index if value.size > 1 else 0])
    op = getattr(var, "op", None)
    if op is None or depth > DEPTH:
        return None
    kind, inputs, step = op.op_type, op.inputs, depth + 1
    if kind in ("cast", "identity", "reshape", "squeeze", "expand_dims"):
        return value_bound(inputs["x"], index, step)
    if kind == "shape":  # the sizes of its input
        return upper_bound(inputs["x"], index, step)
    if kind in ("slice_by_index", "gather") and inputs["x"].rank == 1:  # of a vector, at constant places
        places = _places(op)
        return None if places is None else value_bound(inputs["x"], places[index], step)
    if kind in ("minimum", "maximum"):
        found = [value_bound(inputs["x"], index, step), value_bound(inputs["y"], index, step)]
        known = [b for b in found if b is not None]
        if kind == "maximum":
            return None if None in found else max(found)
        return min(known) if known else None
    if kind == "reduce_min" and inputs["x"].rank == 1 and isinstance(inputs["x"].shape[0], int):
        known = [b for i in range(inputs["x"].shape[0]) if (b := value_bound(inputs["x"], i, step)) is not None]
        return min(known) if known else None  # at most any one element
    if kind == "concat":
        for part in inputs["values"]:
            size = part.shape[0] if part.rank == 1 else 1
            if not isinstance(size, int):
                return None
            if index < size:
                return value_bound(part, index, step)
            index -= size
    return None


def value_floor(var, index: int, depth: int = 0) -> int | None:
    """The smallest value element ``index`` of the 1-D integer var ``var`` (or a one-element one) can hold, or None
    when unknown."""
    if var.val is not None:
        value = var.val.reshape(-1)
        return int(value[index if value.size > 1 else 0])
    op = getattr(var, "op", None)
    if op is None or depth > DEPTH:
        return None
    kind, inputs, step = op.op_type, op.inputs, depth + 1
    if kind in ("cast", "identity", "reshape", "squeeze", "expand_dims"):
        return value_floor(inputs["x"], index, step)
    if kind == "shape":
        return 0
    if kind in ("minimum", "maximum"):
        found = [value_floor(inputs["x"], index, step), value_floor(inputs["y"], index, step)]
        known = [b for b in found if b is not None]
        if kind == "minimum":
            return None if None in found else min(found)
        return max(known) if known else None
    if kind == "concat":
        for part in inputs["values"]:
            size = part.shape[0] if part.rank == 1 else 1
            if not isinstance(size, int):
                return None
            if index < size:
                return value_floor(part, index, step)
            index -= size
    return None


def _places(op) -> list[int] | None:
    """The elements of a 1-D var that a slice_by_index (constant begin, stride 1) or a gather (constant indices)
    of it picks, or None."""
    x = op.inputs["x"]
    if op.op_type == "gather":
        indices = op.inputs["indices"].val
        if indices is None or not isinstance(x.shape[0], int):
            return None
        return [int(i) % x.shape[0] for i in np.asarray(indices).reshape(-1)]
    begin, stride = op.inputs["begin"].val, op.inputs.get("stride")
    if begin is None or (stride is not None and int(stride.val[0]) != 1) or not isinstance(x.shape[0], int):
        return None
    start = 0 if "begin_mask" in op.inputs and op.inputs["begin_mask"].val[0] else int(begin[0]) % max(x.shape[0], 1)
    return list(range(start, x.shape[0]))
