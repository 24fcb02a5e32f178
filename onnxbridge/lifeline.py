"""Child processes never outlive the run that started them: a killed ``convert`` (SIGKILL, SIGTERM, ``timeout``, a
killed matrix driver) takes its worker and converter processes with it, so nothing of it keeps spinning, holds
memory, or places a file later.

On Linux the kernel's parent-death signal does it (``PR_SET_PDEATHSIG``), whatever the child is doing; it follows
the thread that started the child, so a long-lived child asks for it only when its parent started it from the main
thread. The worker adds a watchdog thread (``onnxbridge.worker``) for the rest.
"""
from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (thread) ends; a no-op off Linux."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def run(args: list[str], *, step: str, timeout: float | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` for a child that works for this run: it dies with this process and gets at most the time
    left of the run's budget (then TimedOut naming ``step``); ``timeout``: its own limit, if shorter (then
    ``subprocess.TimeoutExpired``, as subprocess.run raises)."""
    from onnxbridge import deadline

    left = deadline.remaining()
    own = timeout is not None and (left is None or timeout <= left)
    with deadline.doing(step):
        try:
            return subprocess.run(args, preexec_fn=die_with_parent, timeout=timeout if own else left, **kwargs)
        except subprocess.TimeoutExpired:
            if own:
                raise
            raise deadline.expired(step) from None

