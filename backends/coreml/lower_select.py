"""Core ML lowerings: ops that select elements by value (TopK, NonZero, NonMaxSuppression), onto MIL's ``topk``,
``non_zero`` and ``non_maximum_suppression``; their outputs may have sizes known only at run time."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.bounds import upper_bound
from onnxbridge.backends.coreml.lower import FP16_MAX, TARGETS, Ctx, _static, narrow, np_dtype, op
from onnxbridge.backends.coreml.lower_shape import _int32

FP32_MAX = float(np.finfo(np.float32).max)
MAX_PADDED = 1 << 16  # boxes MIL's NMS outputs are padded to, at most


def _constant_int(ctx: Ctx, i: int, what: str, default: int) -> int:
    """Optional input ``i``: a constant integer (one element), ``default`` when absent."""
    if len(ctx.node.input) <= i or not ctx.node.input[i]:
        return default
    value = ctx.const(i, what)
    if value.dtype == object or value.size != 1:
        ctx.refuse(f"its {what} must be a constant for Core ML (it sets the output's size)")
    return int(value.reshape(-1)[0])


def _constant_float(ctx: Ctx, i: int, what: str) -> float | None:
    """Optional input ``i``: a constant float (one element), None when absent."""
    if len(ctx.node.input) <= i or not ctx.node.input[i]:
        return None
    value = ctx.const(i, what)
    if value.dtype == object or value.size != 1:
        ctx.refuse(f"its {what} must be a constant for Core ML")
    return float(value.reshape(-1)[0])


@op("TopK")
def topk(ctx: Ctx):
    """MIL's topk (sorted; ties: the lower index first, as ONNX) for a constant ``K``; a ``K`` known only at run
    time (``min(k, number of candidates)`` in detection heads) sorts the whole axis (``argsort``) and keeps the first
    K at run time. ``sorted=0`` leaves the order to the runtime in ONNX: the sorted order is one it allows."""
    x = ctx.get(0)
    if isinstance(x, np.ndarray):
        x = ctx.mb.const(val=narrow(x))
    if np_dtype(x).kind not in "fi":
        ctx.refuse(f"Core ML's topk takes numbers, not {np_dtype(x)}")
    axis = int(ctx.attr("axis", -1)) % x.rank
    n, largest = x.shape[axis], bool(ctx.attr("largest", 1))
    k = int(ctx.attr("k")) if ctx.opset < 10 else ctx.get(1, raw=True)
    if isinstance(k, np.ndarray) and k.dtype != object:
        k = int(k.reshape(-1)[0])
        if k < 1 or (_static([n]) and k > int(n)):
            ctx.refuse(f"K={k} over an axis of size {n}: Core ML's topk takes 1 <= K <= the axis' size")
        values, indices = ctx.mb.topk(x=x, k=np.int32(k), axis=np.int32(axis), ascending=not largest,
                                      name=ctx.name())
        return values, indices
    order = ctx.mb.argsort(x=x, axis=np.int32(axis), ascending=not largest)
    k = ctx.mb.maximum(x=ctx.mb.reshape(x=_int32(ctx, ctx.get(1)), shape=[1]), y=np.int32(0))  # ONNX's K >= 0
    end = ctx.mb.concat(values=[np.zeros(axis, np.int32), k, np.zeros(x.rank - axis - 1, np.int32)], axis=0)
    first = [a != axis for a in range(x.rank)]  # every other axis whole
    indices = ctx.mb.slice_by_index(x=order, begin=np.zeros(x.rank, np.int32), end=end, end_mask=first)
    return ctx.mb.gather_along_axis(x=x, indices=indices, axis=np.int32(axis), name=ctx.name()), indices


@op("NonZero")
def non_zero(ctx: Ctx):
    """MIL's non_zero ([N, rank], row-major order as ONNX's) transposed to ONNX's [rank, N]."""
    x = ctx.get(0)
    if isinstance(x, np.ndarray):
        x = ctx.mb.const(val=narrow(x))
    if x.rank == 0:
        ctx.refuse("NonZero of a scalar is not lowered (Core ML's non_zero takes tensors of rank >= 1)")
    if np_dtype(x) not in (np.float32, np.float16, np.int32, np.bool_):
        ctx.refuse(f"Core ML's non_zero does not take {np_dtype(x)}")
    return ctx.mb.transpose(x=ctx.mb.non_zero(x=x), perm=[1, 0], name=ctx.name())


@op("NonMaxSuppression")
def non_max_suppression(ctx: Ctx):
    """ONNX's per-batch, per-class greedy NMS as one MIL non_maximum_suppression over ``batch x classes`` rows (each
    row the batch's boxes with one class's scores), then the selected ``[batch, class, box]`` triples in ONNX's order
    (batch, class, then decreasing score) by ``non_zero`` over the rows' valid entries.

    The same selection as ONNX's: corner boxes go in as centres and sizes (ONNX takes any diagonal pair: sizes are
    absolute; the corners MIL works out again may differ from ONNX's by a rounding, which matters only for an IoU
    at the threshold to the last bit); ``score > score_threshold`` is ``score >=`` the next float above it (MIL keeps
    scores at the threshold); no threshold keeps every score above -FLT_MAX (MIL has no -inf); IoU > iou_threshold
    suppresses in both. MIL pads its outputs to a constant ``max_boxes``: ``max_output_boxes_per_class``, or the
    number of boxes where that is smaller (a number known only at run time: the most it can be, ``bounds``).
    """
    boxes, scores = ctx.get(0), ctx.get(1)
    boxes, scores = (ctx.mb.const(val=narrow(v)) if isinstance(v, np.ndarray) else v for v in (boxes, scores))
    if np_dtype(boxes).kind != "f" or np_dtype(scores).kind != "f":
        ctx.refuse("Core ML's non_maximum_suppression takes float boxes and scores")
    if boxes.rank != 3 or scores.rank != 3:
        ctx.refuse(f"boxes {list(boxes.shape)} and scores {list(scores.shape)} must be [batch, boxes, 4] and "
                   "[batch, classes, boxes]")
    limit = _constant_int(ctx, 2, "max_output_boxes_per_class", 0)
    iou = _constant_float(ctx, 3, "iou_threshold")
    threshold = _constant_float(ctx, 4, "score_threshold")
    if limit <= 0:
        ctx.refuse("max_output_boxes_per_class is 0: it selects nothing, and Core ML has no empty outputs")
    count, classes = boxes.shape[1], scores.shape[1]
    if not _static([classes]):
        ctx.refuse(f"a flexible number of classes ({classes}) is not lowered")
    bound = upper_bound(boxes, 1)  # the number of boxes, or the most it can be at run time
    if bound is not None and bound <= MAX_PADDED:
        max_boxes = min(limit, bound)
    elif limit <= MAX_PADDED:
        max_boxes = limit
    else:
        boxes_ = f"{count} boxes" if _static([count]) else "a number of boxes known only at run time " + (
            "(no bound known before)" if bound is None else f"(at most {bound})")
        ctx.refuse(f"max_output_boxes_per_class={limit} over {boxes_}: Core ML's "
                   "non_maximum_suppression pads its outputs to a constant number of boxes, the smaller of the two, "
                   f"which must be at most {MAX_PADDED}; give a smaller maximum or fewer boxes")
    mb, dtype = ctx.mb, np_dtype(scores)
    centred = _centred(ctx, boxes)
    if int(classes) > 1:  # each batch's boxes once per class
        centred = mb.tile(x=mb.expand_dims(x=centred, axes=[1]), reps=np.array([1, int(classes), 1, 1], np.int32))
    rows = mb.reshape(x=centred, shape=_rows_shape(ctx, boxes))
    row_scores = mb.expand_dims(x=mb.reshape(x=scores, shape=_rows_shape(ctx, boxes, last=None)), axes=[-1])
    lowest = -FP16_MAX if ctx.fp16 else -FP32_MAX  # MIL has no -inf threshold
    keep_from = lowest if threshold is None else float(
        np.nextafter(np.float16(threshold), np.float16(np.inf)) if ctx.fp16 else
        np.nextafter(np.float32(threshold), np.float32(np.inf)))
    iou = np.array(0.0 if iou is None else iou, dtype)
    if TARGETS.index(ctx.target) >= TARGETS.index("iOS17"):
        _, picked_scores, picked = mb.non_maximum_suppression(
            boxes=mb.transpose(x=rows, perm=[0, 2, 1]), scores=mb.transpose(x=row_scores, perm=[0, 2, 1]),
            iou_threshold=iou, max_boxes=np.int32(max_boxes))
        valid = mb.greater_equal(x=picked, y=np.int32(0))  # padding: -1
        if threshold is not None:  # no threshold in iOS 17's op: boxes under it come last, so drop them after
            above = mb.greater_equal(x=mb.squeeze(x=picked_scores, axes=[1]), y=np.array(keep_from, dtype))
            valid = mb.logical_and(x=valid, y=above)
    else:
        _, _, picked, counts = mb.non_maximum_suppression(
            boxes=rows, scores=row_scores, iou_threshold=iou, score_threshold=np.array(keep_from, dtype),
            max_boxes=np.int32(max_boxes))
        valid = mb.less(x=np.arange(max_boxes, dtype=np.int32)[None, :], y=mb.expand_dims(x=counts, axes=[1]))
    shape = np.array([-1, int(classes), max_boxes], np.int32)
    where = mb.non_zero(x=mb.reshape(x=valid, shape=shape))  # [selected, (batch, class, slot)]
    box = mb.gather_nd(x=mb.reshape(x=picked, shape=shape), indices=where)
    pair = mb.slice_by_index(x=where, begin=np.array([0, 0], np.int32), end=np.array([0, 2], np.int32),
                             end_mask=[True, False])
    return mb.concat(values=[pair, mb.expand_dims(x=box, axes=[1])], axis=1, name=ctx.name())


def _rows_shape(ctx: Ctx, boxes, last: int | None = 4):
    """[batch x classes, boxes(, last)] as a shape MIL's reshape takes: constants where the sizes are static,
    the number of boxes read at run time where it is flexible."""
    count = boxes.shape[1]
    tail = [] if last is None else [last]
    if _static([count]):
        return np.array([-1, int(count), *tail], np.int32)
    n = ctx.mb.slice_by_index(x=ctx.mb.shape(x=boxes), begin=np.array([1], np.int32), end=np.array([2], np.int32))
    return ctx.mb.concat(values=[np.array([-1], np.int32), n, *([np.array(tail, np.int32)] if tail else [])], axis=0)


def _centred(ctx: Ctx, boxes):
    """[batch, boxes, (x, y, width, height)] with (x, y) the centre, as MIL's NMS takes them: ONNX's
    center_point_box=1 is that already; its corners [y1, x1, y2, x2] (any diagonal pair) become centre and
    absolute sizes."""
    mb = ctx.mb
    if ctx.attr("center_point_box", 0):
        return boxes
    y1, x1, y2, x2 = mb.split(x=boxes, num_splits=4, axis=-1)
    half = np.array(0.5, np_dtype(boxes))
    return mb.concat(values=[mb.mul(x=mb.add(x=x1, y=x2), y=half), mb.mul(x=mb.add(x=y1, y=y2), y=half),
                             mb.abs(x=mb.sub(x=x2, y=x1)), mb.abs(x=mb.sub(x=y2, y=y1))], axis=-1)
