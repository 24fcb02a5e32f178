"""Reading and atomically writing models and reports, external data included, and placing built files and folders."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    import onnx

PROTOBUF_LIMIT = 2**31 - 1
# Tensors are moved to a side file once their total exceeds this (below protobuf's 2 GiB cap).
EXTERNAL_DATA_THRESHOLD = 1_800_000_000
_ALIGN = 4096  # keep each external tensor page-aligned so runtimes can mmap it
_MIN_EXTERNAL_TENSOR = 1024
# Scratch folders (``onnxbridge-[trt-]PID-XXXXXXXX``) and staging entries beside an output
# (``.NAME.onnxbridge-PID-XXXXXXXX[.tmp]``) carry their owner's pid; a later run removes those of dead owners,
# and output locks (``.NAME.onnxbridge.lock``) that no run holds.
_OWNED = re.compile(r"^(?:\..+\.)?onnxbridge-(?:[a-z]+-)?(\d+)-[a-z0-9_]{8}(?:\.tmp)?$")
_LOCK = re.compile(r"^\..+\.onnxbridge\.lock$")
STALE_AFTER_S = 10


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


def _owned_prefix(prefix: str) -> str:
    """A temporary name's prefix that records this process as its owner (see ``_OWNED``)."""
    return f"{prefix}{os.getpid()}-"


def staging_folder(path: Path) -> Path:
    """A hidden folder beside ``path`` to build it in before renaming it into place, named for this process so that
    a later run removes it if this one is killed (``clean_stale``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=_owned_prefix(f".{path.name}.onnxbridge-"), dir=path.parent))


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
            if (owner is None or _alive(int(owner[1]))) and not _LOCK.match(entry.name):
                continue
            with contextlib.suppress(OSError):
                if time.time() - entry.stat(follow_symlinks=False).st_mtime < STALE_AFTER_S:
                    continue
                if owner is None:
                    _drop_unheld_lock(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


def _drop_unheld_lock(lock: str) -> None:
    """Remove an output lock that no run holds (a run that opened it meanwhile retries on a fresh one)."""
    import fcntl

    fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: held by a live run
        os.unlink(lock)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=_owned_prefix(f".{path.name}.onnxbridge-"), suffix=".tmp", dir=path.parent)
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
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode())


@contextlib.contextmanager
def workdir(prefix: str = "onnxbridge-") -> Iterator[Path]:
    """A scratch directory removed afterwards (exports land here before the final write); those that killed runs
    left behind are removed first."""
    with writing(tempfile.gettempdir()):
        clean_stale(tempfile.gettempdir())
        d = Path(tempfile.mkdtemp(prefix=_owned_prefix(prefix)))
    try:
        yield d
    except OSError as exc:  # the scratch disk is full: the machine's state, not a bug
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        raise BadInputError(f"cannot write scratch files in '{d.parent}': {exc.strerror}",
                            hint="free space there, or point TMPDIR at a folder with more room") from None
    finally:
        shutil.rmtree(d, ignore_errors=True)


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


def load_onnx(path: str | Path, *, load_external_data: bool = False) -> "onnx.ModelProto":
    """Load an ONNX file; bad files become BadInputError. External tensors stay on disk by default."""
    import onnx
    from google.protobuf.message import DecodeError

    p = Path(path)
    if not p.exists():
        raise BadInputError(f"'{p}' does not exist")
    if p.is_dir():
        raise BadInputError(f"'{p}' is a directory, not an ONNX file")
    try:
        model = onnx.load(str(p), load_external_data=False)
        if not model.graph.node and not model.graph.output:
            raise BadInputError(f"'{p}' is not an ONNX model (no graph found; truncated or another format?)")
        _check_locations(model, p)
        if load_external_data:
            onnx.load_external_data_for_model(model, str(p.parent))
    except (DecodeError, RuntimeWarning, ValueError, onnx.checker.ValidationError) as exc:
        raise BadInputError(f"'{p}' is not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    except FileNotFoundError as exc:
        raise BadInputError(f"'{p}' refers to external data that is missing: {exc.filename}") from None
    return model


def load_in_place(path: str | Path, *, min_bytes: int = _MIN_EXTERNAL_TENSOR) -> "onnx.ModelProto":
    """A self-contained ONNX file's model whose main-graph initializers of ``min_bytes`` or more stay in the file:
    each is marked external, located at its raw bytes inside ``path`` itself, so the weights are neither parsed
    nor copied (the file must stay while the model is used). A file that already keeps data outside, or whose
    initializers are not raw bytes, is loaded as ``load_onnx`` loads it."""
    import mmap

    import onnx

    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:  # missing, a folder, empty: the ordinary reader says why
        return load_onnx(p)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            skeleton = _in_place(buf, p.name, min_bytes)
        except (IndexError, ValueError):  # not the wire format expected: the ordinary reader says why
            skeleton = None
    if skeleton is None:
        return load_onnx(p)
    model = onnx.ModelProto()
    model.ParseFromString(skeleton)
    return model


def _read_varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _wire_fields(buf, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, start of its tag, start of its value, end) for each field of the message in
    ``buf[start:end]``; a length-delimited value starts after its length."""
    pos = start
    while pos < end:
        tag_at = pos
        key, pos = _read_varint(buf, pos)
        kind = key & 7
        if kind == 0:
            _, stop = _read_varint(buf, pos)
        elif kind == 2:
            length, pos = _read_varint(buf, pos)
            stop = pos + length
        elif kind in (1, 5):
            stop = pos + (8 if kind == 1 else 4)
        else:
            raise ValueError(f"wire type {kind}")
        if stop > end:
            raise ValueError("field past the end of its message")
        yield key >> 3, tag_at, pos, stop
        pos = stop


def _in_place(buf, location: str, min_bytes: int) -> bytes | None:
    """The ModelProto bytes of ``buf`` with every main-graph initializer's raw_data of ``min_bytes`` or more
    replaced by an external reference to where it lies in ``buf`` (file ``location``); None when ``buf`` already
    refers to external data or has no such initializer."""
    out, found = bytearray(), False
    for number, tag_at, start, stop in _wire_fields(buf, 0, len(buf)):
        if number != 7:  # ModelProto.graph
            out += buf[tag_at:stop]
            continue
        graph = bytearray()
        for g_number, g_tag, g_start, g_stop in _wire_fields(buf, start, stop):
            if g_number != 5:  # GraphProto.initializer
                graph += buf[g_tag:g_stop]
                continue
            tensor, raw = bytearray(), None
            for t_number, t_tag, t_start, t_stop in _wire_fields(buf, g_start, g_stop):
                if t_number == 14 and buf[t_start] == 1:  # data_location EXTERNAL
                    return None
                if t_number == 9 and t_stop - t_start >= min_bytes:  # raw_data
                    raw = (t_start, t_stop - t_start)
                else:
                    tensor += buf[t_tag:t_stop]
            if raw is not None:
                found = True
                for key, value in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1]))):
                    entry = _length_field(1, key.encode()) + _length_field(2, value.encode())
                    tensor += _length_field(13, entry)  # TensorProto.external_data
                tensor += b"\x70\x01"  # TensorProto.data_location = EXTERNAL
            graph += _length_field(5, bytes(tensor))
        out += _length_field(7, bytes(graph))
    return bytes(out) if found else None


def _length_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _check_locations(model: "onnx.ModelProto", path: Path) -> None:
    """Refuse a model (at ``path``) whose external data leads out of its folder, before any of it is read."""
    from onnx import TensorProto

    try:
        for t in iter_tensors(model):
            if t.data_location == TensorProto.EXTERNAL:
                _external_info(t, path.parent)
    except BadInputError as exc:
        raise BadInputError(f"'{path}': {exc}") from None


def iter_tensors(model: "onnx.ModelProto") -> Iterator["onnx.TensorProto"]:
    """Every TensorProto of the model: initializers, Constant/attribute tensors, subgraphs and functions."""
    from onnx import AttributeProto

    def graph_tensors(graph):
        yield from graph.initializer
        yield from nodes_tensors(graph.node)

    def nodes_tensors(nodes):
        for node in nodes:
            for attr in node.attribute:
                if attr.type == AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == AttributeProto.TENSORS:
                    yield from attr.tensors
                elif attr.type == AttributeProto.GRAPH:
                    yield from graph_tensors(attr.g)
                elif attr.type == AttributeProto.GRAPHS:
                    for g in attr.graphs:
                        yield from graph_tensors(g)

    yield from graph_tensors(model.graph)
    for fn in model.functions:
        yield from nodes_tensors(fn.node)


def subgraphs(node: "onnx.NodeProto") -> list["onnx.GraphProto"]:
    """The graphs a node holds in its attributes (If branches, Loop and Scan bodies)."""
    return [g for a in node.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]


def graphs(graph: "onnx.GraphProto") -> Iterator["onnx.GraphProto"]:
    """``graph`` and every graph nested in it, depth first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from graphs(sub)


def external_files(model: "onnx.ModelProto") -> list[str]:
    from onnx import TensorProto

    files: list[str] = []
    for t in iter_tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc and loc not in files:
                files.append(loc)
    return files


def element_bits(data_type: int) -> int:
    """Bits per element of an ONNX data type as stored in ``raw_data`` (onnx 1.17 maps bfloat16 and the float8 types
    to float32 numpy dtypes, so their size is spelled out here)."""
    import onnx
    from onnx import TensorProto as T

    narrow = {T.INT4: 4, T.UINT4: 4, T.BFLOAT16: 16, T.FLOAT8E4M3FN: 8, T.FLOAT8E4M3FNUZ: 8, T.FLOAT8E5M2: 8,
              T.FLOAT8E5M2FNUZ: 8, getattr(T, "FLOAT4E2M1", -1): 4}
    return narrow.get(data_type) or onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize * 8


def tensor_nbytes(t: "onnx.TensorProto") -> int:
    """Byte size of a tensor's data from its dims and dtype, without reading the data."""
    import math

    from onnx import TensorProto

    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 0
    return (math.prod(t.dims) * element_bits(t.data_type) + 7) // 8


def _tensor_bytes(t: "onnx.TensorProto", base_dir: Path | None) -> bytes:
    """Raw little-endian bytes of a tensor, read from its external file when it has one."""
    from onnx import TensorProto, numpy_helper

    if t.data_location == TensorProto.EXTERNAL:
        src, offset, length = _external_info(t, base_dir)
        with open(src, "rb") as f:
            f.seek(offset)
            return f.read(-1 if length is None else length)
    if t.HasField("raw_data"):
        return t.raw_data
    return numpy_helper.to_array(t).tobytes()


def save_onnx(model: "onnx.ModelProto", path: str | Path, *, base_dir: str | Path | None = None,
              external_data: bool | None = None, threshold: int = EXTERNAL_DATA_THRESHOLD,
              check: Callable[[Path], None] | None = None, movable: bool = False) -> list[str]:
    """Write ``model`` to ``path`` atomically; weights go to ``<path>.data`` when large or asked.

    Returns the external data files written beside ``path`` (empty for a self-contained model).

    ``base_dir`` is where the model's current external tensors live; they are streamed one at a
    time, so a model over 2 GB is never serialised whole. ``check`` runs first on the model's
    skeleton (no weights read). Files are staged in a hidden folder beside ``path`` and renamed
    into place only when complete. ``model`` is not modified.

    ``movable``: ``base_dir``'s files are scratch the caller owns. An external data file there that holds the
    model's tensors (and little else) then becomes ``<path>.data`` by a hard link, not a copy (it may be appended
    to); where no link can be made (another file system) the tensors are copied.
    """
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(path.parent)
        written = _save(model, path, Path(base_dir) if base_dir else None, external_data, threshold, check,
                        movable)
    return [f"{path.name}.data"] if written else []


def _save(model: "onnx.ModelProto", path: Path, base: Path | None, external_data: bool | None, threshold: int,
          check: Callable[[Path], None] | None, movable: bool = False) -> bool:
    """``save_onnx`` once ``path``'s folder is there: whether the weights went to ``<path>.data``."""
    import onnx

    total = sum(tensor_nbytes(t) for t in iter_tensors(model))
    inline = not (external_data if external_data is not None else total > threshold)
    data_name = f"{path.name}.data"
    staging = staging_folder(path)
    try:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        if not inline or out.ByteSize() >= PROTOBUF_LIMIT:
            linked = movable and base is not None and _link_external(out, base, staging / data_name, data_name)
            written = linked or _externalize(out, base, staging / data_name, data_name)
            base = staging
        else:
            written = False
        if check is not None:
            _check_skeleton(out, staging / "check", check)
        staged = staging / path.name
        if inline:
            _write_inline(out, base, staged)
            written = False
        else:
            staged.write_bytes(out.SerializeToString())
        del out
        side = path.parent / data_name
        stale = not written and side.exists() and _uses_file(path, data_name)
        if written:
            os.replace(staging / data_name, side)
        os.replace(staged, path)
        if stale:  # the model we replaced used it; the new one does not
            side.unlink()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def place_onnx(staged: Path, output: Path, files: list[str]) -> None:
    """Move an ONNX model staged with its external data ``files`` (names beside it) over ``output``: the data first,
    then the model that names it; ``<output>.data`` that the replaced model used and this one does not goes."""
    side = output.parent / f"{output.name}.data"
    with writing(output):
        stale = side.name not in files and side.exists() and _uses_file(output, side.name)
        for name in files:
            place(staged.parent / name, output.parent / name)
        place(staged, output)
        if stale:
            side.unlink()


def detach_weights(model: "onnx.ModelProto", base_dir: Path | None, folder: Path) -> tuple["onnx.ModelProto", Path | None]:
    """Move a model's inline weights to ``folder/weights.bin`` once, so that every later step
    (adapting, shape inference, checking, copying) handles a small proto and the final write can
    stream them. Returns the small model and where its external data now lives; a model that
    already keeps weights outside is returned as is.
    """
    import onnx
    from onnx import TensorProto

    if any(t.data_location == TensorProto.EXTERNAL for t in iter_tensors(model)):
        return model, base_dir
    if not _externalize(model, None, folder / "weights.bin", "weights.bin"):
        (folder / "weights.bin").unlink()
        return model, base_dir
    small = onnx.ModelProto()
    small.CopyFrom(model)  # a fresh message, so the arena that held the weights can be freed
    return small, folder


def _check_skeleton(model: "onnx.ModelProto", folder: Path, check: Callable[[Path], None]) -> None:
    """Run ``check`` on the model with empty sparse stand-ins for its external files (no data read)."""
    from onnx import TensorProto

    folder.mkdir()
    sizes: dict[Path, int] = {}
    for t in iter_tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            stand_in, offset, length = _external_info(t, folder)
            sizes[stand_in] = max(sizes.get(stand_in, 0), offset + (tensor_nbytes(t) if length is None else length))
    for stand_in, size in sizes.items():
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        with open(stand_in, "wb") as f:
            f.truncate(size)
    skeleton = folder / "model.onnx"
    skeleton.write_bytes(model.SerializeToString())
    check(skeleton)


def _external_info(t: "onnx.TensorProto", base_dir: Path | None) -> tuple[Path, int, int | None]:
    """Where an external tensor's bytes are: its file, offset and length (None: to the end of the file). A location
    that cannot be used from ``base_dir`` (see ``_location_problem``) is refused, as are offsets and lengths that
    are not byte counts."""
    info = {e.key: e.value for e in t.external_data}
    location, numbers = info.get("location", ""), (info.get("offset", "0"), info.get("length", "0"))
    problem = _location_problem(location, os.path.realpath(base_dir or "."))
    if problem is None and not all(v.isascii() and v.isdigit() for v in numbers):
        problem = f"has offset {numbers[0]!r} and length {numbers[1]!r}, not byte counts"
    if problem:
        raise BadInputError(f"tensor '{t.name}': external data location {location!r} {problem}")
    length = int(info["length"]) if "length" in info else None
    return (base_dir or Path(".")) / location, int(numbers[0]), length


def _location_problem(location: str, folder: str) -> str | None:
    """Why an external data location cannot be used from ``folder`` (a real path): empty, a NUL byte, absolute,
    or leading out of the folder by '..' or a symlink; None when it can."""
    if not location or "\0" in location or os.path.isabs(location):
        return "is empty" if not location else "holds a NUL byte" if "\0" in location else "is absolute"
    real = os.path.realpath(os.path.join(folder, location))
    if real == folder:
        return "names the model's folder, not a file"
    if os.path.commonpath([folder, real]) != folder:
        return "leads out of the model's folder" + ("" if ".." in Path(location).parts else " (by a symlink)")
    return None


def _external_range(t: "onnx.TensorProto", base_dir: Path | None) -> tuple[Path, int, int]:
    src, offset, length = _external_info(t, base_dir)
    return src, offset, src.stat().st_size - offset if length is None else length


def _copy_range(src: Path, offset: int, length: int, dst) -> None:
    """Copy bytes between files in the kernel where possible (no Python buffers of tensor size)."""
    dst.flush()
    with open(src, "rb") as f:
        remaining = length
        try:
            while remaining:
                sent = os.sendfile(dst.fileno(), f.fileno(), offset + length - remaining, remaining)
                if sent == 0:
                    raise OSError("short read")
                remaining -= sent
            dst.seek(0, os.SEEK_END)
            return
        except (OSError, AttributeError):
            f.seek(offset + length - remaining)
            dst.seek(0, os.SEEK_END)
        while remaining:
            chunk = f.read(min(remaining, 1 << 24))
            if not chunk:
                raise BadInputError(f"external data file '{src}' is shorter than the model says")
            dst.write(chunk)
            remaining -= len(chunk)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _write_inline(model: "onnx.ModelProto", base_dir: Path | None, dest: Path) -> None:
    """Write one self-contained file, streaming external graph initializers into it.

    Protobuf merges repeated occurrences of a message field, so the file is the serialised model
    without those initializers followed, for each, by ``graph { initializer { ...raw_data } }``
    whose bytes are copied from the external file. Nothing of tensor size is held in memory.
    """
    import onnx
    from onnx import TensorProto

    skeleton = onnx.ModelProto()
    skeleton.CopyFrom(model)
    graph = skeleton.graph
    streamed = [t for t in graph.initializer if t.data_location == TensorProto.EXTERNAL]
    kept = [t for t in graph.initializer if t.data_location != TensorProto.EXTERNAL]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for t in iter_tensors(skeleton):  # external tensors outside graph.initializer: small, load inline
        if t.data_location == TensorProto.EXTERNAL:
            raw = _tensor_bytes(t, base_dir)
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            t.raw_data = raw
    with open(dest, "wb") as f:
        f.write(skeleton.SerializeToString())
        for t in streamed:
            src, offset, length = _external_range(t, base_dir)
            header = TensorProto()
            header.CopyFrom(t)
            del header.external_data[:]
            header.data_location = TensorProto.DEFAULT
            head = header.SerializeToString() + b"\x4a" + _varint(length)  # field 9: raw_data
            tensor_len = len(head) + length
            init = b"\x2a" + _varint(tensor_len)  # GraphProto field 5: initializer
            f.write(b"\x3a" + _varint(len(init) + tensor_len) + init + head)  # ModelProto field 7: graph
            _copy_range(src, offset, length, f)


# a scratch data file is linked as the output's when the model uses at least this share of its bytes (the rest is
# alignment padding, or tensors the builder dropped)
LINK_MIN_USED = 0.9


def _link_external(model: "onnx.ModelProto", base_dir: Path, data_path: Path, location: str) -> bool:
    """Make ``data_path`` a hard link to the one file under ``base_dir`` that holds all of the model's external
    tensors, point them at it by ``location`` (offsets unchanged) and append the inline tensors of 1 KiB or more;
    False (nothing done) when they live in several files, the file is mostly bytes the model does not use, or no
    link can be made (another file system, a file system without links)."""
    from onnx import TensorProto

    tensors = [t for t in iter_tensors(model) if t.data_location == TensorProto.EXTERNAL]
    ranges = [_external_range(t, base_dir) for t in tensors]
    files = {os.path.realpath(src) for src, _, _ in ranges}
    if len(files) != 1:
        return False
    src = Path(files.pop())
    if src.suffix == ".onnx":  # a model file read in place (``load_in_place``): its graph lies among the weights
        return False
    used = sum(length for _, length in {(offset, length) for _, offset, length in ranges})
    if used < LINK_MIN_USED * src.stat().st_size:
        return False
    try:
        os.link(src, data_path)
    except OSError:
        return False
    for t, (_, offset, length) in zip(tensors, ranges):
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
    _externalize(model, None, data_path, location, append=True)
    return True


def _externalize(model: "onnx.ModelProto", base_dir: Path | None, data_path: Path, location: str, *,
                 append: bool = False) -> bool:
    """Move every tensor of 1 KiB or more (and every already-external one) into ``data_path``; ``append``: the
    inline ones go after what ``data_path`` holds, and the external ones stay as they are (already in it)."""
    from onnx import TensorProto

    written = False
    with open(data_path, "r+b" if append else "wb") as data:
        data.seek(0, os.SEEK_END)
        for t in iter_tensors(model):
            is_ext = t.data_location == TensorProto.EXTERNAL
            if is_ext and append:
                continue
            if not is_ext and (t.data_type == TensorProto.STRING or tensor_nbytes(t) < _MIN_EXTERNAL_TENSOR):
                continue
            data.write(b"\0" * (-data.tell() % _ALIGN))
            offset = data.tell()
            if is_ext:
                src, src_offset, length = _external_range(t, base_dir)
                _copy_range(src, src_offset, length, data)
            else:
                raw = _tensor_bytes(t, None)
                length = len(raw)
                data.write(raw)
                del raw
            for fld in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "raw_data"):
                t.ClearField(fld)
            del t.external_data[:]
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
                e = t.external_data.add()
                e.key, e.value = k, v
            t.data_location = TensorProto.EXTERNAL
            written = True
    return written


def _uses_file(model_path: Path, name: str) -> bool:
    try:
        return name in external_files(load_onnx(model_path))
    except Exception:
        return False
