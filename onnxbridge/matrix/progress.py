"""Progress of a matrix run: a rich bar on a terminal (cells done/total, running, failed), else one plain line per
finished cell on stderr. Executors report from their threads: every method takes a lock."""
from __future__ import annotations

import sys
import threading
from typing import IO, Any

from onnxbridge.matrix.outputs import worst_text
from onnxbridge.renderers.text import printable

_NOT_PASSED = ("failed", "error")


def _name(cell: Any) -> str:
    return cell["name"] if isinstance(cell, dict) else cell.name


class MatrixProgress:
    """``with MatrixProgress(len(cells), enabled) as p:`` then ``p.started(cell)`` when a cell begins and
    ``p.finished(record)`` when its record is in (cached cells may skip ``started``). ``enabled``: the rich bar
    (None: when stderr is a terminal); otherwise plain lines go to ``stream`` (stderr by default). ``silent``: neither
    (the Python API's default, the CLI's --quiet); the counts are kept all the same."""

    def __init__(self, total: int, enabled: bool | None = None, *, stream: IO[str] | None = None,
                 silent: bool = False):
        self.total = total
        self.stream = stream
        self.silent = silent
        self.enabled = not silent and ((stream or sys.stderr).isatty() if enabled is None else enabled)
        self.done = self.failed = 0
        self.counts: dict[str, int] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._bar = self._task = None

    @property
    def running(self) -> int:
        return len(self._running)

    def __enter__(self) -> MatrixProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self.stream, stderr=self.stream is None)
            self._bar = Progress(TextColumn("[bold]matrix"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("cells · [cyan]{task.fields[running]} running[/] · "
                                            "[red]{task.fields[failed]} failed[/]"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
            self._bar.start()
            self._task = self._bar.add_task("matrix", total=self.total, running=0, failed=0)
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    def started(self, cell: Any) -> None:
        """A cell began running (a Cell, or a record dict)."""
        with self._lock:
            self._running.add(_name(cell))
            self._refresh()

    def finished(self, record: dict) -> None:
        """A cell's record is in: count it and, without the bar, print its line."""
        with self._lock:
            self._running.discard(record["name"])
            self.done += 1
            status = record.get("status", "error")
            self.counts[status] = self.counts.get(status, 0) + 1
            self.failed += status in _NOT_PASSED
            line = self.line(record)
            if self._bar is not None:
                self._refresh(advance=1)
                if status != "passed":  # above the bar: what a person watching wants to read now
                    colour = {"failed": "red", "error": "red", "skipped": "dim"}.get(status, "white")
                    self._bar.console.print(line, style=colour, markup=False, highlight=False)
            elif not self.silent:
                out = self.stream or sys.stderr
                out.write(line + "\n")
                out.flush()

    def line(self, record: dict) -> str:
        """``[3/16] passed  cnn/onnx-fp32-opset17  1.2 s  max abs 1.2e-06 (cached)``, and the reason if any."""
        width = len(str(self.total))
        seconds = record.get("seconds")
        parts = [f"[{self.done:>{width}}/{self.total}] {record.get('status', 'error'):7s} {record['name']}"]
        if seconds is not None:
            parts.append(f"{float(seconds):.1f} s")
        worst = worst_text(record.get("worst"))
        if worst:
            parts.append(worst)
        if record.get("cached"):
            parts.append("(cached)")
        if record.get("reason"):
            parts.append(f"- {' '.join(str(record['reason']).split())[:300]}")
        return printable("  ".join(parts))  # names and crash messages: control characters shown, never sent

    def _refresh(self, advance: int = 0) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=advance, running=self.running, failed=self.failed)
