"""Framework scopes on an exported ONNX graph: which tensors leave a scope's nodes, and the checkpoints they make.

A source-side probe (torch module, Keras layer, Paddle layer) knows its framework units by name; the exporter
records, per ONNX node, the units it came from (name scopes, node names). A unit's output on the ONNX side is the
tensor made by its last node that is read outside the unit (or is a graph output) and has the unit's output shape.
``ScopedGraph`` holds the producer/consumer index once; ``checkpoints`` turns the chosen tensors into
``Checkpoint``s in topological order, with the nearest checkpoints (or graph inputs) each depends on as ``inputs``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onnxbridge.localize.probe import Checkpoint

if TYPE_CHECKING:
    import onnx

FLOAT_TYPES = {1, 10, 11, 16}  # float, float16, double, bfloat16


def _subgraph_reads(node: "onnx.NodeProto") -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read from the enclosing graph (and their own, harmlessly)."""
    reads: set[str] = set()
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in g.node:
                reads.update(i for i in n.input if i)
                reads |= _subgraph_reads(n)
    return reads


@dataclass(frozen=True)
class Unit:
    """One framework unit's call as the exporter recorded it: ``nodes`` (indices into the graph's nodes)."""

    name: str
    nodes: tuple[int, ...]


class ScopedGraph:
    """An ONNX graph indexed once: producers, readers, graph inputs/outputs and known tensor shapes and types."""

    def __init__(self, model: "onnx.ModelProto"):
        self.model = model
        graph = model.graph
        self.nodes = list(graph.node)
        self.producer: dict[str, int] = {}
        self.readers: dict[str, set[int]] = {}
        for i, node in enumerate(self.nodes):
            for o in node.output:
                if o:
                    self.producer[o] = i
            for name in {*(x for x in node.input if x), *_subgraph_reads(node)}:
                self.readers.setdefault(name, set()).add(i)
        initializers = {t.name for t in graph.initializer}
        self.inputs = [v.name for v in graph.input if v.name not in initializers]
        self.outputs = {v.name for v in graph.output}
        self.types: dict[str, tuple[int, tuple | None]] = {}
        self._read_types(model)

    def _read_types(self, model: "onnx.ModelProto") -> None:
        g = model.graph
        values = [*g.input, *g.output, *g.value_info]
        if len(g.value_info) < len(self.producer) // 2:
            try:  # infer the rest; a model over 2 GiB (or an odd op) keeps what the exporter wrote
                import onnx

                values += list(onnx.shape_inference.infer_shapes(model).graph.value_info)
            except Exception:  # noqa: BLE001 - shapes are a refinement, not a need
                pass
        for v in values:
            t = v.type.tensor_type if v.type.HasField("tensor_type") else None
            if t is None:
                continue
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim) \
                if t.HasField("shape") else None
            self.types.setdefault(v.name, (t.elem_type, dims))

    def is_float(self, name: str) -> bool:
        """Whether ``name`` is a float tensor (True where its type is unknown)."""
        elem = self.types.get(name, (0, None))[0]
        return elem == 0 or elem in FLOAT_TYPES

    def fits(self, name: str, shape: Sequence[int | None] | None) -> bool:
        """Whether ``name``'s known shape agrees with ``shape`` (None dims on either side match anything)."""
        dims = self.types.get(name, (0, None))[1]
        if dims is None or shape is None:
            return True
        return len(dims) == len(shape) and all(a is None or b is None or a == b for a, b in zip(dims, shape))

    def leaving(self, nodes: Iterable[int]) -> list[str]:
        """Tensors made inside ``nodes`` and read outside them (or graph outputs), by their producer's order."""
        inside = set(nodes)
        out = []
        for i in sorted(inside):
            for o in self.nodes[i].output:
                if o and (o in self.outputs or any(r not in inside for r in self.readers.get(o, ()))):
                    out.append(o)
        return out

    def output_of(self, nodes: Iterable[int], shape: Sequence[int | None] | None) -> str | None:
        """The tensor a unit hands on: the last float tensor leaving ``nodes`` whose shape fits ``shape``."""
        fitting = [t for t in self.leaving(nodes) if self.is_float(t) and self.fits(t, shape)]
        return fitting[-1] if fitting else None

    def checkpoints(self, sources: Mapping[str, str | None]) -> list[Checkpoint]:
        """``Checkpoint``s for tensor -> source name, in topological order; each one's ``inputs`` are the nearest
        checkpoints or graph inputs its producer depends on (constants and initializers left out)."""
        chosen = set(sources)
        seen: dict[str, frozenset[str]] = {n: frozenset([n]) for n in self.inputs}
        out = []
        for node in self.nodes:
            deps: set[str] = set()
            for name in {*(x for x in node.input if x), *_subgraph_reads(node)}:
                deps |= seen.get(name, frozenset())
            frozen = frozenset(deps)
            for o in node.output:
                if not o:
                    continue
                if o in chosen:
                    out.append(Checkpoint(o, node.name or o, node.op_type, tuple(sorted(frozen)), sources[o]))
                    seen[o] = frozenset([o])
                else:
                    seen[o] = frozen
        return out


def segments(nodes: Sequence[int]) -> list[tuple[int, ...]]:
    """``nodes`` (sorted indices) split into runs of consecutive indices: one per call of a unit called several
    times, where the exporter wrote each call's nodes together."""
    runs: list[list[int]] = []
    for i in nodes:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return [tuple(r) for r in runs]


def depth(name: str) -> int:
    """How deep a dotted or slashed framework name is (deeper names are more precise)."""
    return name.count(".") + name.count("/")
