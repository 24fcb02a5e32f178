"""Loading a self-contained ONNX file with its large weights left where they lie in the file: the model's wire
bytes are edited to point at them as external data, so they are neither parsed nor copied."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.external_data import MIN_EXTERNAL_TENSOR
from onnxbridge.onnxio import load_onnx
from onnxbridge.protowire import length_field, wire_fields

if TYPE_CHECKING:
    import onnx


def load_in_place(path: str | Path, *, min_bytes: int = MIN_EXTERNAL_TENSOR) -> "onnx.ModelProto":
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


def _in_place(buf, location: str, min_bytes: int) -> bytes | None:
    """The ModelProto bytes of ``buf`` with every main-graph initializer's raw_data of ``min_bytes`` or more
    replaced by an external reference to where it lies in ``buf`` (file ``location``); None when ``buf`` already
    refers to external data or has no such initializer."""
    out, found = bytearray(), False
    for number, tag_at, start, stop in wire_fields(buf, 0, len(buf)):
        if number != 7:  # ModelProto.graph
            out += buf[tag_at:stop]
            continue
        graph = bytearray()
        for g_number, g_tag, g_start, g_stop in wire_fields(buf, start, stop):
            if g_number != 5:  # GraphProto.initializer
                graph += buf[g_tag:g_stop]
                continue
            tensor, raw = bytearray(), None
            for t_number, t_tag, t_start, t_stop in wire_fields(buf, g_start, g_stop):
                if t_number == 14 and buf[t_start] == 1:  # data_location EXTERNAL
                    return None
                if t_number == 9 and t_stop - t_start >= min_bytes:  # raw_data
                    raw = (t_start, t_stop - t_start)
                else:
                    tensor += buf[t_tag:t_stop]
            if raw is not None:
                found = True
                for key, value in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1]))):
                    entry = length_field(1, key.encode()) + length_field(2, value.encode())
                    tensor += length_field(13, entry)  # TensorProto.external_data
                tensor += b"\x70\x01"  # TensorProto.data_location = EXTERNAL
            graph += length_field(5, bytes(tensor))
        out += length_field(7, bytes(graph))
    return bytes(out) if found else None
