"""Output locks: ``.NAME.onnxbridge.lock`` beside an output, held while one run writes, validates and reports on it."""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Iterator

from onnxbridge.errors import BadInputError
from onnxbridge.pathchecks import writing

# an output lock's name; one that no run holds is what a killed run left (``scratch.clean_stale`` removes it)
LOCK_FILE = re.compile(r"^\..+\.onnxbridge\.lock$")


@contextlib.contextmanager
def output_lock(path: Path | None) -> Iterator[None]:
    """Hold ``.NAME.onnxbridge.lock`` beside ``path`` while a run writes it, validates it and reports on it; the
    lock file is removed after. A second run is refused at once (BadInputError): waiting could last a whole
    conversion, and its write would replace the file the first run just reported on anyway. ``None``: no lock."""
    if path is None:
        yield
        return
    lock = path.parent / f".{path.name}.onnxbridge.lock"
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _take_lock(lock, path)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # while still held: a run waiting on this file retries on a fresh one
        os.close(fd)


def _inode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


def _take_lock(lock: Path, path: Path) -> int:
    """An open, flock()ed ``lock`` holding this pid (retried when its holder removed it meanwhile)."""
    import fcntl

    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _inode(lock) == os.fstat(fd).st_ino:
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                return fd
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise BadInputError(f"'{path}' is being written by another onnxbridge run (pid {owner})",
                                hint="wait for it to finish, or choose another output path") from None
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def drop_unheld_lock(lock: str) -> None:
    """Remove an output lock that no run holds (a run that opened it meanwhile retries on a fresh one)."""
    import fcntl

    fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: held by a live run
        os.unlink(lock)
    finally:
        os.close(fd)
