"""Loading and saving ONNX files: bad files as one-line errors; writes atomic and streamed, weights to
``<path>.data`` when large (never serialised whole); staged models placed with their data files."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from onnxbridge.atomic import place, staging_folder
from onnxbridge.errors import BadInputError
from onnxbridge.external_data import (check_locations, copy_range, external_files, external_info, external_range,
                                      externalize, link_external, tensor_bytes)
from onnxbridge.modelwalk import iter_tensors, tensor_nbytes
from onnxbridge.pathchecks import writing
from onnxbridge.protowire import varint
from onnxbridge.scratch import clean_stale

if TYPE_CHECKING:
    import onnx

PROTOBUF_LIMIT = 2**31 - 1
# Tensors are moved to a side file once their total exceeds this (below protobuf's 2 GiB cap).
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


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
        check_locations(model, p)
        if load_external_data:
            onnx.load_external_data_for_model(model, str(p.parent))
    except (DecodeError, RuntimeWarning, ValueError, onnx.checker.ValidationError) as exc:
        raise BadInputError(f"'{p}' is not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    except FileNotFoundError as exc:
        raise BadInputError(f"'{p}' refers to external data that is missing: {exc.filename}") from None
    return model


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
            linked = movable and base is not None and link_external(out, base, staging / data_name, data_name)
            written = linked or externalize(out, base, staging / data_name, data_name)
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


def _check_skeleton(model: "onnx.ModelProto", folder: Path, check: Callable[[Path], None]) -> None:
    """Run ``check`` on the model with empty sparse stand-ins for its external files (no data read)."""
    from onnx import TensorProto

    folder.mkdir()
    sizes: dict[Path, int] = {}
    for t in iter_tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            stand_in, offset, length = external_info(t, folder)
            sizes[stand_in] = max(sizes.get(stand_in, 0), offset + (tensor_nbytes(t) if length is None else length))
    for stand_in, size in sizes.items():
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        with open(stand_in, "wb") as f:
            f.truncate(size)
    skeleton = folder / "model.onnx"
    skeleton.write_bytes(model.SerializeToString())
    check(skeleton)


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
            raw = tensor_bytes(t, base_dir)
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            t.raw_data = raw
    with open(dest, "wb") as f:
        f.write(skeleton.SerializeToString())
        for t in streamed:
            src, offset, length = external_range(t, base_dir)
            header = TensorProto()
            header.CopyFrom(t)
            del header.external_data[:]
            header.data_location = TensorProto.DEFAULT
            head = header.SerializeToString() + b"\x4a" + varint(length)  # field 9: raw_data
            tensor_len = len(head) + length
            init = b"\x2a" + varint(tensor_len)  # GraphProto field 5: initializer
            f.write(b"\x3a" + varint(len(init) + tensor_len) + init + head)  # ModelProto field 7: graph
            copy_range(src, offset, length, f)


def _uses_file(model_path: Path, name: str) -> bool:
    try:
        return name in external_files(load_onnx(model_path))
    except Exception:
        return False
