"""Rank rules: Core ML and QNN tensors have rank <= 5; rewrite higher-rank data movement exactly.

Swin's window partition and reverse (``x.view(B, H//w, w, W//w, w, C)
.permute(0, 1, 3, 2, 4, 5).reshape(-1, w, w, C)``) export as Reshape to rank 6, Transpose, Reshape back: the
dims a permutation keeps together and in order (here B with H//w, and w with C) move as one, so the same data
movement is a Reshape to the merged dims, a Transpose of those, and the final Reshape."""
from __future__ import annotations

import numpy as np
from onnx import helper

from onnxbridge.legalize import Graph, Match, Rule

MAX_RANK = 5  # Core ML's tensor rank limit


def merge_runs(shape: list[int], perm: list[int]) -> tuple[list[int], list[int]]:
    """``(shape, perm)`` with size-1 dims dropped and the dims that stay adjacent and in order under ``perm``
    merged: transposing a tensor of the merged shape by the merged perm moves every element where ``perm`` would."""
    kept = [a for a in perm if shape[a] != 1]
    runs: list[list[int]] = []  # runs of input axes, in output order
    for a in kept:
        prev = runs[-1][-1] if runs else None
        if prev is not None and a > prev and all(d == 1 for d in shape[prev + 1:a]):
            runs[-1].append(a)
        else:
            runs.append([a])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # the runs in input order
    merged = [int(np.prod([shape[a] for a in runs[r]])) for r in order]
    return merged, [order.index(r) for r in range(len(runs))]


def rank6_pattern(graph: Graph, node) -> Match | None:
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


def rank6_condition(graph: Graph, match: Match) -> bool:
    """Static non-empty shapes (a 0 in a Reshape's shape would copy a dim), a transposed rank over Core ML's limit,
    and a merged rank and final rank within it."""
    inner, transpose, root = match.nodes
    shape, out = graph.shape(inner.output[0]), graph.shape(root.output[0])
    if shape is None or out is None or 0 in shape or 0 in out or len(shape) <= MAX_RANK or len(out) > MAX_RANK:
        return False
    merged, _ = merge_runs(shape, _perm(transpose, len(shape)))
    return 1 <= len(merged) <= MAX_RANK


def rank6_replacement(graph: Graph, match: Match) -> list:
    """Reshape to the merged dims, Transpose by the merged perm, Reshape to the final (static) shape."""
    inner, transpose, root = match.nodes
    shape = graph.shape(inner.output[0])
    merged, perm = merge_runs(shape, _perm(transpose, len(shape)))
    base = root.name or "window"
    folded, moved = graph.fresh(f"{base}_merged"), graph.fresh(f"{base}_moved")
    return [
        helper.make_node("Reshape", [match.inputs["x"], graph.constant(f"{base}_shape", np.array(merged, np.int64))],
                         [folded], name=graph.fresh(f"{base}_reshape")),
        helper.make_node("Transpose", [folded], [moved], perm=perm, name=graph.fresh(f"{base}_transpose")),
        helper.make_node("Reshape", [moved, graph.constant(f"{base}_out", np.array(graph.shape(root.output[0]),
                                                                                  np.int64))],
                         match.outputs, name=graph.fresh(base)),
    ]


RANK6_TRANSPOSE = Rule("rank6-reshape-transpose-to-rank5", rank6_pattern, rank6_condition, rank6_replacement)
