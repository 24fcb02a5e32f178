"""Progress for long steps (rich), silent when output is not a terminal or when asked."""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator


class Progress:
    """``with progress.step("Exporting"):`` shows a spinner, then a line with the elapsed time."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._console = None

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        t0 = time.perf_counter()
        with self.console.status(f"{text}..."):
            yield
        self.console.print(f"[green]done[/] {text} [dim]({time.perf_counter() - t0:.1f}s)[/]")
