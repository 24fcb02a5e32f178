"""One-line errors for paths: a path that is not a regular file (checked before anything reads it), and a write
that the file system refuses."""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterator

from onnxbridge.errors import BadInputError


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """An OSError while writing ``path`` as BadInputError with the system's reason: where it goes cannot take it
    (read-only, full, a folder, not a file system)."""
    try:
        yield
    except OSError as exc:
        raise BadInputError(f"cannot write '{path}': {exc.strerror or exc}") from None


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def regular(path: str | Path, what: str, *, folder: bool = False) -> Path:
    """``path`` if it is a regular file (with ``folder``: or a folder), checked before anything reads it: a device,
    FIFO or socket, or a link to one, would hang a reader or never end. ``what`` names it in the one-line error."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        if os.path.islink(p):
            raise BadInputError(f"{what} '{p}' is a symbolic link to '{os.readlink(p)}', which does not exist") from None
        raise BadInputError(f"{what} '{p}' does not exist") from None
    except OSError as exc:
        raise BadInputError(f"cannot read {what} '{p}': {exc.strerror or exc}") from None
    if stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode)):
        return p
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    target = f" (it leads to '{os.path.realpath(p)}')" if os.path.islink(p) else ""
    raise BadInputError(f"{what} '{p}' is {kind}{target}, not a {'file or folder' if folder else 'file'}")
