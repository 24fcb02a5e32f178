"""Pick an executor by name: ``local`` (a process per cell on this machine) or ``ray`` (cells as Ray tasks)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    from onnxbridge.matrix.cells import Cell

KINDS = ("local", "ray")


class Executor(Protocol):
    """Runs cells, each in a process of its own, into ``OUTDIR/<cell.name>/``; ``done(record)`` per cell."""

    kind: str

    def describe(self) -> dict: ...

    def run(self, cells: Sequence[Cell], outdir: Path, done: Callable[[dict], None], *,
            started: Callable[[Cell], None] | None = None, timeout: float | None = None) -> None: ...


def make_executor(kind: str, *, workers: int | None = None, ray_address: str | None = None) -> Executor:
    """The executor named ``kind``. BadInputError for another name, or an address for the local one;
    UnavailableError where Ray is not installed."""
    if kind == "local":
        if ray_address:
            raise BadInputError("--ray-address needs --executor ray")
        from onnxbridge.matrix.local import LocalExecutor

        return LocalExecutor(workers)
    if kind == "ray":
        from onnxbridge.matrix.ray_executor import RayExecutor

        return RayExecutor(workers, ray_address)
    raise BadInputError(f"unknown executor '{kind}'; known: {', '.join(KINDS)}")
