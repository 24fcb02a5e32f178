"""Host-evaluator kernels for the MIL ops that select elements by value: topk, argsort, non_zero,
non_maximum_suppression.

Where MIL's documentation leaves a choice open, these take ONNX's (so the host check judges the lowering, not an
invented runtime): ties in topk, argsort and NMS go to the lower index; NMS takes boxes in score order and drops a
box whose IoU with a kept one is over the threshold, computing corners from centres and sizes in the boxes' dtype as
onnxruntime does for centre boxes; padding is index -1, zero boxes and scores."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.evaluate import _s, kernel
from onnxbridge.backends.coreml.gaps import EvaluatorGap


@kernel("topk")
def topk(x, k=1, axis=-1, ascending=False, sort=True, return_indices=True, output_indices_dtype="int32", **_):
    """The k largest (smallest when ``ascending``) along ``axis``, sorted, ties to the lower index; k=-1: all."""
    axis = int(_s(axis)) % x.ndim
    k = int(_s(k))
    k = x.shape[axis] if k == -1 else k
    keys = x.astype(np.float64) if x.dtype.kind in "iu" else x
    order = np.argsort(keys if _s(ascending) else -keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, indices, axis=axis)
    if not _s(return_indices):
        return values
    return values, indices.astype(np.uint16 if str(_s(output_indices_dtype)) == "uint16" else np.int32)


@kernel("argsort")
def argsort(x, axis=-1, ascending=False, **_):
    """The order that sorts ``axis`` (decreasing unless ``ascending``), ties to the lower index; int32."""
    keys = x.astype(np.float64) if x.dtype.kind in "iu" else x
    return np.argsort(keys if _s(ascending) else -keys, axis=int(_s(axis)), kind="stable").astype(np.int32)


@kernel("non_zero")
def non_zero(x, **_):
    """[N, rank] int32 coordinates of the non-zero elements, row-major."""
    return np.argwhere(x).astype(np.int32).reshape(-1, x.ndim)


def _corners(boxes: np.ndarray) -> tuple[np.ndarray, ...]:
    """(x1, y1, x2, y2) of [B, (x, y, width, height)] centre boxes, in their dtype."""
    cx, cy, w, h = (boxes[:, i] for i in range(4))
    two = boxes.dtype.type(2)
    return cx - w / two, cy - h / two, cx + w / two, cy + h / two


def _select(boxes: np.ndarray, scores: np.ndarray, iou: float, floor: float | None, max_boxes: int) -> list[int]:
    """Greedy NMS of one batch: indices kept, in the order kept."""
    candidates = np.flatnonzero(scores >= floor) if floor is not None else np.arange(len(scores))
    order = candidates[np.argsort(-scores[candidates], kind="stable")]
    x1, y1, x2, y2 = _corners(boxes)
    zero, limit = boxes.dtype.type(0), boxes.dtype.type(iou)
    area = (x2 - x1) * (y2 - y1)
    kept: list[int] = []
    alive = np.ones(len(scores), bool)
    for i in order:
        if not alive[i]:
            continue
        kept.append(int(i))
        if len(kept) == max_boxes:
            break
        w = np.minimum(x2[i], x2) - np.maximum(x1[i], x1)
        h = np.minimum(y2[i], y2) - np.maximum(y1[i], y1)
        inter = np.where((w > zero) & (h > zero), w * h, zero)
        union = area[i] + area - inter
        with np.errstate(all="ignore"):
            over = (inter > zero) & (area[i] > zero) & (area > zero) & (union > zero) & (inter / union > limit)
        alive &= ~over
    return kept


@kernel("non_maximum_suppression")
def non_maximum_suppression(boxes, scores, iou_threshold, max_boxes, score_threshold=None,
                            per_class_suppression=False, **_):
    """iOS 15's op (boxes [n, B, 4], scores [n, B, K], a score threshold, a count output) or iOS 17's (boxes
    [n, 4, B], scores [n, K, B], no threshold, no count). A box's score is its best class's."""
    if _s(per_class_suppression):
        raise EvaluatorGap("the host evaluator runs non_maximum_suppression without per-class suppression only")
    ios17 = score_threshold is None
    if ios17:
        boxes, scores = np.swapaxes(boxes, 1, 2), np.swapaxes(scores, 1, 2)
    n, m = boxes.shape[0], int(_s(max_boxes))
    out_boxes = np.zeros((n, m, 4), boxes.dtype)
    out_scores = np.zeros((n, m, scores.shape[2]), scores.dtype)
    out_indices = np.full((n, m), -1, np.int32)
    counts = np.zeros(n, np.int32)
    floor = None if ios17 else float(_s(score_threshold))
    for b in range(n):
        kept = _select(boxes[b], scores[b].max(axis=1), float(_s(iou_threshold)), floor, m)
        counts[b] = len(kept)
        out_boxes[b, :len(kept)], out_scores[b, :len(kept)], out_indices[b, :len(kept)] = \
            boxes[b][kept], scores[b][kept], kept
    if ios17:
        return np.swapaxes(out_boxes, 1, 2), np.swapaxes(out_scores, 1, 2), out_indices
    return out_boxes, out_scores, out_indices, counts
