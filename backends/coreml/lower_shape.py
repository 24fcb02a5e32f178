"""Core ML lowerings: shape, indexing and data-movement ops."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import Ctx, INT32, _axes, _static, narrow, np_dtype, op, runtime_shape, same_dtype


@op("Flatten")
def flatten(ctx: Ctx):
    x = ctx.get(0)
    axis = ctx.attr("axis", 1) % max(x.rank, 1)
    if _static(x.shape[:axis]):
        shape = [int(np.prod(x.shape[:axis])) if axis else 1, -1]
    elif _static(x.shape[axis:]):
        shape = [-1, int(np.prod(x.shape[axis:]))]
    else:
        ctx.refuse(f"flattening shape {list(x.shape)} needs the dims on one side of axis {axis} to be static")
    return ctx.mb.reshape(x=x, shape=np.array(shape, np.int32), name=ctx.name())


@op("Reshape")
def reshape(ctx: Ctx):
    x, shape = ctx.get(0), ctx.const(1, "shape")
    if ctx.attr("allowzero", 0) and 0 in shape:
        ctx.refuse("allowzero=1 with a 0 in the shape has no Core ML equivalent")
    dims = [x.shape[i] if _py_int(d) == 0 else _py_int(d) for i, d in enumerate(shape)]  # ONNX 0: copy that dim
    unknown = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    if not unknown:
        return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())
    if len(unknown) == 1 and -1 not in dims:  # one flexible size: let reshape infer it
        dims[unknown[0]] = -1
        return ctx.mb.reshape(x=x, shape=np.array(dims, np.int32), name=ctx.name())
    return ctx.mb.reshape(x=x, shape=runtime_shape(ctx, np.array(dims, dtype=object)), name=ctx.name())


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
    indices = _nonnegative(ctx, x, ctx.get(1), axis)
    if isinstance(x, np.ndarray):  # a constant table (embeddings) looked up at run time
        x = narrow(x)
    return ctx.mb.gather(x=x, indices=indices, axis=axis, name=ctx.name())


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
        return ctx.mb.gather_nd(x=x, indices=narrow(np.where(indices < 0, indices + sizes, indices)),
                                name=ctx.name())
    indices = indices if np_dtype(indices) == np.int32 else ctx.mb.cast(x=indices, dtype="int32")
    sizes = np.array(dims, np.int32) if _static(dims) else ctx.mb.slice_by_index(
        x=ctx.mb.shape(x=x), begin=np.array([0], np.int32), end=np.array([depth], np.int32))
    fixed = ctx.mb.select(cond=ctx.mb.less(x=indices, y=np.int32(0)), a=ctx.mb.add(x=indices, y=sizes), b=indices)
    return ctx.mb.gather_nd(x=x, indices=fixed, name=ctx.name())


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
        starts, ends = ctx.const(1, "starts").tolist(), ctx.const(2, "ends").tolist()
        axes = ctx.const(3, "axes").tolist() if len(ctx.node.input) > 3 and ctx.node.input[3] else None
        steps = ctx.const(4, "steps").tolist() if len(ctx.node.input) > 4 and ctx.node.input[4] else None
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


def _saturate(index: int) -> int:
    """An ONNX slice index as int32 (INT64_MIN/MAX mean "from the start"/"to the end" and stay so)."""
    return int(min(max(index, INT32.min), INT32.max))


def _clamp(index: int, n: int) -> int:
    return int(min(max(index + n if index < 0 else index, 0), n))


@op("Pad")
def pad(ctx: Ctx):
    """Constant/reflect/edge; opset 18's ``axes`` expanded to every dim; negative pads crop (a slice after)."""
    x = ctx.get(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        ctx.refuse(f"mode={mode} has no Core ML equivalent")
    pads = ctx.attr("pads") if ctx.opset < 11 else ctx.const(1, "pads").tolist()
    value = ctx.attr("value", 0.0) if ctx.opset < 11 else (ctx.const(2, "constant_value") if len(ctx.node.input) > 2
                                                            and ctx.node.input[2] else 0.0)
    rank = x.rank
    axes = ctx.const(3, "axes").tolist() if len(ctx.node.input) > 3 and ctx.node.input[3] else list(range(rank))
    begins, ends = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begins[a % rank], ends[a % rank] = int(pads[k]), int(pads[k + len(axes)])
    y = x
    if any(p > 0 for p in begins + ends):
        mil = [max(v, 0) for i in range(rank) for v in (begins[i], ends[i])]
        y = ctx.mb.pad(x=x, pad=np.array(mil, np.int32), mode="replicate" if mode == "edge" else mode,
                       constant_val=float(np.asarray(value).reshape(-1)[0]) if np.size(value) else 0.0)
    if any(p < 0 for p in begins + ends):
        if not _static([y.shape[i] for i in range(rank) if ends[i] < 0]):
            ctx.refuse("negative pads (cropping) at the end of a flexible dim are not lowered")
        stop = [int(y.shape[i]) + ends[i] if ends[i] < 0 else 0 for i in range(rank)]
        y = ctx.mb.slice_by_index(x=y, begin=np.array([max(-b, 0) for b in begins], np.int32),
                                  end=np.array(stop, np.int32), end_mask=[e >= 0 for e in ends])
    return ctx.mb.identity(x=y, name=ctx.name())


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
    return ctx.mb.tile(x=ctx.get(0), reps=narrow(ctx.const(1, "repeats")), name=ctx.name())


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
    return ctx.mb.gather_along_axis(x=x, indices=indices, axis=axis, name=ctx.name())


@op("Trilu")
def trilu(ctx: Ctx):
    """x where the last two axes' (row i, column j) keep j - i >= k (upper) or j - i <= k (lower), else 0:
    a constant mask for static sizes, else one from ``band_part`` over ones of x's run-time shape."""
    x, k = ctx.get(0), ctx.const(1, "k") if len(ctx.node.input) > 1 and ctx.node.input[1] else np.zeros(1)
    if k.dtype == object:
        ctx.refuse("its k must be a constant for Core ML")
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


@op("Shape")
def shape_of_shape_value(ctx: Ctx):
    """Reached only for a folded shape value that holds flexible sizes, e.g. torch's Shape of a Reshape of a
    Shape chain (a var's Shape is folded, its flexible dims read back at run time by ``runtime_shape``): that
    value's own shape is static."""
    dims = np.array(ctx.const(0, "input").shape, np.int64)
    return dims[slice(ctx.attr("start", 0), ctx.attr("end", len(dims)))]
