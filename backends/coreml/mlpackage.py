"""A saved ``.mlpackage`` read without trusting it. Its Manifest.json, the model spec that names and the weight
blobs the spec points into are checked before coremltools reads them: every file inside the package (no '..',
absolute path or symlink leading out), regular and of bounded size, every blob's record and data within its file.
Anything wrong is one line (BadInputError naming the package), never a crash, a read elsewhere or a huge
allocation."""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from onnxbridge.errors import BadInputError, UnsupportedError, first_line

if TYPE_CHECKING:
    from coremltools.proto import Model_pb2

MANIFEST_LIMIT = 1 << 20  # a real Manifest.json is under 1 KB
SPEC_LIMIT = 2**31 - 1  # protobuf's cap on one message
AUTHOR = "com.apple.CoreML"
# MIL blob storage (version 2): a 64-byte header (count, version), then per blob a 64-byte record (sentinel, dtype,
# size in bytes, offset of the data) at the offset the spec gives
HEADER = struct.Struct("<II")
RECORD = struct.Struct("<IIQQ")
RECORD_SIZE = HEADER_SIZE = 64
SENTINEL = 0xDEADBEEF
BLOB_VERSION = 2


@dataclass
class Package:
    """What the package holds: its spec and the MIL function ``main`` loaded from it (weights included)."""

    spec: "Model_pb2.Model"
    function: Any


def read(path: Path) -> Package:
    """The package at ``path``, checked as the module says."""
    from onnxbridge.backends.coreml.ctimport import import_ct

    import_ct()
    root = Path(os.path.realpath(path))
    if not root.is_dir():
        _refuse(path, "it is not a folder")
    entries, root_id = _manifest(path, root)
    spec_file = _item(path, root, entries[root_id], "model file", want_dir=False)
    weights = next((e for e in entries.values() if e.get("name") == "weights" and e.get("author") == AUTHOR), None)
    weights_dir = None if weights is None else _item(path, root, weights, "weights folder", want_dir=True)
    spec = _spec(path, spec_file)
    for value in _blob_values(spec.mlProgram):
        _check_blob(path, root, weights_dir, value.blobFileValue)
    return Package(spec, _main(path, spec, weights_dir))


def _refuse(path: Path, why: str):
    raise BadInputError(f"'{path}' is not a readable Core ML package: {why}")


def _manifest(path: Path, root: Path) -> tuple[dict, str]:
    """Manifest.json's item entries by id and the id of the root model."""
    file = _inside(path, root, root / "Manifest.json", "Manifest.json", want_dir=False)
    if file.stat().st_size > MANIFEST_LIMIT:
        _refuse(path, f"its Manifest.json is over {MANIFEST_LIMIT} bytes")
    try:
        manifest = json.loads(file.read_bytes())
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        _refuse(path, f"its Manifest.json is not JSON ({first_line(exc)})")
    entries = manifest.get("itemInfoEntries") if isinstance(manifest, dict) else None
    root_id = manifest.get("rootModelIdentifier") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        _refuse(path, "its Manifest.json has no itemInfoEntries object")
    if not isinstance(root_id, str) or root_id not in entries:
        _refuse(path, "its Manifest.json names no root model among its items")
    return entries, root_id


def _item(path: Path, root: Path, entry: dict, what: str, want_dir: bool) -> Path:
    """A manifest item's file (or folder), which lives under the package's Data folder."""
    relative = entry.get("path")
    if not isinstance(relative, str) or not relative or "\0" in relative or os.path.isabs(relative):
        _refuse(path, f"its Manifest.json gives the {what} as {relative!r}, not a path inside the package")
    return _inside(path, root, root / "Data" / relative, f"the {what} '{relative}'", want_dir)


def _inside(path: Path, root: Path, candidate: Path, what: str, want_dir: bool) -> Path:
    """``candidate`` with symlinks resolved; refused unless it is a folder (``want_dir``) or a regular file inside
    the package."""
    real = Path(os.path.realpath(candidate))
    if root not in real.parents:
        _refuse(path, f"{what} leads out of the package")
    if not (real.is_dir() if want_dir else real.is_file()):
        _refuse(path, f"{what} is missing or not a {'folder' if want_dir else 'regular file'}")
    return real


def _spec(path: Path, file: Path) -> "Model_pb2.Model":
    """The model spec, refused unless it parses and holds an ML program with known feature types."""
    from google.protobuf.message import DecodeError

    from coremltools.proto import FeatureTypes_pb2, Model_pb2

    if file.stat().st_size > SPEC_LIMIT:
        _refuse(path, f"its model file is over protobuf's {SPEC_LIMIT}-byte limit")
    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(file.read_bytes())
    except (DecodeError, RecursionError) as exc:
        _refuse(path, f"its model file is not a Core ML model spec ({first_line(exc)})")
    kind = spec.WhichOneof("Type")
    if kind is None:
        _refuse(path, "its model file holds no model")
    if kind != "mlProgram":
        raise UnsupportedError(f"'{path}' holds a Core ML {kind} model; onnxbridge reads ML programs only")
    known = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.values()
    for feature in [*spec.description.input, *spec.description.output]:
        if feature.type.multiArrayType.dataType not in known:
            _refuse(path, f"feature '{feature.name}' has array data type {feature.type.multiArrayType.dataType}, "
                          "which Core ML does not define")
    return spec


def _blob_values(message) -> Iterator:
    """Every MIL ``Value`` under ``message`` whose data is in a weight file (a ``blobFileValue``)."""
    from coremltools.proto import MIL_pb2

    stack = [message]
    while stack:
        m = stack.pop()
        if isinstance(m, MIL_pb2.Value) and m.WhichOneof("value") == "blobFileValue":
            yield m
            continue
        for field, value in m.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                if field.message_type.fields_by_name["value"].message_type is not None:
                    stack.extend(value.values())
            elif field.is_repeated:
                stack.extend(value)
            else:
                stack.append(value)


def _check_blob(path: Path, root: Path, weights_dir: Path | None, blob) -> None:
    """A blob's record and data lie within its weight file (the file coremltools will map)."""
    name = blob.fileName.split("/")[-1]  # how coremltools finds it: by name in the weights folder
    if weights_dir is None:
        _refuse(path, f"its program reads weights from '{blob.fileName}' but the package has no weights folder")
    file = _inside(path, root, weights_dir / name, f"the weight file '{name}'", want_dir=False)
    size = file.stat().st_size
    with open(file, "rb") as f:
        header = f.read(HEADER_SIZE)
        if len(header) < HEADER_SIZE or HEADER.unpack_from(header)[1] != BLOB_VERSION:
            _refuse(path, f"the weight file '{name}' is not MIL blob storage version {BLOB_VERSION}")
        if not HEADER_SIZE <= blob.offset <= size - RECORD_SIZE:
            _refuse(path, f"a weight at offset {blob.offset} lies outside the {size}-byte '{name}'")
        f.seek(blob.offset)
        sentinel, _, nbytes, offset = RECORD.unpack_from(f.read(RECORD_SIZE))
    if sentinel != SENTINEL:
        _refuse(path, f"'{name}' holds no weight record at offset {blob.offset}")
    if offset < HEADER_SIZE or offset + nbytes > size:
        _refuse(path, f"the weight at offset {blob.offset} claims bytes {offset}..{offset + nbytes} of the "
                      f"{size}-byte '{name}'")


def _main(path: Path, spec: "Model_pb2.Model", weights_dir: Path | None):
    """The program's ``main`` function, its inputs and outputs those the spec describes."""
    from coremltools.converters.mil.frontend.milproto.load import load

    try:
        program = load(spec, specification_version=spec.specificationVersion,
                       file_weights_dir=str(weights_dir or ""))
    except Exception as exc:  # noqa: BLE001 - coremltools' reader on a program it cannot make sense of
        _refuse(path, f"its MIL program cannot be loaded ({type(exc).__name__}: {first_line(exc)})")
    function = program.functions.get("main")
    if function is None:
        _refuse(path, "its MIL program has no function 'main'")
    inputs, outputs = [d.name for d in spec.description.input], [d.name for d in spec.description.output]
    if sorted(inputs) != sorted(function.inputs) or not set(outputs) <= {v.name for v in function.outputs}:
        _refuse(path, f"its description (inputs {inputs}, outputs {outputs}) does not match its program")
    return function
