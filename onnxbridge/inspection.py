"""What an ONNX file holds, read without loading its weights."""
from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.external_data import external_files
from onnxbridge.modelwalk import iter_tensors, subgraphs, tensor_nbytes
from onnxbridge.onnxio import load_onnx
from onnxbridge.renderers.text import console_markup  # names from the model: shown, never sent

if TYPE_CHECKING:
    import onnx

SHOWN_METADATA, SHOWN_CHARS = 20, 200  # the terminal view cuts metadata (``--json`` has all of it)


def _text(value) -> str:
    """A string field as text: protobuf hands back bytes for a string that is not UTF-8 (a damaged file)."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _dims(vi) -> list | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (_text(d.dim_param) or None) for d in t.shape.dim]


def dtype_name(code: int) -> str:
    """numpy's name for an ONNX element type ("str" for strings), or ``unknown(N)`` for a code onnx does not define."""
    import onnx

    if code == onnx.TensorProto.STRING:
        return "str"
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(code).name
    except (KeyError, ValueError, TypeError):
        return f"unknown({code})"


def _dtype(vi) -> str:
    t = vi.type
    if t.HasField("tensor_type"):
        return dtype_name(t.tensor_type.elem_type)
    return t.WhichOneof("value") or "none"


def _nbytes(t) -> int:
    """A tensor's declared byte size; 0 for a dtype onnx does not know or impossible dims (a damaged file)."""
    try:
        return max(0, tensor_nbytes(t)) if all(d >= 0 for d in t.dims) else 0
    except (KeyError, ValueError, TypeError):
        return 0


def _count_nodes(graph, hist: collections.Counter) -> int:
    n = 0
    for node in graph.node:
        domain, op = _text(node.domain), _text(node.op_type)
        hist[f"{domain}::{op}" if domain not in ("", "ai.onnx") else op] += 1
        n += 1
        for g in subgraphs(node):
            n += _count_nodes(g, hist)
    return n


def _external(folder: Path, location: str) -> dict:
    """An external data file's size (``load_onnx`` has refused locations outside the model's folder)."""
    path = folder / location
    exists = path.is_file()
    return {"location": location, "bytes": path.stat().st_size if exists else None, "exists": exists}


def summarize(model: "str | Path | onnx.ModelProto | bytes") -> dict:
    """Opsets, IR, I/O, op histogram, parameters and external data of an ONNX file (or a loaded model or its
    serialized bytes: then ``path`` is None and external data is not looked for)."""
    import onnx

    from onnxbridge.errors import BadInputError

    if isinstance(model, (str, Path)):
        path: Path | None = Path(model)
        model = load_onnx(path)
    elif isinstance(model, (bytes, bytearray)):
        path, data = None, bytes(model)
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and its C variants
            raise BadInputError(f"the bytes given are not an ONNX model ({type(exc).__name__})") from None
    elif isinstance(model, onnx.ModelProto):
        path = None
    else:
        raise BadInputError(f"inspect_model takes a path, an onnx.ModelProto or its bytes, not "
                            f"{type(model).__name__}")
    g = model.graph
    init_names = {t.name for t in g.initializer}
    hist: collections.Counter = collections.Counter()
    nodes = _count_nodes(g, hist)
    valid = [t for t in g.initializer if all(d >= 0 for d in t.dims)]
    return {
        "path": str(path) if path else None,
        "file_bytes": path.stat().st_size if path else model.ByteSize(),
        "ir_version": model.ir_version,
        "opsets": {(_text(imp.domain) or "ai.onnx"): imp.version for imp in model.opset_import},
        "producer": f"{_text(model.producer_name)} {_text(model.producer_version)}".strip(),
        "graph_name": _text(g.name),
        "inputs": [{"name": _text(i.name), "dtype": _dtype(i), "shape": _dims(i)} for i in g.input
                   if i.name not in init_names],
        "outputs": [{"name": _text(o.name), "dtype": _dtype(o), "shape": _dims(o)} for o in g.output],
        "nodes": nodes,
        "ops": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
        "functions": [f"{_text(f.domain)}::{_text(f.name)}" for f in model.functions],
        "parameters": sum(math.prod(t.dims) for t in valid),
        "parameter_bytes": sum(_nbytes(t) for t in valid),
        "tensor_bytes": sum(_nbytes(t) for t in iter_tensors(model)),
        "external_data": [_external(path.parent, loc) for loc in external_files(model)] if path else [],
        "metadata": {_text(p.key): _text(p.value) for p in model.metadata_props},
    }


def _shape(s) -> str:
    return "?" if s is None else console_markup("[" + ", ".join("?" if d is None else str(d) for d in s) + "]")


def _io_table(info: dict):
    from rich.table import Table

    io = Table("", "name", "dtype", "shape", title="inputs / outputs", title_justify="left")
    for kind in ("inputs", "outputs"):
        for v in info.get(kind, []):
            shape = _shape(v["shape"]) if "shape_range" not in v else \
                "[" + ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in v["shape_range"]) + "]"
            io.add_row(kind[:-1], console_markup(v["name"]), console_markup(str(v["dtype"])), shape)
    return io


def _ops_table(ops: dict):
    from rich.table import Table

    table = Table("op", "count", title="ops", title_justify="left")
    for op, n in ops.items():
        table.add_row(console_markup(op), str(n))
    return table


def render(info: dict, console) -> None:
    """An ``inspect`` result for the terminal: ONNX summaries, or any backend's artifact facts."""
    if "format" in info and info["format"] != "onnx":
        return render_artifact(info, console)
    opsets = ", ".join(f"{k} {v}" for k, v in info["opsets"].items())
    console.print(f"[bold]{console_markup(str(info['path']))}[/]  IR {info['ir_version']}, "
                  f"opset {console_markup(opsets)}, producer {console_markup(info['producer'])}")
    console.print(f"{info['nodes']} nodes, {info['parameters']:,} parameters ({info['parameter_bytes']:,} bytes)")
    console.print(_io_table(info))
    console.print(_ops_table(info["ops"]))
    for e in info["external_data"]:
        state = f"{e['bytes']:,} bytes" if e["exists"] else "[red]missing[/]"
        console.print(f"external data: {console_markup(e['location'])} ({state})")
    _metadata(info["metadata"], console)


def _metadata(metadata: dict, console) -> None:
    """Metadata lines, each value cut to SHOWN_CHARS and at most SHOWN_METADATA of them."""
    for k, v in list(metadata.items())[:SHOWN_METADATA]:
        console.print(f"[dim]{console_markup(_cut(k))}: {console_markup(_cut(v))}[/]", overflow="fold")
    if len(metadata) > SHOWN_METADATA:
        console.print(f"[dim]... {len(metadata) - SHOWN_METADATA:,} more metadata entries (--json has all)[/]")


def render_artifact(info: dict, console) -> None:
    """A backend artifact's facts: scalars as lines, I/O and ops as tables, other lists of rows as tables."""
    from rich.table import Table

    console.print(f"[bold]{console_markup(str(info['path']))}[/]  {console_markup(str(info['format']))}")
    for key, value in info.items():
        if key not in ("path", "format") and isinstance(value, (str, int, float, bool)):
            console.print(f"{console_markup(key.replace('_', ' '))}: {console_markup(_cut(str(value)))}",
                          overflow="fold")
    console.print(_io_table(info))
    if isinstance(info.get("ops"), dict):
        console.print(_ops_table(info["ops"]))
    for key, rows in info.items():
        if key in ("inputs", "outputs") or not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
            continue
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = Table(*map(console_markup, columns), title=console_markup(key.replace("_", " ")), title_justify="left")
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        console.print(table)


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters; --json has all)"


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)) and all(isinstance(d, (int, type(None))) for d in value):
        return _shape(value)
    return console_markup(_cut(str(value)))
