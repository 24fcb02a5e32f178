"""External data: tensors kept in files beside a model. Where their bytes are (locations checked not to lead out
of the model's folder), copying them file to file, and moving a model's weights out to one data file."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError
from onnxbridge.modelwalk import iter_tensors, tensor_nbytes

if TYPE_CHECKING:
    import onnx

_ALIGN = 4096  # keep each external tensor page-aligned so runtimes can mmap it
MIN_EXTERNAL_TENSOR = 1024  # smaller tensors stay inline


def external_files(model: "onnx.ModelProto") -> list[str]:
    """The external data files the model's tensors name (their locations), each once, in order of first use."""
    from onnx import TensorProto

    files: list[str] = []
    for t in iter_tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            loc = next((e.value for e in t.external_data if e.key == "location"), None)
            if loc and loc not in files:
                files.append(loc)
    return files


def check_locations(model: "onnx.ModelProto", path: Path) -> None:
    """Refuse a model (at ``path``) whose external data leads out of its folder, before any of it is read."""
    from onnx import TensorProto

    try:
        for t in iter_tensors(model):
            if t.data_location == TensorProto.EXTERNAL:
                external_info(t, path.parent)
    except BadInputError as exc:
        raise BadInputError(f"'{path}': {exc}") from None


def external_info(t: "onnx.TensorProto", base_dir: Path | None) -> tuple[Path, int, int | None]:
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


def external_range(t: "onnx.TensorProto", base_dir: Path | None) -> tuple[Path, int, int]:
    """``external_info`` with the length filled in (to the end of the file when the tensor gives none)."""
    src, offset, length = external_info(t, base_dir)
    return src, offset, src.stat().st_size - offset if length is None else length


def tensor_bytes(t: "onnx.TensorProto", base_dir: Path | None) -> bytes:
    """Raw little-endian bytes of a tensor, read from its external file when it has one."""
    from onnx import TensorProto, numpy_helper

    if t.data_location == TensorProto.EXTERNAL:
        src, offset, length = external_info(t, base_dir)
        with open(src, "rb") as f:
            f.seek(offset)
            return f.read(-1 if length is None else length)
    if t.HasField("raw_data"):
        return t.raw_data
    return numpy_helper.to_array(t).tobytes()


def copy_range(src: Path, offset: int, length: int, dst) -> None:
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
    if not externalize(model, None, folder / "weights.bin", "weights.bin"):
        (folder / "weights.bin").unlink()
        return model, base_dir
    small = onnx.ModelProto()
    small.CopyFrom(model)  # a fresh message, so the arena that held the weights can be freed
    return small, folder


# a scratch data file is linked as the output's when the model uses at least this share of its bytes (the rest is
# alignment padding, or tensors the builder dropped)
LINK_MIN_USED = 0.9


def link_external(model: "onnx.ModelProto", base_dir: Path, data_path: Path, location: str) -> bool:
    """Make ``data_path`` a hard link to the one file under ``base_dir`` that holds all of the model's external
    tensors, point them at it by ``location`` (offsets unchanged) and append the inline tensors of 1 KiB or more;
    False (nothing done) when they live in several files, the file is mostly bytes the model does not use, or no
    link can be made (another file system, a file system without links)."""
    from onnx import TensorProto

    tensors = [t for t in iter_tensors(model) if t.data_location == TensorProto.EXTERNAL]
    ranges = [external_range(t, base_dir) for t in tensors]
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
    externalize(model, None, data_path, location, append=True)
    return True


def externalize(model: "onnx.ModelProto", base_dir: Path | None, data_path: Path, location: str, *,
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
            if not is_ext and (t.data_type == TensorProto.STRING or tensor_nbytes(t) < MIN_EXTERNAL_TENSOR):
                continue
            data.write(b"\0" * (-data.tell() % _ALIGN))
            offset = data.tell()
            if is_ext:
                src, src_offset, length = external_range(t, base_dir)
                copy_range(src, src_offset, length, data)
            else:
                raw = tensor_bytes(t, None)
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
