"""Rank rules for backends whose tensors have a rank limit (each passes its own to ``max_rank_rule``): rewrite
higher-rank data movement exactly.

Swin's window partition and reverse (``x.view(B, H//w, w, W//w, w, C)
.permute(0, 1, 3, 2, 4, 5).reshape(-1, w, w, C)``) export as Reshape to rank 6, Transpose, Reshape back: the
dims a permutation keeps together and in order (here B with H//w, and w with C) move as one, so the same data
movement is a Reshape to the merged dims, a Transpose of those, and the final Reshape. A dynamic batch (B read from
the input's shape at run time) is one unknown dim: it merges into a run whose size the Reshape infers (-1), and the
final Reshape keeps the model's own run-time shape."""
from __future__ import annotations

import functools

import numpy as np
from onnx import helper

from onnxbridge.legalize import Graph, Match, Rule


def merge_runs(shape: list, perm: list[int]) -> tuple[list, list[int]]:
    """``(shape, perm)`` with size-1 dims dropped and the dims that stay adjacent and in order under ``perm``
    merged: transposing a tensor of the merged shape by the merged perm moves every element where ``perm`` would.
    An unknown dim (None) is never dropped, and a run holding one has an unknown size."""
    kept = [a for a in perm if shape[a] != 1]
    runs: list[list[int]] = []  # runs of input axes, in output order
    for a in kept:
        prev = runs[-1][-1] if runs else None
        if prev is not None and a > prev and all(d == 1 for d in shape[prev + 1:a]):
            runs[-1].append(a)
        else:
            runs.append([a])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in input order
    merged = [None if any(shape[a] is None for a in runs[r]) else int(np.prod([shape[a] for a in runs[r]]))
              for r in order]
    return merged, [order.index(r) for r in range(len(runs))]


def reshape_transpose_pattern(graph: Graph, node) -> Match | None:
    """Reshape(Transpose(Reshape(x))), the inner Reshape and the Transpose used only there."""
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
        return None
    transpose = graph.produced_by(node.input[0], "Transpose")
    inner = graph.produced_by(transpose.input[0], "Reshape") if transpose is not None else None
    if inner is None:
        return None
    return Match([inner, transpose, node], {"x": inner.input[0]}, [node.output[0]])


def _perm(transpose, rank: int) -> list[int]:
    perm = next((list(a.ints) for a in transpose.attribute if a.name == "perm"), None)
    return perm if perm is not None else list(range(rank))[::-1]


def _dims(graph: Graph, reshape) -> list | None:
    """A Reshape's output dims: the inferred static shape, else its target shape with each dim positive or None
    (dynamic, or the -1 the Reshape infers); None when neither is known or a 0 copies a dim of the input."""
    static = graph.shape(reshape.output[0])
    if static is not None and 0 not in static:
        return static
    dims = graph.int_values(reshape.input[1])
    if dims is None or any(d is not None and (d == 0 or d < -1) for d in dims):
        return None
    return [None if d == -1 else d for d in dims]


def _final_shape(graph: Graph, root) -> str | list[int] | None:
    """What the final Reshape reshapes to: its static output shape, else the model's own shape tensor when no 0 in
    it copies a dim of the (now different) input; None when neither."""
    static = graph.shape(root.output[0])
    if static is not None and 0 not in static:
        return static
    dims = graph.int_values(root.input[1])
    return root.input[1] if dims is not None and 0 not in dims else None


def rank_condition(graph: Graph, match: Match, limit: int) -> bool:
    """Known shapes (one dynamic dim at most, which must land in a merged dim of its own run), a transposed rank
    over ``limit``, and a merged rank and final rank within it."""
    inner, transpose, root = match.nodes
    shape, out = _dims(graph, inner), _final_shape(graph, root)
    if shape is None or out is None or len(shape) <= limit or shape.count(None) > 1:
        return False
    if len(out if isinstance(out, list) else graph.int_values(out)) > limit:
        return False
    merged, _ = merge_runs(shape, _perm(transpose, len(shape)))
    return 1 <= len(merged) <= limit


def merged_replacement(graph: Graph, match: Match) -> list:
    """Reshape to the merged dims (-1 for the dynamic one), Transpose by the merged perm, the final Reshape."""
    inner, transpose, root = match.nodes
    shape, out = _dims(graph, inner), _final_shape(graph, root)
    merged, perm = merge_runs(shape, _perm(transpose, len(shape)))
    base = root.name or "window"
    folded, moved = graph.fresh(f"{base}_merged"), graph.fresh(f"{base}_moved")
    target = np.array([-1 if d is None else d for d in merged], np.int64)
    final = graph.constant(f"{base}_out", np.array(out, np.int64)) if isinstance(out, list) else out
    return [
        helper.make_node("Reshape", [match.inputs["x"], graph.constant(f"{base}_shape", target)], [folded],
                         name=graph.fresh(f"{base}_reshape")),
        helper.make_node("Transpose", [folded], [moved], perm=perm, name=graph.fresh(f"{base}_transpose")),
        helper.make_node("Reshape", [moved, final], match.outputs, name=graph.fresh(base)),
    ]


def max_rank_rule(limit: int) -> Rule:
    """The rule for a backend whose tensors have rank <= ``limit``: Reshape to a higher rank, Transpose, Reshape back
    within it, rewritten so that no tensor's rank exceeds ``limit`` (``rank6-reshape-transpose-to-rank5`` for 5)."""
    return Rule(f"rank{limit + 1}-reshape-transpose-to-rank{limit}", reshape_transpose_pattern,
                functools.partial(rank_condition, limit=limit), merged_replacement)
