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

if TYPE_CHECKING:
    import onnx

    from onnxbridge.adapters.rewriter import Rewriter

Rewrite = Callable[["onnx.NodeProto", "Rewriter"], "list[onnx.NodeProto] | None"]

UP: dict[tuple[str, int], Rewrite] = {}
DOWN: dict[tuple[str, int], Rewrite] = {}


def _register(table: dict, ops: str | Iterable[str], version: int):
    names = [ops] if isinstance(ops, str) else list(ops)

    def deco(fn: Rewrite) -> Rewrite:
        for op in names:
            key = (op, version)
            if key in table:
                raise ValueError(f"two rewrites for {key}")
            table[key] = fn
        return fn

    return deco


def up(ops: str | Iterable[str], version: int):
    """Register the rewrite that moves ``ops`` up to schema ``version``."""
    return _register(UP, ops, version)


def down(ops: str | Iterable[str], version: int):
    """Register the rewrite that moves ``ops`` from schema ``version`` down to the one before."""
    return _register(DOWN, ops, version)


def load_rules() -> None:
    """Import every rule module (they register themselves)."""
    from onnxbridge.adapters import rules  # noqa: F401
