"""What an ONNX file holds, read without loading its weights."""
from __future__ import annotations

import collections
import math
from pathlib import Path

from onnxbridge.fileio import external_files, iter_tensors, load_onnx, tensor_nbytes


def _dims(vi) -> list:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _dtype(vi) -> str:
    import onnx

    t = vi.type
    if t.HasField("tensor_type"):
        return onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type).name \
            if t.tensor_type.elem_type != onnx.TensorProto.STRING else "str"
    return t.WhichOneof("value")


def _count_nodes(graph, hist: collections.Counter) -> int:
    n = 0
    for node in graph.node:
        hist[f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type] += 1
        n += 1
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                n += _count_nodes(g, hist)
    return n


def summarize(path: str | Path) -> dict:
    """Opsets, IR, I/O, op histogram, parameters and external data of an ONNX file."""
    path = Path(path)
    model = load_onnx(path)
    g = model.graph
    init_names = {t.name for t in g.initializer}
    hist: collections.Counter = collections.Counter()
    nodes = _count_nodes(g, hist)
    params = sum(math.prod(t.dims) for t in g.initializer)
    param_bytes = sum(tensor_nbytes(t) for t in g.initializer)
    ext = []
    for loc in external_files(model):
        f = path.parent / loc
        ext.append({"location": loc, "bytes": f.stat().st_size if f.exists() else None, "exists": f.exists()})
    return {
        "path": str(path),
        "file_bytes": path.stat().st_size,
        "ir_version": model.ir_version,
        "opsets": {(imp.domain or "ai.onnx"): imp.version for imp in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "graph_name": g.name,
        "inputs": [{"name": i.name, "dtype": _dtype(i), "shape": _dims(i)} for i in g.input if i.name not in init_names],
        "outputs": [{"name": o.name, "dtype": _dtype(o), "shape": _dims(o)} for o in g.output],
        "nodes": nodes,
        "ops": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
        "functions": [f"{f.domain}::{f.name}" for f in model.functions],
        "parameters": params,
        "parameter_bytes": param_bytes,
        "tensor_bytes": sum(tensor_nbytes(t) for t in iter_tensors(model)),
        "external_data": ext,
        "metadata": {p.key: p.value for p in model.metadata_props},
    }


def _shape(s) -> str:
    from rich.markup import escape

    return "?" if s is None else escape("[" + ", ".join("?" if d is None else str(d) for d in s) + "]")


def _io_table(info: dict):
    from rich.table import Table

    io = Table("", "name", "dtype", "shape", title="inputs / outputs", title_justify="left")
    for kind in ("inputs", "outputs"):
        for v in info.get(kind, []):
            shape = _shape(v["shape"]) if "shape_range" not in v else \
                "[" + ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in v["shape_range"]) + "]"
            io.add_row(kind[:-1], v["name"], str(v["dtype"]), shape)
    return io


def _ops_table(ops: dict):
    from rich.table import Table

    table = Table("op", "count", title="ops", title_justify="left")
    for op, n in ops.items():
        table.add_row(op, str(n))
    return table


def render(info: dict, console) -> None:
    """An ``inspect`` result for the terminal: ONNX summaries, or any backend's artifact facts."""
    if "format" in info and info["format"] != "onnx":
        return render_artifact(info, console)
    opsets = ", ".join(f"{k} {v}" for k, v in info["opsets"].items())
    console.print(f"[bold]{info['path']}[/]  IR {info['ir_version']}, opset {opsets}, producer {info['producer']}")
    console.print(f"{info['nodes']} nodes, {info['parameters']:,} parameters ({info['parameter_bytes']:,} bytes)")
    console.print(_io_table(info))
    console.print(_ops_table(info["ops"]))
    for e in info["external_data"]:
        state = f"{e['bytes']:,} bytes" if e["exists"] else "[red]missing[/]"
        console.print(f"external data: {e['location']} ({state})")
    for k, v in info["metadata"].items():
        console.print(f"[dim]{k}: {v}[/]")


def render_artifact(info: dict, console) -> None:
    """A backend artifact's facts: scalars as lines, I/O and ops as tables, other lists of rows as tables."""
    from rich.table import Table

    console.print(f"[bold]{info['path']}[/]  {info['format']}")
    for key, value in info.items():
        if key not in ("path", "format") and isinstance(value, (str, int, float, bool)):
            console.print(f"{key.replace('_', ' ')}: {value}")
    console.print(_io_table(info))
    if isinstance(info.get("ops"), dict):
        console.print(_ops_table(info["ops"]))
    for key, rows in info.items():
        if key in ("inputs", "outputs") or not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
            continue
        columns = list(dict.fromkeys(k for row in rows for k in row))
        table = Table(*columns, title=key.replace("_", " "), title_justify="left")
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        console.print(table)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)) and all(isinstance(d, (int, type(None))) for d in value):
        return _shape(value)
    return str(value)
