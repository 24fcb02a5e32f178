"""The localization contract: what each side of a hop must offer so the first diverging node can be found.

A hop compares a reference with a candidate. To localize, both sides are wrapped as ``Probe``s that can show some
intermediate tensors, keyed by the **reference ONNX graph's tensor names**; ``Checkpoint``s list, in topological
order of that graph, the tensors both sides can show (with the node that makes each and, where known, the
framework-side name). ``onnxbridge.localize.bisect.localize`` then asks for a few tensors at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Checkpoint:
    """One tensor of the reference ONNX graph that both sides can show.

    ``tensor``: its ONNX name; ``node``/``op``: the ONNX node that makes it and its op_type; ``inputs``: that node's
    input tensors that are themselves checkpoints or graph inputs (for ``inputs_ok``); ``source``: the
    framework-side name where known (torch module path, Keras layer, Paddle op, MIL op), else None.
    """

    tensor: str
    node: str
    op: str
    inputs: tuple[str, ...] = ()
    source: str | None = None


@runtime_checkable
class Probe(Protocol):
    """One side of a hop that can show intermediate tensors.

    ``what``: what runs, in words (e.g. "onnxruntime on prefix models of model.onnx"); ``runs``: how many times
    this side has been run so far (the count the report gives). ``tensors`` runs the side once on ``feeds`` and
    returns the asked tensors (by checkpoint tensor name) and nothing else; a side may cut its model at the asked
    tensors (prefix models) rather than keep every intermediate alive.
    """

    what: str
    runs: int

    def tensors(self, names: Sequence[str], feeds: Mapping[str, "np.ndarray"]) -> dict[str, "np.ndarray"]: ...


@dataclass
class Sides:
    """What one side of a hop offers for localization: a ``probe``, the ``checkpoints`` it can show (topological
    order of the reference ONNX graph) and ``method``: how the match was made, in words (e.g. "torch forward hooks
    matched to ONNX nodes through the dynamo exporter's name scopes"), or why it is partial."""

    probe: Probe
    checkpoints: list[Checkpoint]
    method: str
