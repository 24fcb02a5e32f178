"""Keep exporters' chatter out of the terminal while keeping their warnings for the report."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from typing import Iterator, Sequence

from onnxbridge.errors import first_line

log = logging.getLogger(__name__)

# Warnings about how onnxbridge calls a library, not about the user's model: logged at debug, kept out of reports
# (and of ``--fail-on warning``). By category: deprecations and unclosed resources raised in library code (Python's,
# installed packages', onnxbridge's; a deprecation in the user's own model code stays); by message: the exporters'
# advice to their caller.
NOISE_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ResourceWarning)
NOISE_MESSAGES = ("You are using the legacy TorchScript-based ONNX export",
                  "'dynamic_axes' is not recommended when dynamo=True",
                  "Implicitly cleaning up <TemporaryDirectory")


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    import onnxbridge

    own = os.path.dirname(os.path.abspath(onnxbridge.__file__))
    paths = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {own, *(os.path.join(os.path.dirname(own), d) for d in ("frontends", "backends", "cli"))}
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths if p)


def is_noise(record: warnings.WarningMessage) -> bool:
    """Whether a caught warning is about the libraries' use rather than the model (``NOISE_*``)."""
    message = str(record.message).lstrip("# ")
    if message.startswith(NOISE_MESSAGES):
        return True
    name = record.filename or ""
    in_library = name.startswith("<") or os.path.abspath(name).startswith(_library_dirs())
    return issubclass(record.category, NOISE_CATEGORIES) and in_library


def keep(records: Sequence[warnings.WarningMessage], caught: list[str], limit: int = 10) -> None:
    """Add the first line of each warning about the model to ``caught`` (deduplicated, at most ``limit``); log the
    rest at debug."""
    for r in records:
        text = first_line(r.message, 300)  # a TracerWarning's "... might not generalize to other inputs!" fits
        if is_noise(r):
            log.debug("%s (%s:%s): %s", r.category.__name__, r.filename, r.lineno, text)
        elif text not in caught and len(caught) < limit:
            caught.append(text)


@contextlib.contextmanager
def quiet(caught: list[str], loggers: Sequence[str] = (), *, limit: int = 10) -> Iterator[None]:
    """Silence ``loggers`` below ERROR and stdout; collect Python warnings about the model, deduplicated, into
    ``caught`` (``keep``)."""
    handles = [logging.getLogger(n) for n in loggers]
    levels = [h.level for h in handles]
    for h in handles:
        h.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as records, contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("always")
            yield
    finally:
        for h, level in zip(handles, levels):
            h.setLevel(level)
    keep(records, caught, limit)


@contextlib.contextmanager
def native_output_silenced():
    """Swallow what native code writes to file descriptors 1 and 2 (the TorchScript exporter dumps
    whole graphs there when it fails; Paddle's predictor prints debug lines)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
