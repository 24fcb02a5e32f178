"""Core ML lowerings: shape, indexing and data-movement ops."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import (
    INT32, Ctx, _axes, _static, float_moved, int32_piece, moved, narrow, np_dtype, op, runtime_shape, same_dtype,
)


@op("Flatten")
def flatten(ctx: Ctx):
    """[prod(dims before axis), prod(dims from axis)]; ``axis`` may be the rank (then [size, 1]). With flexible
    dims on both sides, the leading product is computed at run time."""
    x = ctx.get(0)
    rank = len(x.shape)
    axis = ctx.attr("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank:
        ctx.refuse(f"axis {ctx.attr('axis', 1)} is outside [-{rank}, {rank}]")
    if _static(x.shape[:axis]):
        shape = np.array([int(np.prod(x.shape[:axis], dtype=np.int64)), -1], np.int32)
    elif _static(x.shape[axis:]):
        shape = np.array([-1, int(np.prod(x.shape[axis:], dtype=np.int64))], np.int32)
    else:
        lead = ctx.mb.slice_by_index(x=ctx.mb.shape(x=x), begin=np.array([0], np.int32), end=np.array([axis], np.int32))
        shape = ctx.mb.concat(values=[ctx.mb.reduce_prod(x=lead, axes=[0], keep_dims=True), np.array([-1], np.int32)],
                              axis=0)
    return ctx.mb.reshape(x=x, shape=shape, name=ctx.name())


@op("Reshape")
def reshape(ctx: Ctx):
    x, shape = ctx.get(0), ctx.get(1, raw=True)
    if not isinstance(shape, np.ndarray):
        x = ctx.mb.const(val=narrow(x)) if isinstance(x, np.ndarray) else x
        return ctx.mb.reshape(x=x, shape=_reshape_at_run_time(ctx, x, shape), name=ctx.name())
    if ctx.attr("allowzero", 0) and 0 in shape:
        ctx.refuse("allowzero=1 with a 0 in the shape has no Core ML equivalent")
    dims = [x.shape[i] if _py_int(d) == 0 else _py_int(d) for i, d in enumerate(shape)]  # ONNX 0: copy that dim
    unknown = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    if -1 in dims and unknown:  # the -1 worked out from x's sizes: static where the flexible sizes cancel
        dims[dims.index(-1)] = _left_over(x.shape, dims)
        unknown = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    if not unknown:
        return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())
    if len(unknown) == 1 and -1 not in dims:  # one flexible size: let reshape infer it
        dims[unknown[0]] = -1
        return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())
    return ctx.mb.reshape(x=x, shape=runtime_shape(ctx, np.array(dims, dtype=object)), name=ctx.name())


def _left_over(sizes, dims: list) -> int:
    """What a -1 in ``dims`` stands for when reshaping sizes ``sizes`` (ints and MIL symbols): an int when the
    symbols cancel, else -1 (left to the reshape)."""
    import sympy

    left = sympy.simplify(sympy.Mul(*sizes) / sympy.Mul(*[d for d in dims if d != -1]))
    return int(left) if left.is_Integer and left > 0 else -1


def _reshape_at_run_time(ctx: Ctx, x, shape):
    """A shape known at run time only, as the positive sizes ONNX means: a 0 copies x's size there (unless
    ``allowzero``), a -1 is what is left of x's size. Its length (the output rank) must be static."""
    n = shape.shape[0] if len(shape.shape) == 1 else None
    if not isinstance(n, (int, np.integer)):
        ctx.refuse(f"a run-time shape of shape {list(shape.shape)} leaves the output rank unknown")
    shape = _int32(ctx, shape)
    dims = ctx.mb.shape(x=x)
    if not ctx.attr("allowzero", 0):  # x's size at each position (1 past x's rank, where ONNX forbids a 0)
        if n > x.rank:
            same = ctx.mb.concat(values=[dims, np.ones(n - x.rank, np.int32)], axis=0)
        else:
            same = ctx.mb.slice_by_index(x=dims, begin=np.array([0], np.int32), end=np.array([n], np.int32))
        shape = ctx.mb.select(cond=ctx.mb.equal(x=shape, y=np.int32(0)), a=same, b=shape)
    unknown = ctx.mb.equal(x=shape, y=np.int32(-1))
    known = ctx.mb.reduce_prod(x=ctx.mb.select(cond=unknown, a=np.int32(1), b=shape), axes=[0], keep_dims=True)
    rest = ctx.mb.floor_div(x=ctx.mb.reduce_prod(x=dims, axes=[0], keep_dims=True), y=known)
    return ctx.mb.select(cond=unknown, a=rest, b=shape)


def _int32(ctx: Ctx, v):
    """An index-like var as int32."""
    return v if np_dtype(v) == np.int32 else ctx.mb.cast(x=v, dtype="int32")


def _py_int(d):
    """A size as a Python int when it is one (numpy or sympy integer), else unchanged."""
    import sympy

    return int(d) if isinstance(d, (int, np.integer, sympy.Integer)) else d


@op("Transpose")
def transpose(ctx: Ctx):
    x = ctx.get(0)
    perm = ctx.attr("perm") or list(range(x.rank))[::-1]
    return ctx.mb.transpose(x=x, perm=perm, name=ctx.name())


@op("Concat")
def concat(ctx: Ctx):
    values = same_dtype(ctx, *(ctx.get(i) for i in range(len(ctx.node.input))))
    return ctx.mb.concat(values=values, axis=ctx.attr("axis"), name=ctx.name())


@op("Squeeze")
def squeeze(ctx: Ctx):
    x = ctx.get(0)
    axes = _axes(ctx, 1, x.rank)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    if any(x.shape[a] != 1 for a in axes):  # MIL would silently ignore such an axis
        ctx.refuse(f"axes {axes} include a dimension that is not 1 in shape {list(x.shape)}")
    return ctx.mb.squeeze(x=x, axes=axes, name=ctx.name())


@op("Unsqueeze")
def unsqueeze(ctx: Ctx):
    x = ctx.get(0)
    axes = _axes(ctx, 1, x.rank + len(ctx.attr("axes") or ctx.const(1, "axes")))
    return ctx.mb.expand_dims(x=x, axes=sorted(axes), name=ctx.name())


@op("Gather")
def gather(ctx: Ctx):
    x = ctx.get(0)
    axis = ctx.attr("axis", 0) % len(x.shape)
    indices = _nonnegative(ctx, x, ctx.get(1), axis)  # x may be a constant table (embeddings) or bool (masks)
    return moved(ctx, x, lambda v, **named: ctx.mb.gather(x=v, indices=indices, axis=axis, **named))


def _nonnegative(ctx: Ctx, x, indices, axis: int):
    """Indices into ``axis`` of x made non-negative (negative ones are out of bounds from iOS 17 on), int32:
    constants here, run-time ones by select(idx < 0, idx + n, idx)."""
    n = x.shape[axis]
    if isinstance(indices, np.ndarray):
        if not isinstance(n, (int, np.integer)) and (indices < 0).any():
            ctx.refuse(f"negative indices into the flexible dim {axis} are not lowered")
        return narrow(np.where(indices < 0, indices + (n if (indices < 0).any() else 0), indices))
    if np_dtype(indices) != np.int32:
        indices = ctx.mb.cast(x=indices, dtype="int32")
    size = np.int32(n) if isinstance(n, (int, np.integer)) else ctx.mb.gather(
        x=ctx.mb.shape(x=x), indices=np.int32(axis), axis=0)
    return ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=size), b=indices)


@op("GatherND")
def gather_nd(ctx: Ctx):
    """Rows of x picked by the last axis of ``indices`` (``batch_dims`` 0: what ``weight[idx]`` exports as);
    negative indices made non-negative, per picked dim, as ``Gather``'s are."""
    x, indices = ctx.get(0), ctx.get(1)
    if ctx.attr("batch_dims", 0):
        ctx.refuse("batch_dims is not lowered")
    depth = indices.shape[-1]
    if not isinstance(depth, (int, np.integer)) or depth > len(x.shape):
        ctx.refuse(f"indices of shape {list(indices.shape)} into x of shape {list(x.shape)} are not lowered")
    x = narrow(x) if isinstance(x, np.ndarray) else x
    dims = list(x.shape[:depth])
    if isinstance(indices, np.ndarray):
        if (indices < 0).any() and not _static(dims):
            ctx.refuse("negative indices into flexible dims are not lowered")
        sizes = np.array([int(d) if isinstance(d, (int, np.integer)) else 0 for d in dims], np.int64)
        fixed = narrow(np.where(indices < 0, indices + sizes, indices))
        return moved(ctx, x, lambda v, **named: ctx.mb.gather_nd(x=v, indices=fixed, **named))
    indices = indices if np_dtype(indices) == np.int32 else ctx.mb.cast(x=indices, dtype="int32")
    sizes = np.array(dims, np.int32) if _static(dims) else ctx.mb.slice_by_index(
        x=ctx.mb.shape(x=x), begin=np.array([0], np.int32), end=np.array([depth], np.int32))
    fixed = ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=sizes), b=indices)
    return moved(ctx, x, lambda v, **named: ctx.mb.gather_nd(x=v, indices=fixed, **named))


@op("Slice")
def slice_(ctx: Ctx):
    """Constant starts/ends/axes/steps. Axes with negative steps are reversed first (``reverse``), so the
    slice itself always runs forwards: ``x[s:e:-k]`` is ``reverse(x)[n-1-s : n-1-e : k]``. A constant ``x`` cut at
    run-time sizes (a position table to the sequence length) becomes a MIL const first."""
    x = ctx.get(0)
    if isinstance(x, np.ndarray):
        x = ctx.mb.const(val=x)
    if ctx.opset < 10:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    else:
        axes = ctx.const(3, "axes").tolist() if len(ctx.node.input) > 3 and ctx.node.input[3] else None
        steps = ctx.const(4, "steps").tolist() if len(ctx.node.input) > 4 and ctx.node.input[4] else None
        known = [ctx.get(i, raw=True) for i in (1, 2)]  # object arrays hold flexible sizes: known at run time
        if not all(isinstance(v, np.ndarray) and v.dtype != object for v in known):
            return _slice_at_run_time(ctx, x, axes, steps)
        starts, ends = ctx.const(1, "starts").tolist(), ctx.const(2, "ends").tolist()
    axes = [int(a) % x.rank for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(axes)
    begin, end, stride = [0] * x.rank, [0] * x.rank, [1] * x.rank
    end_mask = [True] * x.rank
    flipped = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = x.shape[a]
        if st == 0:
            ctx.refuse("a slice step of 0 is invalid")
        stride[a] = abs(int(st))
        if st < 0:
            flipped.append(a)
            if isinstance(n, (int, np.integer)):  # ONNX clamps starts to [0, n-1], ends to [-1, n-1]
                s = min(max(s + n if s < 0 else s, 0), int(n) - 1)
                e = min(max(e + n if e < 0 else e, -1), int(n) - 1)
                begin[a], end[a], end_mask[a] = int(n) - 1 - s, int(n) - 1 - e, False
            elif not ((s == -1 or s >= INT32.max) and e <= INT32.min):  # a flexible dim: reversed whole only
                ctx.refuse(f"a negative step on the flexible dim {a} is lowered only from the last to the first "
                           "element (starts -1 or INT_MAX, ends INT_MIN)")
        elif isinstance(n, (int, np.integer)):
            # saturate: INT64_MAX means "to the end" and must not wrap when narrowed to int32
            begin[a], end[a], end_mask[a] = _clamp(s, n), _clamp(e, n), False
        else:  # a flexible dim: MIL indices count from the end when negative and clamp, as ONNX's do
            begin[a] = _saturate(s)
            if e < INT32.max:
                end[a], end_mask[a] = _saturate(e), False
    if flipped:
        x = ctx.mb.reverse(x=x, axes=sorted(flipped))
        if all(begin[a] == 0 and end_mask[a] and stride[a] == 1 for a in range(x.rank)):
            return ctx.mb.identity(x=x, name=ctx.name())
    return ctx.mb.slice_by_index(x=x, begin=np.array(begin, np.int32), end=np.array(end, np.int32),
                                 stride=np.array(stride, np.int32), end_mask=end_mask, name=ctx.name())


def _slice_at_run_time(ctx: Ctx, x, axes: list[int] | None, steps: list[int] | None):
    """Starts or ends known at run time only (constant axes and steps): ONNX's clamping computed on int32
    vectors (negative indices + n, then [0, n], or [0, n-1] / [-1, n-1] for negative steps, which reverse the
    axis first and index it as n - 1 - i), scattered into a full-rank slice."""
    starts, ends = (_int32(ctx, v) if not isinstance(v, np.ndarray) else narrow(v) for v in (ctx.get(1), ctx.get(2)))
    count = starts.shape[0]
    if not isinstance(count, (int, np.integer)):
        ctx.refuse(f"run-time starts of shape {list(starts.shape)} leave the sliced axes unknown")
    axes = [int(a) % x.rank for a in (axes if axes is not None else range(count))]
    steps = [int(s) for s in (steps or [1] * count)]
    if 0 in steps:
        ctx.refuse("a slice step of 0 is invalid")
    back = np.array([s < 0 for s in steps])
    sizes = [x.shape[a] for a in axes]
    n = np.array(sizes, np.int32) if _static(sizes) else ctx.mb.gather(x=ctx.mb.shape(x=x),
                                                                        indices=np.array(axes, np.int32), axis=0)
    top = ctx.mb.sub(x=n, y=back.astype(np.int32))  # the largest start: n, or n - 1 going backwards

    def clamp(v, low, high):
        v = ctx.mb.select(cond=ctx.mb.less(x=v, y=np.int32(0)), a=ctx.mb.add(x=v, y=n), b=v)
        return ctx.mb.minimum(x=ctx.mb.maximum(x=v, y=low), y=high)

    begin = clamp(starts, np.int32(0), top)
    end = clamp(ends, -back.astype(np.int32), top)
    if back.any():  # reversed axes index from their end: n - 1 - i
        last = ctx.mb.sub(x=n, y=np.int32(1))
        begin = ctx.mb.select(cond=back, a=ctx.mb.sub(x=last, y=begin), b=begin)
        end = ctx.mb.select(cond=back, a=ctx.mb.sub(x=last, y=end), b=end)
        x = ctx.mb.reverse(x=x, axes=sorted({a for a, b in zip(axes, back) if b}))
    where = {a: i for i, a in enumerate(axes)}
    order = np.array([where.get(a, count) for a in range(x.rank)], np.int32)
    full = [ctx.mb.gather(x=ctx.mb.concat(values=[v, np.zeros(1, np.int32)], axis=0), indices=order, axis=0)
            for v in (begin, end)]
    stride = np.array([abs(steps[where[a]]) if a in where else 1 for a in range(x.rank)], np.int32)
    return ctx.mb.slice_by_index(x=x, begin=full[0], end=full[1], stride=stride,
                                 end_mask=[a not in where for a in range(x.rank)], name=ctx.name())


def _saturate(index: int) -> int:
    """An ONNX slice index as int32 (INT64_MIN/MAX mean "from the start"/"to the end" and stay so)."""
    return int(min(max(index, INT32.min), INT32.max))


def _clamp(index: int, n: int) -> int:
    return int(min(max(index + n if index < 0 else index, 0), n))


@op("Pad")
def pad(ctx: Ctx):
    """Constant/reflect/edge; opset 18's ``axes`` expanded to every dim; negative pads crop (a slice after).
    Pads or a constant value known at run time only go through ``_pad_at_run_time`` and ``_padded``; wrap mode
    through ``_wrapped``."""
    x = ctx.get(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        ctx.refuse(f"mode={mode} has no Core ML equivalent")
    pads = ctx.attr("pads") if ctx.opset < 11 else ctx.get(1)
    value = ctx.attr("value", 0.0) if ctx.opset < 11 else ctx.get(2)
    rank = x.rank
    axes = ctx.const(3, "axes").tolist() if len(ctx.node.input) > 3 and ctx.node.input[3] else list(range(rank))
    if not isinstance(pads, (list, np.ndarray)):
        return _pad_at_run_time(ctx, x, _int32(ctx, pads), [a % rank for a in axes], mode, value)
    pads = list(pads)
    begins, ends = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begins[a % rank], ends[a % rank] = int(pads[k]), int(pads[k + len(axes)])
    if mode == "wrap":
        return _wrapped(ctx, x, list(zip(begins, ends)))
    y = x
    if any(p > 0 for p in begins + ends):
        y = _padded(ctx, x, np.array([max(v, 0) for i in range(rank) for v in (begins[i], ends[i])], np.int32),
                    mode, value)
    if any(p < 0 for p in begins + ends):
        if not _static([y.shape[i] for i in range(rank) if ends[i] < 0]):
            ctx.refuse("negative pads (cropping) at the end of a flexible dim are not lowered")
        stop = [int(y.shape[i]) + ends[i] if ends[i] < 0 else 0 for i in range(rank)]
        y = ctx.mb.slice_by_index(x=y, begin=np.array([max(-b, 0) for b in begins], np.int32),
                                  end=np.array(stop, np.int32), end_mask=[e >= 0 for e in ends])
    return ctx.mb.identity(x=y, name=ctx.name())


def _wrapped(ctx: Ctx, x, pads: list):
    """Wrap padding as a gather per padded axis, as onnxruntime: negative pads crop first, the positive ones then
    wrap around what is left (n' elements from ``lo``): source ``lo + (i mod n')`` for i in [-begin, n' + end).
    Constants, or int32 ops on pads known at run time (``pads`` per axis: a (begin, end) pair of ints or of [1]
    vars, None for an axis left alone)."""
    mb = ctx.mb
    for a, pair in enumerate(pads):
        if pair is None or isinstance(pair[0], int) and pair == (0, 0):
            continue
        n, (b, e) = x.shape[a], pair
        if not isinstance(n, (int, np.integer)):
            ctx.refuse(f"wrap padding of the flexible dim {a} is not lowered")
        if isinstance(b, int):
            lo, kept = max(-b, 0), int(n) - max(-b, 0) - max(-e, 0)
            indices = (lo + np.arange(-max(b, 0), kept + max(e, 0)) % kept).astype(np.int32)
        else:
            (grow_b, grow_e), (lo, hi) = ((mb.maximum(x=v, y=np.int32(0)) for v in pair),
                                          (mb.maximum(x=mb.sub(x=np.int32(0), y=v), y=np.int32(0)) for v in pair))
            kept = mb.sub(x=np.int32(n), y=mb.add(x=lo, y=hi))
            i = mb.range_1d(start=mb.squeeze(x=mb.sub(x=np.int32(0), y=grow_b)),
                            end=mb.squeeze(x=mb.add(x=kept, y=grow_e)), step=np.int32(1))
            indices = mb.add(x=lo, y=mb.sub(x=i, y=mb.mul(x=mb.floor_div(x=i, y=kept), y=kept)))
        x = mb.gather(x=x, indices=indices, axis=a)
    return mb.identity(x=x, name=ctx.name())


def _padded(ctx: Ctx, x, pad, mode: str, value):
    """MIL's pad of x by ``pad`` ([begin, end] per dim, non-negative); a run-time constant value (MIL wants a
    constant) fills where a padded mask of ones is 0."""
    mode = "replicate" if mode == "edge" else mode
    if value is None or isinstance(value, (float, int, np.ndarray)):
        fill = np.asarray(value if value is not None else 0).reshape(-1)
        return _pad_op(ctx, x, pad, mode, fill[0] if fill.size else 0)
    y = _pad_op(ctx, x, pad, mode, 0)
    if mode != "constant":
        return y
    inside = ctx.mb.pad(x=ctx.mb.fill(shape=ctx.mb.shape(x=x), value=np.float32(1)), pad=pad, mode="constant",
                        constant_val=np.float32(0))
    value = ctx.mb.reshape(x=same_dtype(ctx, y, value)[1], shape=np.array([1] * x.rank, np.int32))
    return ctx.mb.select(cond=ctx.mb.cast(x=inside, dtype="bool"), a=y, b=value)


def _pad_op(ctx: Ctx, x, pad, mode: str, fill):
    """MIL's pad, which takes floats only: bools and int32 through ``float_moved`` (exact), the fill split alike."""
    if np_dtype(x).kind in "iu":
        fill = int(np.clip(int(fill), INT32.min, INT32.max))
    return float_moved(ctx, x, lambda v, k, **named: ctx.mb.pad(
        x=v, pad=pad, mode=mode, constant_val=np.float32(int32_piece(fill, k)) if k is not None else
        np_dtype(v).type(fill), **named), named=False)


def _pad_at_run_time(ctx: Ctx, x, pads, axes: list[int], mode: str, value):
    """Pads known at run time only: MIL's pad by the positive ones (in MIL's [begin, end] per dim order, 0 on
    the dims ``axes`` leaves out), then a slice cropping by the negative ones; wrap mode by ``_wrapped``."""
    k, rank = len(axes), x.rank
    where = {a: i for i, a in enumerate(axes)}
    if mode == "wrap":
        return _wrapped(ctx, x, [tuple(ctx.mb.gather(x=pads, indices=np.array([where[a] + j * k], np.int32), axis=0)
                                       for j in (0, 1)) if a in where else None for a in range(rank)])
    order = [p for a in range(rank) for p in ((where[a], where[a] + k) if a in where else (2 * k, 2 * k))]
    mil = ctx.mb.gather(x=ctx.mb.concat(values=[pads, np.zeros(1, np.int32)], axis=0),
                        indices=np.array(order, np.int32), axis=0)
    y = _padded(ctx, x, ctx.mb.maximum(x=mil, y=np.int32(0)), mode, value)
    crop = ctx.mb.maximum(x=ctx.mb.sub(x=np.int32(0), y=mil), y=np.int32(0))
    begin = ctx.mb.gather(x=crop, indices=np.arange(0, 2 * rank, 2, dtype=np.int32), axis=0)
    end = ctx.mb.sub(x=ctx.mb.shape(x=y), y=ctx.mb.gather(x=crop, indices=np.arange(1, 2 * rank, 2, dtype=np.int32),
                                                           axis=0))
    return ctx.mb.slice_by_index(x=y, begin=begin, end=end, name=ctx.name())


@op("Split")
def split(ctx: Ctx):
    """Several outputs: sizes from ``split`` (attribute before 13, input after), else equal parts
    (opset 18's ``num_outputs`` with a smaller last part)."""
    x = ctx.get(0)
    axis = ctx.attr("axis", 0) % x.rank
    sizes = ctx.attr("split") if ctx.opset < 13 else (
        ctx.const(1, "split") if len(ctx.node.input) > 1 and ctx.node.input[1] else None)
    count = ctx.attr("num_outputs") or len(ctx.node.output)
    n = x.shape[axis]
    if count == 1:  # MIL's split gives one var, not a list, for one part
        return ctx.mb.identity(x=x, name=ctx.name())
    if sizes is None and isinstance(n, (int, np.integer)):
        part = -(-int(n) // count)
        sizes = [part] * (count - 1) + [int(n) - part * (count - 1)]
    name = f"{ctx.name()}_split"
    if sizes is None:  # a flexible dim: equal parts
        return tuple(ctx.mb.split(x=x, num_splits=count, axis=axis, name=name))
    return tuple(ctx.mb.split(x=x, split_sizes=narrow(np.asarray(sizes)), axis=axis, name=name))


@op("Expand")
def expand(ctx: Ctx):
    """Broadcast to ``shape``: expand_dims to the output rank, then tile the dims that are 1."""
    x, shape = ctx.get(0), ctx.get(1, raw=True)
    if not isinstance(shape, np.ndarray) or not _static([_py_int(d) for d in shape]):
        return _expand_at_run_time(ctx, x, shape)
    shape = [int(d) for d in shape]
    rank = max(x.rank, len(shape))
    if x.rank < rank:
        x = ctx.mb.expand_dims(x=x, axes=list(range(rank - x.rank)))
    shape = [1] * (rank - len(shape)) + shape
    reps = []
    for d, s in zip(x.shape, shape):
        if not isinstance(d, (int, np.integer)) and s != 1:
            ctx.refuse(f"expanding the flexible dim of {list(x.shape)} to {s} is not lowered")
        reps.append(s if d == 1 else 1)
    if all(r == 1 for r in reps):
        return ctx.mb.identity(x=x, name=ctx.name())
    return ctx.mb.tile(x=x, reps=np.array(reps, np.int32), name=ctx.name())


def _expand_at_run_time(ctx: Ctx, x, shape):
    """Expand to a shape known at run time only (flexible sizes, or computed from data): x plus zeros of that
    shape, which broadcasts both ways as ONNX's Expand (booleans go through int32)."""
    if isinstance(shape, np.ndarray):
        shape = runtime_shape(ctx, np.array([_py_int(d) for d in shape], dtype=object))
    elif np_dtype(shape) != np.int32:
        shape = ctx.mb.cast(x=shape, dtype="int32")
    x = narrow(x) if isinstance(x, np.ndarray) else x
    boolean = np_dtype(x) == np.bool_
    x = (x.astype(np.int32) if isinstance(x, np.ndarray) else ctx.mb.cast(x=x, dtype="int32")) if boolean else x
    y = ctx.mb.add(x=x, y=ctx.mb.fill(shape=shape, value=np.zeros((), np_dtype(x))))
    return ctx.mb.cast(x=y, dtype="bool", name=ctx.name()) if boolean else ctx.mb.identity(x=y, name=ctx.name())


@op("ConstantOfShape")
def constant_of_shape(ctx: Ctx):
    """Reached only with flexible sizes in the shape (static ones are folded): a fill computed at run time."""
    from onnx import numpy_helper

    value = ctx.attr("value")
    value = np.zeros(1, np.float32) if value is None else narrow(numpy_helper.to_array(value))
    return ctx.mb.fill(shape=ctx.get(0), value=value.reshape(-1)[0], name=ctx.name())


@op("Range")
def range_(ctx: Ctx):
    """Reached only when a bound is known at run time only (e.g. a flexible sequence length)."""
    start, limit, delta = same_dtype(ctx, ctx.get(0), ctx.get(1), ctx.get(2))
    return ctx.mb.range_1d(start=start, end=limit, step=delta, name=ctx.name())


@op("Tile")
def tile(ctx: Ctx):
    reps = ctx.get(1)
    return ctx.mb.tile(x=ctx.get(0), reps=narrow(reps) if isinstance(reps, np.ndarray) else _int32(ctx, reps),
                       name=ctx.name())


@op("CumSum")
def cumsum(ctx: Ctx):
    """MIL's cumsum has ONNX's ``exclusive`` and ``reverse``; the axis must be a constant."""
    x, axis = ctx.get(0), ctx.const(1, "axis")
    if axis is None or axis.dtype == object:
        ctx.refuse("its axis must be a constant for Core ML")
    return ctx.mb.cumsum(x=x, axis=int(axis.reshape(-1)[0]) % len(x.shape), exclusive=bool(ctx.attr("exclusive", 0)),
                         reverse=bool(ctx.attr("reverse", 0)), name=ctx.name())


@op("GatherElements")
def gather_elements(ctx: Ctx):
    """MIL's gather_along_axis; it wants x's sizes off the axis, so x is cut to smaller static index sizes."""
    x = ctx.get(0)
    x = narrow(x) if isinstance(x, np.ndarray) else x
    axis = ctx.attr("axis", 0) % len(x.shape)
    indices = _nonnegative(ctx, x, ctx.get(1), axis)
    ends = [i if a != axis and _static([d, i]) and i < d else 0 for a, (d, i) in enumerate(zip(x.shape, indices.shape))]
    if any(ends):
        x = ctx.mb.slice_by_index(x=x, begin=np.zeros(len(ends), np.int32), end=np.array(ends, np.int32),
                                  end_mask=[e == 0 for e in ends])
    return moved(ctx, x, lambda v, **named: ctx.mb.gather_along_axis(x=v, indices=indices, axis=axis, **named))


@op("Trilu")
def trilu(ctx: Ctx):
    """x where the last two axes' (row i, column j) keep j - i >= k (upper) or j - i <= k (lower), else 0:
    a constant mask for static sizes, else one from ``band_part`` over ones of x's run-time shape."""
    x, k = ctx.get(0), ctx.get(1, raw=True) if len(ctx.node.input) > 1 and ctx.node.input[1] else np.zeros(1)
    if not isinstance(k, np.ndarray) or k.dtype == object:
        return _trilu_at_run_time(ctx, x, _int32(ctx, ctx.get(1)))
    k, upper = int(np.clip(k.reshape(-1)[0], INT32.min + 1, INT32.max - 1)), bool(ctx.attr("upper", 1))
    zero = np.zeros((), np_dtype(x))
    rows, cols = x.shape[-2:]
    if _static([rows, cols]):
        fn = np.triu if upper else np.tril
        keep = fn(np.ones((int(rows), int(cols)), np.bool_), k)
        return ctx.mb.select(cond=keep, a=x, b=zero, name=ctx.name())
    # band_part(ones, lower, upper) keeps i - j <= lower and j - i <= upper (-1: no bound)
    if upper:
        band, kept = ((-k, -1), True) if k <= 0 else ((-1, k - 1), False)
    else:
        band, kept = ((-1, k), True) if k >= 0 else ((-k - 1, -1), False)
    last_two = ctx.mb.slice_by_index(x=ctx.mb.shape(x=x), begin=np.array([len(x.shape) - 2], np.int32),
                                     end=np.array([len(x.shape)], np.int32))
    ones = ctx.mb.fill(shape=last_two, value=np.float32(1))
    mask = ctx.mb.cast(x=ctx.mb.band_part(x=ones, lower=np.int32(band[0]), upper=np.int32(band[1])), dtype="bool")
    return ctx.mb.select(cond=mask, a=x, b=zero, name=ctx.name()) if kept else \
        ctx.mb.select(cond=mask, a=zero, b=x, name=ctx.name())


def _trilu_at_run_time(ctx: Ctx, x, k):
    """Trilu with k known at run time only: x where column - row (a constant for static sizes, else from
    ``range_1d`` over x's run-time shape) is >= k (upper) or <= k (lower), else 0."""
    rows, cols = x.shape[-2:]
    if _static([rows, cols]):
        offsets = (np.arange(int(cols))[None, :] - np.arange(int(rows))[:, None]).astype(np.int32)
    else:
        dims = ctx.mb.shape(x=x)
        size = [ctx.mb.gather(x=dims, indices=np.int32(x.rank + i), axis=0) for i in (-2, -1)]
        row, col = (ctx.mb.range_1d(start=np.int32(0), end=s, step=np.int32(1)) for s in size)
        offsets = ctx.mb.sub(x=ctx.mb.expand_dims(x=col, axes=[0]), y=ctx.mb.expand_dims(x=row, axes=[1]))
    k = ctx.mb.reshape(x=k, shape=np.array([1, 1], np.int32))
    keep = (ctx.mb.greater_equal if ctx.attr("upper", 1) else ctx.mb.less_equal)(x=offsets, y=k)
    return ctx.mb.select(cond=keep, a=x, b=np.zeros((), np_dtype(x)), name=ctx.name())


@op("Shape")
def shape_of_shape_value(ctx: Ctx):
    """Reached only for a folded shape value that holds flexible sizes, e.g. torch's Shape of a Reshape of a
    Shape chain (a var's Shape is folded, its flexible dims read back at run time by ``runtime_shape``): that
    value's own shape is static."""
    dims = np.array(ctx.const(0, "input").shape, np.int64)
    return dims[slice(ctx.attr("start", 0), ctx.attr("end", len(dims)))]
