"""fp16 models: float weights, constants, casts and values in fp16, with fp32 inputs and outputs kept
at the boundary (Casts), so callers feed and read the same arrays as before.

An initializer or Constant stays fp32 where an op's schema does not take fp16 at that input (Resize and
Upsample scales); weights beyond the fp16 range are clamped to ±65504 rather than turned into inf.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

F32, F16 = 1, 10
FP16_MAX = 65504.0


def _fp32_only_inputs(graph: "onnx.GraphProto", opset: int) -> set[str]:
    """Names read at an input whose type constraint has no tensor(float16)."""
    import onnx.defs

    keep: set[str] = set()
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset)
        except onnx.defs.SchemaError:
            continue
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        for i, name in enumerate(node.input):
            if not name or not schema.inputs:
                continue
            formal = schema.inputs[min(i, len(schema.inputs) - 1)]
            types = allowed.get(formal.type_str, {formal.type_str})
            if "tensor(float)" in types and "tensor(float16)" not in types:
                keep.add(name)
    return keep


def to_fp16(model: "onnx.ModelProto", *, base_dir: str | Path | None = None, keep_io: bool = True) -> "onnx.ModelProto":
    """A copy of ``model`` computing in fp16 (``base_dir``: where its external weights live)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from onnxbridge.adapters import default_opset

    out = onnx.ModelProto()
    out.CopyFrom(model)
    opset = default_opset(out)

    def half(t: "onnx.TensorProto") -> None:
        if t.data_type != F32:
            return
        arr = numpy_helper.to_array(t, base_dir=str(base_dir) if base_dir else "")
        t.CopyFrom(numpy_helper.from_array(np.clip(arr, -FP16_MAX, FP16_MAX).astype(np.float16), t.name))

    def retype(vi) -> None:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == F32:
            vi.type.tensor_type.elem_type = F16

    def graph(g: "onnx.GraphProto") -> None:
        keep = _fp32_only_inputs(g, opset)
        for t in g.initializer:
            if t.name not in keep:
                half(t)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR and not (node.op_type == "Constant" and node.output[0] in keep):
                    half(a.t)
                elif a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i == F32:
                    a.i = F16
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    for vi in [*sub.input, *sub.output]:
                        retype(vi)
                    graph(sub)
        del g.value_info[:]  # re-inferred below

    graph(out.graph)
    g = out.graph
    casts_in, casts_out = [], []
    for is_input, values in ((True, g.input), (False, g.output)):
        for vi in values:
            if vi.type.tensor_type.elem_type != F32:
                continue
            if not keep_io:
                retype(vi)
                continue
            inner = f"{vi.name}__fp16"
            _rename_reads(g, vi.name, inner)
            if is_input:
                casts_in.append(helper.make_node("Cast", [vi.name], [inner], to=F16, name=f"{vi.name}__to_fp16"))
            else:
                for node in g.node:
                    node.output[:] = [inner if o == vi.name else o for o in node.output]
                casts_out.append(helper.make_node("Cast", [inner], [vi.name], to=F32, name=f"{vi.name}__to_fp32"))
    nodes = [*casts_in, *g.node, *casts_out]
    del g.node[:]
    g.node.extend(nodes)
    _matmul_before_transpose(g)
    return out


def _matmul_before_transpose(graph: "onnx.GraphProto") -> None:
    """Rewrite ``Transpose(perm) -> MatMul(., W)``, W a 2-D weight and the last axis left in place, as
    ``MatMul(., W) -> Transpose(perm)``: the same dot products, and a graph onnxruntime's CPU provider can load.

    onnxruntime (1.24 to 1.32 at least, x86-64) segfaults while creating a default session for an fp16 graph
    with that pattern (its NCHWc pass reads a Cast it inserted for the fp16 MatMul before the Cast has a schema:
    microsoft/onnxruntime#28392); torch's nn.MultiheadAttention exports it for every attention block."""
    from onnx import helper

    producers = {o: n for n in graph.node for o in n.output}
    readers: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    weights = {t.name: len(t.dims) for t in graph.initializer}
    nodes = []
    for node in graph.node:
        t = producers.get(node.input[0]) if node.op_type == "MatMul" and node.input else None
        perm = next((list(a.ints) for a in t.attribute if a.name == "perm"), None) if t is not None and \
            t.op_type == "Transpose" else None
        if perm and perm[-1] == len(perm) - 1 and weights.get(node.input[1]) == 2:
            product = f"{node.output[0]}__before_transpose"
            nodes.append(helper.make_node("MatMul", [t.input[0], node.input[1]], [product], name=node.name))
            nodes.append(helper.make_node("Transpose", [product], [node.output[0]], perm=perm,
                                          name=f"{node.name}__transpose"))
            readers[node.input[0]] -= 1
            continue
        nodes.append(node)
    outputs = {o.name for o in graph.output}
    kept = [n for n in nodes if not (n.op_type == "Transpose" and n.output and readers.get(n.output[0], 1) == 0
                                     and n.output[0] not in outputs)]
    del graph.node[:]
    graph.node.extend(kept)


def _rename_reads(graph: "onnx.GraphProto", old: str, new: str) -> None:
    """Every node input ``old`` (subgraphs included) reads ``new`` instead."""
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename_reads(sub, old, new)
