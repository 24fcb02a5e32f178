"""Our reader for SNPE2/QAIRT ``.dlc`` files: the ZIP container, its entries' headers and FlatBuffer identifiers,
the metadata JSON, and the graph (ops, tensors, shapes, dtypes) of the ``NETD`` buffer.

The layout (see docs and the notes it was verified against): a ZIP of stored entries whose CRC fields are 0
(so the data is read from the local headers, not with ``zipfile``'s checked reader); ``model`` and ``model.params``
start with an 8-byte header ``D5 0A <u16 major> <u16 minor> 00 00`` and hold FlatBuffers ``NETD`` and ``NETP``;
``model.params.bin`` holds the weights those reference by offset and size. Slots below are the field order of
Netron's ``dlc.fbs`` (v4), corrected where Qualcomm's reader disagrees.

A crafted file costs time and memory in proportion to its size: the FlatBuffers are read within a budget of their
size (``flatbuf``), only the entries the reader uses are read, each exactly at the size the archive declares, and
a deflated entry may not inflate to more than ``MAX_RATIO`` times its stored bytes (ZIP bombs).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from onnxbridge.backends.dlc import flatbuf
from onnxbridge.errors import BadInputError

MAGIC = b"\xd5\x0a"
TOPOLOGY, PARAMS, WEIGHTS = "model", "model.params", "model.params.bin"
METADATA, HISTORY = "dlc.metadata2", "dlc.metadata.history"  # JSON entries, named with a version suffix
MAX_ENTRIES = 1000  # a DLC holds a handful
CHUNK = 1 << 20  # entries are read and inflated this many bytes at a time
# a deflated entry inflates to at most MAX_RATIO times its stored bytes once past RATIO_FLOOR bytes (FlatBuffers
# and JSON deflate 2-5x; ZIP bombs 1000x)
MAX_RATIO, RATIO_FLOOR = 16, 1 << 20
SHOWN = 12  # problem or difference lines listed; the rest are counted
# Qnn_DataType_t codes
DTYPES = {0x08: "int8", 0x16: "int16", 0x32: "int32", 0x64: "int64", 0x108: "uint8", 0x116: "uint16",
          0x132: "uint32", 0x164: "uint64", 0x216: "float16", 0x232: "float32", 0x308: "sfixed8",
          0x316: "sfixed16", 0x332: "sfixed32", 0x408: "ufixed8", 0x416: "ufixed16", 0x432: "ufixed32",
          0x508: "bool8", 0x608: "string", 0x7FFFFFFF: "undefined"}
# the integer type a quantized (fixed-point) tensor is stored as
STORAGE = {"sfixed8": "int8", "sfixed16": "int16", "sfixed32": "int32", "ufixed8": "uint8", "ufixed16": "uint16",
           "ufixed32": "uint32"}
LOCATIONS = {0: "input", 1: "output", 2: "null", 3: "native", 4: "static", 5: "updateable_static"}
ENCODINGS = {0: "scale_offset", 1: "axis_scale_offset", 2: "bw_scale_offset", 3: "bw_axis_scale_offset",
             4: "block", 5: "blockwise_expansion", 0x7FFFFFFF: None}


@dataclass
class Tensor:
    name: str
    location: str
    shape: list[int]
    dtype: str
    encoding: str | None = None
    scale: float | None = None
    bitwidth: int | None = None

    @property
    def quantized(self) -> bool:
        return self.dtype in STORAGE

    def as_dict(self) -> dict:
        out = {"name": self.name, "shape": self.shape, "dtype": self.dtype}
        if self.quantized:
            out.update(storage=STORAGE[self.dtype], encoding=self.encoding, scale=self.scale, bitwidth=self.bitwidth)
        return out


@dataclass
class Node:
    name: str
    type: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    tensors: dict[str, Tensor]

    def io(self, location: str) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.location == location]


@dataclass
class Dlc:
    """What a ``.dlc`` holds, as read by ``read``."""

    path: Path
    entries: dict[str, dict]
    version: tuple[int, int]
    identifiers: dict[str, str]
    graphs: list[Graph]
    weights: dict[str, tuple[int, int]]  # static tensor -> (offset, size) in model.params.bin
    weights_bytes: int
    metadata: dict = field(default_factory=dict)
    history: dict = field(default_factory=dict)
    # the newest ``converterCommand`` of the metadata history (tool, converterVersion, args)
    converter: dict = field(default_factory=dict)
    # where each entry's data lies in the file: (offset, stored bytes, ZIP compression method)
    spans: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # SHA-256 of the model and model.params entries


class Lines(list):
    """Report lines: the first ``SHOWN``, and a count of the rest (``more``)."""

    more = 0

    def add(self, line: str) -> None:
        if len(self) < SHOWN:
            self.append(line)
        else:
            self.more += 1

    def listed(self) -> list[str]:
        return [*self, *([f"... and {self.more} more"] if self.more else [])]


def clip(text: str, width: int = 80) -> str:
    """``text`` cut to ``width`` characters (a crafted file's names can be megabytes long)."""
    return text if len(text) <= width else text[:width - 3] + "..."


def names(items, limit: int = 5) -> str:
    """The first ``limit`` names, quoted and clipped, and how many more."""
    items = list(items)
    shown = ", ".join(f"'{clip(n)}'" for n in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _wanted(name: str, read: dict) -> bool:
    """Is ``name`` an entry the reader reads (``read``: those read so far)? The two FlatBuffers, and the first
    entry of each metadata JSON."""
    if name in (TOPOLOGY, PARAMS):
        return True
    prefix = next((p for p in (METADATA, HISTORY) if _named(name, p)), None)
    return prefix is not None and not any(_named(n, prefix) for n in read)


def _named(name: str, prefix: str) -> bool:
    return name.startswith(prefix) and (name == prefix or name[len(prefix)] == ".")


def _archive(path: Path) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error, NotImplementedError,
            OverflowError) as exc:
        raise BadInputError(f"'{path}' is not a DLC: not a ZIP container ({exc})") from None
    if len(archive.infolist()) > MAX_ENTRIES:
        archive.close()
        raise BadInputError(f"'{path}' is not a DLC: the ZIP holds {len(archive.infolist())} entries (a DLC holds "
                            "a handful)")
    return archive


def _span(f, where: str, info: zipfile.ZipInfo, file_size: int) -> tuple[int, int, int]:
    """Where an entry's data lies, from its local header: (offset, stored bytes, compression method); and the
    size it declares checked against them (a deflated entry past ``MAX_RATIO`` is a ZIP bomb)."""
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise BadInputError(f"{where} uses compression {info.compress_type}")
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise BadInputError(f"{where} is stored in {info.compress_size} bytes but declares {info.file_size}")
    if info.file_size > max(MAX_RATIO * info.compress_size, RATIO_FLOOR):
        raise BadInputError(f"{where} declares {info.file_size} bytes deflated into {info.compress_size}, more "
                            f"than {MAX_RATIO}x: a ZIP bomb or a corrupt DLC")
    local = b""
    if 0 <= info.header_offset <= file_size:
        f.seek(info.header_offset)
        local = f.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise BadInputError(f"{where} has no local header at {info.header_offset}")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    return info.header_offset + 30 + name_len + extra_len, info.compress_size, info.compress_type


def _entries(path: Path) -> tuple[dict[str, dict], dict[str, bytes], dict[str, tuple[int, int, int]]]:
    """Entry facts, the bytes of the entries the reader uses (``_wanted``), and where each entry's data lies,
    read from the local headers (the CRC fields of a DLC are 0, so no CRC check)."""
    facts, data, spans = {}, {}, {}
    with _archive(path) as archive, path.open("rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        for info in archive.infolist():
            where = f"'{path}': entry {info.filename!r}"
            spans[info.filename] = _span(f, where, info, file_size)
            facts[info.filename] = {"bytes": info.file_size, "method": "stored" if info.compress_type == 0 else
                                    "deflated", "crc": f"{info.CRC:08x}"}
            if _wanted(info.filename, data):
                data[info.filename] = b"".join(_chunks(f, where, spans[info.filename], info.file_size))
    return facts, data, spans


def _chunks(f, where: str, span: tuple[int, int, int], size: int) -> Iterator[bytes]:
    """An entry's bytes in chunks of at most ``CHUNK``: exactly the ``size`` the archive declares, stored or
    inflated from ``span``; BadInputError naming ``where`` when there are fewer or more, or when they are not a
    deflate stream."""
    offset, stored, method = span
    inflate = zlib.decompressobj(-15) if method == zipfile.ZIP_DEFLATED else None
    left = size
    f.seek(offset)
    while stored > 0:
        raw = f.read(min(CHUNK, stored))
        if not raw:
            raise BadInputError(f"{where} runs past the end of the file")
        stored -= len(raw)
        for chunk in _inflate(inflate, raw, where) if inflate is not None else (raw,):
            if len(chunk) > left:
                raise BadInputError(f"{where} inflates past the {size} bytes it declares")
            left -= len(chunk)
            yield chunk
    if left:
        raise BadInputError(f"{where} holds fewer bytes than the {size} it declares")


def _inflate(inflate, raw: bytes, where: str) -> Iterator[bytes]:
    """What ``raw`` inflates to, in chunks of at most ``CHUNK`` (a deflate stream can grow 1000x)."""
    while True:
        try:
            chunk = inflate.decompress(raw, CHUNK)
        except zlib.error as exc:
            raise BadInputError(f"{where} cannot be inflated ({exc})") from None
        raw = inflate.unconsumed_tail
        if chunk:
            yield chunk
        if not raw and len(chunk) < CHUNK:
            return


def _header(path: Path, name: str, body: bytes) -> tuple[tuple[int, int], bytes]:
    if len(body) < 16 or body[:2] != MAGIC:
        raise BadInputError(f"'{path}': DLC entry '{name}' lacks the D5 0A header (an SNPE 1.x DLC or not a DLC)",
                            hint="SNPE 1.x and SNPE2/QAIRT DLCs are incompatible; reconvert with QAIRT")
    major, minor = struct.unpack_from("<HH", body, 2)
    return (major, minor), body[8:]


def _value(table: flatbuf.Table | None):
    """An attribute's scalar (slot 0 kind: a Qnn_DataType_t; 1 int; 2 float64; 3 string)."""
    if table is None:
        return None
    kind = DTYPES.get(table.scalar(0, "I"), "")
    if kind == "string":
        return table.string(3, "")
    if kind.startswith("float"):
        return table.scalar(2, "d", 0.0)
    if kind == "bool8":
        return bool(table.scalar(1, "i"))
    return table.scalar(1, "i")


def _tensor(t: flatbuf.Table) -> Tensor:
    dtype = DTYPES.get(t.scalar(6, "I"), hex(t.scalar(6, "I")))
    tensor = Tensor(t.string(1, ""), LOCATIONS.get(t.scalar(2, "i"), str(t.scalar(2, "i"))), t.vector(3, "I"), dtype)
    quant = t.table(5)
    if quant is not None and dtype in STORAGE:
        tensor.encoding = ENCODINGS.get(quant.scalar(0, "i"), str(quant.scalar(0, "i")))
        if tensor.encoding == "scale_offset" and quant.has(2):
            enc = quant.table(2)
            tensor.bitwidth, tensor.scale = enc.scalar(0, "i") or None, enc.scalar(3, "f", 0.0)
    return tensor


def _node(n: flatbuf.Table) -> Node:
    attrs = {}
    for a in n.tables(4):
        name = a.string(0, "")
        if a.scalar(1, "i") == 1:  # tensor-valued (stride, pad_amount, perm): its shape, values live in NETP
            t = a.table(4)
            attrs[name] = {"tensor": t.string(1, ""), "shape": t.vector(3, "I")} if t is not None else None
        else:
            attrs[name] = _value(a.table(3))
    return Node(n.string(0, ""), n.string(1, ""), n.strings(2), n.strings(3), attrs)


def _metadata(path: Path, data: dict[str, bytes], prefix: str) -> dict:
    """The JSON object of the entry named ``prefix`` (or ``prefix.VERSION``); {} when there is none."""
    name = next((n for n in data if _named(n, prefix)), None)
    if name is None:
        return {}
    try:
        value = json.loads(data[name].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInputError(f"'{path}': entry {name!r} is not JSON ({clip(str(exc) or type(exc).__name__)})") \
            from None
    if not isinstance(value, dict):
        raise BadInputError(f"'{path}': entry {name!r} holds a JSON {type(value).__name__}, not an object")
    return value


def _converter(path: Path, history: dict) -> dict:
    """The newest ``converterCommand`` of the metadata history; BadInputError where it is not of that shape."""
    info = history.get("dlcGenerationInfo", [])
    last = info[-1] if isinstance(info, list) and info else {}
    command = last.get("converterCommand", {}) if isinstance(last, dict) else None
    if not isinstance(info, list) or not isinstance(command, dict) or \
            not all(isinstance(command.get(k), (str, type(None))) for k in ("tool", "converterVersion")):
        raise BadInputError(f"'{path}': the metadata history's dlcGenerationInfo is not a list ending in an object "
                            "whose converterCommand is an object with string tool and converterVersion")
    return command


def read(path: str | Path) -> Dlc:
    """Parse a ``.dlc``; BadInputError when it is not an SNPE2/QAIRT DLC we can read."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"'{path}' does not exist or is not a file")
    facts, data, spans = _entries(path)
    missing = [e for e in (TOPOLOGY, PARAMS) if e not in data]
    if missing:
        raise BadInputError(f"'{path}' is not a DLC: no {', '.join(missing)} entry (entries: {', '.join(facts)})")
    version, topo = _header(path, TOPOLOGY, data[TOPOLOGY])
    _, params = _header(path, PARAMS, data[PARAMS])
    idents = {TOPOLOGY: flatbuf.file_identifier(topo), PARAMS: flatbuf.file_identifier(params)}
    try:
        graphs = [Graph(g.string(0, ""), [_node(n) for n in g.tables(1)],
                        {t.name: t for t in map(_tensor, g.tables(2))}) for g in flatbuf.root(topo).tables(0)]
        weights = {}
        for g in flatbuf.root(params).tables(0):
            for td in [*g.tables(1), *(d for n in g.tables(2) for d in n.tables(0))]:
                ref = td.table(3)
                weights[td.string(0, "")] = (ref.scalar(0, "Q"), ref.scalar(1, "Q")) if ref else (0, 0)
    except (flatbuf.FlatBufferError, struct.error, IndexError) as exc:
        raise BadInputError(f"'{path}': the DLC graph cannot be read ({exc})") from None
    history = _metadata(path, data, HISTORY)
    return Dlc(path, facts, version, idents, graphs, weights, facts.get(WEIGHTS, {}).get("bytes", 0),
               _metadata(path, data, METADATA), history, _converter(path, history), spans,
               {name: hashlib.sha256(data[name]).hexdigest() for name in (TOPOLOGY, PARAMS)})


def weight_blob(dlc: Dlc) -> Iterator[bytes]:
    """The bytes of ``model.params.bin`` in chunks of at most ``CHUNK`` (inflated where the entry is deflated),
    exactly its declared size; BadInputError where they are not (``_chunks``)."""
    span = dlc.spans.get(WEIGHTS)
    if span is None:
        return
    with dlc.path.open("rb") as f:
        yield from _chunks(f, f"'{dlc.path}': {WEIGHTS}", span, dlc.weights_bytes)


def problems(dlc: Dlc) -> list[str]:
    """What is wrong with a DLC's structure (empty when it passes our checks; the first ``SHOWN`` lines, then
    a count of the rest)."""
    out = Lines()
    if dlc.identifiers.get(TOPOLOGY) != "NETD":
        out.add(f"'model' has FlatBuffer identifier {dlc.identifiers.get(TOPOLOGY)!r}, expected 'NETD'")
    if dlc.identifiers.get(PARAMS) not in ("NETP", "NR64"):
        out.add(f"'model.params' has FlatBuffer identifier {dlc.identifiers.get(PARAMS)!r}, expected 'NETP'")
    if dlc.version[0] != 4:
        out.add(f"DLC header version {dlc.version[0]}.{dlc.version[1]}, expected 4.x")
    if WEIGHTS not in dlc.entries and dlc.weights:  # a graph without weights has no blob
        out.add(f"no model.params.bin entry for its {len(dlc.weights)} weight(s)")
    if not dlc.graphs:
        out.add("no graph")
    for offset, size in dlc.weights.values():
        if offset + size > dlc.weights_bytes:
            out.add(f"a weight at {offset}+{size} runs past model.params.bin ({dlc.weights_bytes} bytes)")
            break
    for g in dlc.graphs:
        if not g.io("input") or not g.io("output"):
            out.add(f"graph '{clip(g.name)}' has no input or no output tensor")
        produced = {t.name for t in g.tensors.values() if t.location in ("input", "static")}
        for n in g.nodes:
            dangling = [i for i in n.inputs if i not in g.tensors]
            if dangling:
                out.add(f"node '{clip(n.name)}' reads unknown tensor(s) {names(dangling)}")
            produced.update(n.outputs)
        unread = [t.name for t in g.io("output") if t.name not in produced]
        if unread:
            out.add(f"graph '{clip(g.name)}': output(s) {names(unread)} produced by no node")
        unweighted = [t.name for t in g.tensors.values() if t.location == "static" and t.name not in dlc.weights]
        if unweighted:
            out.add(f"static tensor(s) without data in model.params: {names(unweighted)}")
    return out.listed()


def summary(dlc: Dlc) -> dict:
    """``snpe-dlc-info`` in outline: header, converter, I/O, op histogram, layers and tensor dtypes."""
    ops: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    layers = []
    for g in dlc.graphs:
        for n in g.nodes:
            ops[n.type] = ops.get(n.type, 0) + 1
            outs = [g.tensors.get(o) for o in n.outputs]
            layers.append({"name": n.name, "type": n.type, "inputs": ", ".join(n.inputs),
                           "outputs": ", ".join(n.outputs),
                           "out_dims": "; ".join("x".join(map(str, t.shape)) for t in outs if t is not None),
                           "out_dtype": ", ".join(t.dtype for t in outs if t is not None)})
        for t in g.tensors.values():
            dtypes[t.dtype] = dtypes.get(t.dtype, 0) + 1
    conv, found = dlc.converter, problems(dlc)
    return {
        "path": str(dlc.path), "format": "dlc", "file_bytes": dlc.path.stat().st_size,
        "dlc_version": f"{dlc.version[0]}.{dlc.version[1]}",
        "identifiers": ", ".join(f"{k}={v}" for k, v in dlc.identifiers.items()),
        "converter_tool": conv.get("tool"), "converter_version": conv.get("converterVersion"),
        "graphs": len(dlc.graphs), "nodes": len(layers),
        "static_tensors": sum(t.location == "static" for g in dlc.graphs for t in g.tensors.values()),
        "weights_bytes": dlc.weights_bytes,
        "quantized_tensors": sum(t.quantized for g in dlc.graphs for t in g.tensors.values()),
        "inputs": [t.as_dict() for g in dlc.graphs for t in g.io("input")],
        "outputs": [t.as_dict() for g in dlc.graphs for t in g.io("output")],
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "dtypes": dict(sorted(dtypes.items(), key=lambda kv: (-kv[1], kv[0]))),
        "entries": [{"name": k, **v} for k, v in dlc.entries.items()],
        "layers": layers,
        "reader_checks": "; ".join(found) or "passed",
        "problems": found,
    }
