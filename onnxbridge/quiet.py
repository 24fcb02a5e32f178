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


@contextlib.contextmanager
def quiet(caught: list[str], loggers: Sequence[str] = (), *, limit: int = 10) -> Iterator[None]:
    """Silence ``loggers`` below ERROR and stdout; collect Python warnings, deduplicated, into ``caught``."""
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
    for r in records:
        text = first_line(r.message, 200)
        if text not in caught and len(caught) < limit:
            caught.append(text)


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
