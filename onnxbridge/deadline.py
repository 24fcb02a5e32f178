"""The run's time budget: a model that never finishes (a Loop of 10^15 iterations, a TFLite WHILE that never ends)
becomes a one-line error naming the step, exit 2, never a hang.

Every command and public API call runs within ``budget(seconds)`` (``--timeout``, ``timeout=``; default
``ONNXBRIDGE_TIMEOUT_S``, else ``DEFAULT_S``; 0 or "none" for no limit). Inside it:

- calls in the worker (onnxruntime, backends, TFLite) wait at most the time left (``remaining``), then the worker
  is stopped;
- child processes (paddle2onnx) get the time left as their timeout;
- Python code in this process (exports, reference runs) is interrupted by SIGALRM in the main thread. Native code
  that holds the interpreter lock is interrupted when it returns: such code runs in the worker.

``doing(step)`` names what runs now (progress steps and worker calls), so the error says where the time went.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, TypeVar

from onnxbridge.errors import BadInputError, TimedOut

ENV = "ONNXBRIDGE_TIMEOUT_S"
DEFAULT_S = 3600.0
HINT = f"give it more time with --timeout SECONDS, timeout= in Python, or {ENV}; 0 means no limit"

_state = threading.local()  # per thread: ``end`` (monotonic deadline or None), ``total`` (its seconds), ``steps``


def seconds(value: Any, what: str = "--timeout") -> float | None:
    """A time budget as given (seconds; 0, "none" or "off": no limit) as float seconds, None for no limit."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("none", "off", ""):
            return None
        try:
            value = float(text)
        except ValueError:
            raise BadInputError(f"{what}={value!r} is not a number of seconds") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInputError(f"{what}={value!r} is not a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise BadInputError(f"{what}={value!r} must be a finite number of seconds, 0 or more (0: no limit)")
    return float(value) or None


def configured() -> float | None:
    """The default budget: ``ONNXBRIDGE_TIMEOUT_S`` when set, else ``DEFAULT_S``."""
    text = os.environ.get(ENV)
    return DEFAULT_S if text is None else seconds(text, ENV)


def active() -> bool:
    """Whether a budget with a limit is running in this thread."""
    return getattr(_state, "end", None) is not None


def remaining() -> float | None:
    """Seconds left of the running budget (None: no budget); raises TimedOut once it has run out."""
    end = getattr(_state, "end", None)
    if end is None:
        return None
    left = end - time.monotonic()
    if left <= 0:
        raise expired()
    return left


def check() -> None:
    """Raise TimedOut if the budget has run out (between steps: a swallowed alarm is raised again here)."""
    remaining()


def expired(step: str | None = None) -> TimedOut:
    """The error for a budget that ran out while doing ``step`` (default: the innermost step running)."""
    steps = getattr(_state, "steps", None) or ["running"]
    step = step or steps[-1]
    total = getattr(_state, "total", None)
    budget = f"{total:g} s" if total is not None else "time"
    return TimedOut(f"the run's time budget of {budget} ran out while {step[:1].lower()}{step[1:]}", hint=HINT)


@contextlib.contextmanager
def doing(step: str) -> Iterator[None]:
    """Name what runs inside the block, for the error if the budget runs out there."""
    steps = _state.__dict__.setdefault("steps", [])
    steps.append(step)
    try:
        yield
    finally:
        steps.pop()


def _alarm(signum, frame) -> None:  # noqa: ARG001 - signal handler
    if active():
        raise expired()


@contextlib.contextmanager
def budget(limit: Any = None) -> Iterator[None]:
    """Run the block within ``limit`` seconds (see ``seconds``). None: inside a running budget, that one goes on;
    otherwise the configured default. A budget inside another ends no later than the outer one."""
    outer_end, outer_total = getattr(_state, "end", None), getattr(_state, "total", None)
    if limit is None and getattr(_state, "running", False):
        yield
        return
    total = configured() if limit is None else seconds(limit, "timeout")
    end = None if total is None else time.monotonic() + total
    if outer_end is not None and (end is None or outer_end < end):
        end, total = outer_end, outer_total
    outer_running = getattr(_state, "running", False)
    _state.end, _state.total, _state.running = end, total, True
    armed = end is not None and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGALRM, _alarm) if armed else None
    theirs, started = (0.0, 0.0), time.monotonic()  # an alarm the caller had set (outside any budget)
    try:
        if armed:
            theirs = signal.setitimer(signal.ITIMER_REAL, max(end - time.monotonic(), 1e-3))
        yield
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        _state.end, _state.total, _state.running = outer_end, outer_total, outer_running
        if armed and outer_end is not None:  # the outer budget's alarm again
            signal.setitimer(signal.ITIMER_REAL, max(outer_end - time.monotonic(), 1e-3))
        elif armed and theirs[0] > 0:  # the caller's own alarm, for the time it had left
            signal.setitimer(signal.ITIMER_REAL, max(theirs[0] - (time.monotonic() - started), 1e-3), theirs[1])


F = TypeVar("F", bound=Callable[..., Any])


def bounded(fn: F) -> F:
    """A public call run within its ``timeout=`` keyword (see ``budget``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with budget(kwargs.get("timeout")):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
