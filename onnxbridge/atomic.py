"""Atomic writes: a file written whole or not at all, and built files and folders placed over an output (staged
beside it, then renamed into place)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from onnxbridge.pathchecks import writing
from onnxbridge.scratch import clean_stale, owned_prefix


def staging_folder(path: Path) -> Path:
    """A hidden folder beside ``path`` to build it in before renaming it into place, named for this process so that
    a later run removes it if this one is killed (``clean_stale``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=owned_prefix(f".{path.name}.onnxbridge-"), dir=path.parent))


def place(staged: Path, output: Path) -> None:
    """Move ``staged`` (a file or folder on ``output``'s file system) to ``output``, replacing what is there: a file
    by one rename; a folder over a folder by moving the old one aside first (to a staging name that a later run
    removes if this one is killed), back again if the move fails, and removing it after. A failure leaves the old
    output whole. A file cannot replace a folder, nor a folder a file (BadInputError, as every OSError here)."""
    with writing(output):
        if not (staged.is_dir() and output.is_dir() and not output.is_symlink()):
            os.replace(staged, output)
            return
        aside = staging_folder(output)
        os.replace(output, aside)  # over the empty folder just made
        try:
            os.replace(staged, output)
        except BaseException:
            os.replace(aside, output)
            raise
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def placing(output: Path) -> Iterator[Path]:
    """The path to build ``output`` at (a file or folder, in a staging folder beside it), ``place``d over
    ``output`` when the block ends without an error; the staging folder is removed either way. OSErrors are
    BadInputError (``writing``)."""
    with writing(output):
        output.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(output.parent)
        staging = staging_folder(output)
        try:
            yield staging / output.name
            place(staging / output.name, output)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` by a rename from a temporary file beside it: readers see the old file or the new
    one, never a part (OSErrors as BadInputError, ``writing``)."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=owned_prefix(f".{path.name}.onnxbridge-"), suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    return path


def write_json(path: str | Path, obj) -> Path:
    """``obj`` as indented JSON, written atomically (``atomic_write_bytes``)."""
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode())
