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
        """Show ``text`` while the block runs; the run's time budget names it if it runs out there."""
        from onnxbridge import deadline

        deadline.check()
        with deadline.doing(text):
            if not self.enabled:
                yield
                return
            from onnxbridge.renderers.text import console_markup

            shown = console_markup(text)  # titles hold file names: never markup, never terminal controls
            t0 = time.perf_counter()
            with self.console.status(f"{shown}..."):
                yield
        self.console.print(f"[green]done[/] {shown} [dim]({time.perf_counter() - t0:.1f}s)[/]")
