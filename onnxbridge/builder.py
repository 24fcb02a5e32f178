"""The shared ONNX builder: every frontend's model passes through ``finalize`` before it is written."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge._version import __version__
from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    import onnx

MAX_IR_VERSION = 13  # onnxruntime 1.31 refuses IR 14
META_PREFIX = "onnxbridge."
# First IR version that can carry these element types.
_TYPE_IR = {"FLOAT8E4M3FN": 9, "FLOAT8E4M3FNUZ": 9, "FLOAT8E5M2": 9, "FLOAT8E5M2FNUZ": 9,
            "INT4": 10, "UINT4": 10, "FLOAT4E2M1": 11, "FLOAT8E8M0": 12, "INT2": 13, "UINT2": 13}


def required_ir_version(model: "onnx.ModelProto") -> int:
    """Lowest IR version the model's opsets, functions and element types need, capped for onnxruntime."""
    import onnx
    from onnxbridge.modelwalk import iter_tensors

    try:
        ir = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:  # opset newer than the installed onnx knows
        ir = min(model.ir_version, MAX_IR_VERSION)
    ir = max(ir, 4)  # IR 3 still requires every initializer to be a graph input
    if model.functions:
        ir = max(ir, 8)
    names = {onnx.TensorProto.DataType.Name(t.data_type) for t in iter_tensors(model)}
    g = model.graph
    names |= {onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type)
              for v in [*g.input, *g.output, *g.value_info] if v.type.HasField("tensor_type")}
    for name in names:
        ir = max(ir, _TYPE_IR.get(name, 0))
    return min(ir, MAX_IR_VERSION)


def set_ir_version(model: "onnx.ModelProto") -> None:
    model.ir_version = required_ir_version(model)


def name_nodes(graph: "onnx.GraphProto") -> None:
    """Give unnamed nodes stable names (op type + index) so errors and reports can point at them."""
    taken = {n.name for n in graph.node if n.name}
    for i, node in enumerate(graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)


def rename_values(graph: "onnx.GraphProto", mapping: dict[str, str]) -> None:
    """Rename values wherever they appear: graph inputs/outputs, initializers, value_info, node
    inputs/outputs, and subgraphs that read them from outside."""
    if not mapping:
        return
    for vi in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]:
        vi.name = mapping.get(vi.name, vi.name)
    for node in graph.node:
        for ports in (node.input, node.output):
            for i, name in enumerate(ports):
                if name in mapping:
                    ports[i] = mapping[name]
        for attr in node.attribute:
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                rename_values(g, mapping)


def stamp(model: "onnx.ModelProto", source: dict[str, str | None]) -> None:
    """Record provenance: onnxbridge as producer, the exporter and source framework in metadata."""
    props = {p.key: p.value for p in model.metadata_props}
    if model.producer_name and model.producer_name != "onnxbridge":
        props[f"{META_PREFIX}exporter"] = f"{model.producer_name} {model.producer_version}".strip()
    props[f"{META_PREFIX}version"] = __version__
    for key, value in source.items():
        if value is not None:
            props[f"{META_PREFIX}{key}"] = str(value)
    del model.metadata_props[:]
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    model.producer_name, model.producer_version = "onnxbridge", __version__


def finalize(model: "onnx.ModelProto", *, opset: int | None = None,
             source: dict[str, str | None] | None = None) -> tuple["onnx.ModelProto", list[str]]:
    """Deliver exactly ``opset`` (adapting if needed), set ir_version, stamp metadata, infer shapes.

    Returns the finished model and notes for the report. The checker runs on the written file
    (``check_file``), where external data can be resolved.
    """
    import onnx

    from onnxbridge import adapters

    notes: list[str] = []
    name_nodes(model.graph)
    have = adapters.default_opset(model)
    if opset is not None and have != opset:
        model = adapters.adapt(model, opset)
        notes.append(f"exporter produced opset {have}; adapted to {opset}")
    set_ir_version(model)
    stamp(model, source or {})
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # inference is a help, not a requirement
        notes.append(f"shape inference incomplete: {' '.join(str(exc).split())[:200]}")
    label_dims(model)
    return model, notes


_PROBES = ((10007, 10009, 10037, 10039, 10061, 10067, 10069, 10079), (20011, 20021, 20023, 20029, 20047, 20051,
                                                                      20063, 20071))


def label_dims(model: "onnx.ModelProto") -> int:
    """Name every output and intermediate dim that is one of the inputs' symbolic dims (``--dynamic x:0:batch``)
    after that symbol, where the exporter or shape inference left another name (``Conv18_dim_0``, ``unk__0``) or
    none. Which dims are the symbol is found by static inference at two sets of sizes, every symbol at a size no
    other dim has: a dim that equals the symbol's size both times is that symbol. Returns how many dims it named."""
    import onnx

    graph = model.graph
    inits = {t.name for t in graph.initializer}
    symbols = list(dict.fromkeys(d.dim_param for v in graph.input if v.name not in inits
                                 for d in v.type.tensor_type.shape.dim if d.dim_param))
    if not symbols or len(symbols) > len(_PROBES[0]):
        return 0
    trials = [dict(zip(symbols, sizes)) for sizes in _PROBES]
    seen = []
    for sizes in trials:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        del probe.graph.value_info[:]
        for v in probe.graph.input:
            for d in v.type.tensor_type.shape.dim:
                if d.dim_param in sizes:
                    d.dim_value = sizes[d.dim_param]
        for v in probe.graph.output:
            v.type.tensor_type.ClearField("shape")
        try:
            probe = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
        except Exception:
            return 0
        seen.append({v.name: [d.dim_value if d.HasField("dim_value") else None
                              for d in v.type.tensor_type.shape.dim]
                     for v in [*probe.graph.output, *probe.graph.value_info] if v.type.HasField("tensor_type")})
    named = 0
    for v in [*graph.output, *graph.value_info]:
        if not v.type.HasField("tensor_type") or not v.type.tensor_type.HasField("shape"):
            continue
        first, second = seen[0].get(v.name), seen[1].get(v.name)
        dims = v.type.tensor_type.shape.dim
        if first is None or second is None or len(first) != len(dims) or len(second) != len(dims):
            continue
        for i, d in enumerate(dims):
            if d.HasField("dim_value"):
                continue
            match = [s for s in symbols if first[i] == trials[0][s] and second[i] == trials[1][s]]
            if match and d.dim_param != match[0]:
                d.dim_param = match[0]
                named += 1
    return named


def check_file(path: str | Path) -> None:
    """Run the full checker on a written model (works with external data and over 2 GB)."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        msg = " ".join(str(exc).split())
        raise UnsupportedError(f"the ONNX checker rejects the model: {msg[:500]}") from None
    except onnx.shape_inference.InferenceError as exc:
        msg = " ".join(str(exc).split())
        raise UnsupportedError(f"ONNX shape inference rejects the model: {msg[:500]}") from None
    except FileNotFoundError as exc:
        raise BadInputError(f"model '{path}' refers to a missing file: {exc}") from None
