"""Walking an ONNX model: its nested graphs, every tensor it holds, and their sizes in bytes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import onnx


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
