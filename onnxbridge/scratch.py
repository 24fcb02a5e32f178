"""Scratch folders, and the scratch and staging entries a run names for its pid so that a later run removes those
that killed runs left behind (with output locks no run holds)."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from onnxbridge.errors import BadInputError
from onnxbridge.locks import LOCK_FILE, drop_unheld_lock
from onnxbridge.pathchecks import writing

# Scratch folders (``onnxbridge-[trt-]PID-XXXXXXXX``) and staging entries beside an output
# (``.NAME.onnxbridge-PID-XXXXXXXX[.tmp]``) carry their owner's pid; a later run removes those of dead owners,
# and output locks (``locks.LOCK_FILE``) that no run holds.
_OWNED = re.compile(r"^(?:\..+\.)?onnxbridge-(?:[a-z]+-)?(\d+)-[a-z0-9_]{8}(?:\.tmp)?$")
STALE_AFTER_S = 10


def owned_prefix(prefix: str) -> str:
    """A temporary name's prefix that records this process as its owner (see ``_OWNED``)."""
    return f"{prefix}{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or not a pid: not ours to judge
        return True
    return True


def clean_stale(folder: str | Path) -> None:
    """Remove what killed runs left in ``folder``, once older than ``STALE_AFTER_S``: scratch and staging entries
    whose owner pid is not alive, and output locks no run holds (never a live run's)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            owner = _OWNED.match(entry.name)
            if (owner is None or _alive(int(owner[1]))) and not LOCK_FILE.match(entry.name):
                continue
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime < STALE_AFTER_S:
                    continue
                if owner is None:
                    drop_unheld_lock(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


@contextlib.contextmanager
def workdir(prefix: str = "onnxbridge-") -> Iterator[Path]:
    """A scratch directory removed afterwards (exports land here before the final write); those that killed runs
    left behind are removed first."""
    with writing(tempfile.gettempdir()):
        clean_stale(tempfile.gettempdir())
        d = Path(tempfile.mkdtemp(prefix=owned_prefix(prefix)))
    try:
        yield d
    except OSError as exc:  # the scratch disk is full: the machine's state, not a bug
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        raise BadInputError(f"cannot write scratch files in '{d.parent}': {exc.strerror}",
                            hint="free space there, or point TMPDIR at a folder with more room") from None
    finally:
        shutil.rmtree(d, ignore_errors=True)
