"""The adapter table: one up and/or down rewrite per (op, schema version).

A step ``(op, v)`` is the move between ``op``'s previous schema version and ``v``. ``up`` turns a
node valid before ``v`` into one valid at ``v``; ``down`` does the reverse. A rewrite either edits the
node in place and returns None, or returns the nodes that replace it (valid at opset ``v`` going up,
at ``v - 1`` going down; the engine carries them on to the target). Special steps:

- ``down`` at an op's first version expresses the op below it (a decomposition);
- ``up`` at the version where an op is deprecated (Upsample 10, Scatter 11) replaces it.

Steps with no entry are type-only when the signature is unchanged (checked against the schema's
type constraints going down) and are refused otherwise.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from onnxbridge.optable import OpTable

if TYPE_CHECKING:
    import onnx

    from onnxbridge.adapters.rewriter import Rewriter

Rewrite = Callable[["onnx.NodeProto", "Rewriter"], "list[onnx.NodeProto] | None"]

UP: OpTable[tuple[str, int]] = OpTable("up rewrite")
DOWN: OpTable[tuple[str, int]] = OpTable("down rewrite")


def _steps(ops: str | Iterable[str], version: int) -> list[tuple[str, int]]:
    return [(op, version) for op in ([ops] if isinstance(ops, str) else ops)]


def up(ops: str | Iterable[str], version: int) -> Callable[[Rewrite], Rewrite]:
    """Register the rewrite that moves ``ops`` up to schema ``version``."""
    return UP.register(*_steps(ops, version))


def down(ops: str | Iterable[str], version: int) -> Callable[[Rewrite], Rewrite]:
    """Register the rewrite that moves ``ops`` from schema ``version`` down to the one before."""
    return DOWN.register(*_steps(ops, version))


def load_rules() -> None:
    """Import every rule module (they register themselves)."""
    from onnxbridge.adapters import rules  # noqa: F401
