"""Legalization: small, exact, target-aware graph rewrites applied to an ONNX model before a backend builds it.

A ``Rule`` is a pattern (the nodes it replaces, found from one root node), a condition (when the target cannot
take those nodes as they are and the rewrite is exact) and a replacement (new nodes producing the same output
names). ``apply`` runs rules over a model and says which fired on which node. What rules share is in ``common``
and ``gelu`` (GELU's pattern, which the optimizer uses too), the rank rule in ``rank``, the approximations a user
may allow in ``approx``; each backend keeps its own rule set and hands it to ``apply`` (the DLC backend's:
``onnxbridge.backends.dlc.legalize``).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from onnxbridge.modelwalk import subgraphs

if TYPE_CHECKING:
    import numpy as np
    import onnx


@dataclass
class Match:
    """What a pattern found: the ``nodes`` it replaces (the root last), the tensors the replacement reads
    (``inputs``) and the output names it must produce (``outputs``)."""

    nodes: list
    inputs: dict[str, str]
    outputs: list[str]


@dataclass(frozen=True)
class Rule:
    """``pattern(graph, node)``: a Match rooted at ``node``, or None; ``condition(graph, match)``: whether to
    rewrite; ``replacement(graph, match)``: the nodes that take the match's place (new constants through
    ``graph.constant``)."""

    name: str
    pattern: Callable[["Graph", "onnx.NodeProto"], Match | None]
    condition: Callable[["Graph", Match], bool]
    replacement: Callable[["Graph", Match], list]


class Graph:
    """A model's main graph as rules see it: producers, consumers, constants, inferred types and shapes."""

    def __init__(self, model: "onnx.ModelProto"):
        self.model = model
        self.graph = model.graph
        self._names = itertools.count()
        self.refresh()

    def refresh(self) -> None:
        """Recompute the maps from the whole graph (``apply`` keeps them current rewrite by rewrite instead;
        rewrites keep the names and types of what they replace, so the types inferred once stay valid)."""
        g = self.graph
        self.nodes = list(g.node)  # the maps hold these very objects: ``apply`` knows nodes by identity
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, int] = {}
        for n in self.nodes:
            self._count(n, 1)
        self.outputs = {o.name for o in g.output}
        self._inputs = {i.name for i in g.input}
        self._initializer_names = {t.name for t in g.initializer}
        self.initializers = {t.name: t for t in g.initializer if t.name not in self._inputs}

    def _count(self, node: "onnx.NodeProto", step: int) -> None:
        """Add ``step`` to the consumer count of each name ``node`` (and its subgraphs) reads; drop counts of 0."""
        inner = {r for sub in subgraphs(node) for r in _references(sub)}
        for i in [*node.input, *inner]:
            count = self.consumers.get(i, 0) + step
            if count:
                self.consumers[i] = count
            else:
                del self.consumers[i]

    def remove(self, node: "onnx.NodeProto") -> None:
        """Take ``node`` out of the maps (what it read, what it produced)."""
        self._count(node, -1)
        for o in node.output:
            if o and self.producer.get(o) is node:
                del self.producer[o]

    def add(self, node: "onnx.NodeProto") -> None:
        """Put ``node`` into the maps."""
        self._count(node, 1)
        self.producer.update((o, node) for o in node.output if o)

    @functools.cached_property
    def types(self) -> dict:
        """Tensor name -> ONNX tensor type, inferred from the model the first time a rule asks."""
        import onnx

        g = self.graph
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model).graph
        except Exception:  # noqa: BLE001 - without inference, rules needing types or shapes do not fire
            inferred = g
        types = {v.name: v.type.tensor_type for v in [*inferred.input, *inferred.value_info, *inferred.output]
                 if v.type.HasField("tensor_type")}
        return {**types, **{t.name: _init_type(t) for t in g.initializer}}

    @property
    def opset(self) -> int:
        return next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def single_use(self, name: str) -> bool:
        """Whether ``name`` feeds exactly one node and is not a graph output (so its producer may go)."""
        return self.consumers.get(name, 0) == 1 and name not in self.outputs

    def produced_by(self, name: str, op_type: str, *, single_use: bool = True):
        """The node of ``op_type`` producing ``name`` (used nowhere else when ``single_use``), or None."""
        node = self.producer.get(name)
        if node is None or node.op_type != op_type or node.domain not in ("", "ai.onnx"):
            return None
        return node if not single_use or self.single_use(name) else None

    def value(self, name: str) -> "np.ndarray | None":
        """The constant value of tensor ``name`` (an initializer or a Constant node's), or None (also for weights in
        external data: rules never read those)."""
        from onnx import TensorProto, numpy_helper

        if name in self.initializers:
            t = self.initializers[name]
            return None if t.data_location == TensorProto.EXTERNAL else numpy_helper.to_array(t)
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def int_values(self, name: str) -> list[int | None] | None:
        """The elements of a 1-D integer tensor computed from constants and static dims (torch's ``Shape`` ->
        ``Gather`` -> ``Unsqueeze`` -> ``Concat`` chains), each an int or None where it depends on a dynamic dim;
        None when the tensor is not such a chain."""
        value = self.value(name)
        if value is not None:
            return [int(v) for v in value.reshape(-1)] if value.dtype.kind in "iu" and value.ndim <= 1 else None
        node = self.producer.get(name)
        if node is None or node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Shape" and len(node.input) == 1 and not node.attribute:
            t = self.types.get(node.input[0])
            return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] \
                if t is not None and t.HasField("shape") else None
        parts = [self.int_values(i) for i in node.input]
        if node.op_type == "Concat":
            return None if any(p is None for p in parts) else [v for p in parts for v in p]
        if node.op_type in ("Unsqueeze", "Squeeze", "Cast", "Identity"):
            return parts[0]
        if node.op_type == "Gather" and parts[0] is not None and parts[1] is not None:
            n = len(parts[0])
            return [parts[0][i] if i is not None and -n <= i < n else None for i in parts[1]]
        if node.op_type in ("Mul", "Add", "Sub", "Div") and None not in (parts[0], parts[1]) and \
                len(parts[1]) in (1, len(parts[0])):
            return [_int_op(node.op_type, a, b) for a, b in zip(parts[0], parts[1] * len(parts[0])
                                                                  if len(parts[1]) == 1 else parts[1])]
        return None

    def elem_type(self, name: str) -> int:
        """ONNX element type of ``name`` (0 when unknown)."""
        t = self.types.get(name)
        return t.elem_type if t is not None else 0

    def shape(self, name: str) -> list[int] | None:
        """The static shape of ``name``, or None when its rank or any dim is unknown."""
        t = self.types.get(name)
        if t is None or not t.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        return dims if all(d >= 0 for d in dims) else None

    def fresh(self, base: str) -> str:
        """A tensor or node name not used in the graph yet."""
        while True:
            name = f"{base}_legal{next(self._names)}"
            if name not in self.producer and name not in self.consumers and name not in self._initializer_names:
                return name

    def constant(self, base: str, array: "np.ndarray") -> str:
        """Add ``array`` as an initializer; its name."""
        from onnx import numpy_helper

        name = self.fresh(base)
        self.graph.initializer.append(numpy_helper.from_array(array, name))
        self._initializer_names.add(name)
        if name not in self._inputs:
            self.initializers[name] = self.graph.initializer[-1]
        return name

    def use_opset(self, domain: str, version: int) -> None:
        """Import ``domain`` at ``version`` unless the model imports it already."""
        from onnx import helper

        if not any(o.domain == domain for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid(domain, version))


def _int_op(op: str, a: int | None, b: int | None) -> int | None:
    """ONNX's integer Mul/Add/Sub/Div (Div truncates toward zero) on known values; None when either is unknown."""
    if a is None or b is None or (op == "Div" and b == 0):
        return None
    if op == "Div":
        quotient = abs(a) // abs(b)
        return quotient if (a >= 0) == (b > 0) else -quotient
    return {"Mul": a * b, "Add": a + b, "Sub": a - b}[op]


def _init_type(t: "onnx.TensorProto"):
    from onnx import helper

    return helper.make_tensor_type_proto(t.data_type, list(t.dims)).tensor_type


def apply(model: "onnx.ModelProto", rules: Sequence[Rule], *,
          in_place: bool = False) -> tuple["onnx.ModelProto", list[str]]:
    """A copy of ``model`` (``model`` itself when ``in_place``) with ``rules`` applied, in order, to every node of
    its main graph; and what fired, as ``"RULE (node NAME)"`` in firing order."""
    import onnx

    out = model
    if not in_place:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    graph = Graph(out)
    fired = rewrite(graph, rules)
    if fired:
        _drop_unused(out.graph)
    return out, fired


def rewrite(graph: Graph, rules: Sequence[Rule]) -> list[str]:
    """Apply ``rules`` to ``graph`` in place, keeping its maps current after each rewrite; what fired."""
    nodes, fired = graph.nodes, []
    keyed = _keyed(nodes)
    for rule in rules:
        placed: dict[int, tuple] = {}  # id(root) -> (root, its replacement): spliced once the pass is over
        removed: dict[int, "onnx.NodeProto"] = {}
        for was, key in keyed:  # the nodes as the pass starts, each known by its outputs
            node = graph.producer.get(key[0])
            if node is None or (node is not was and _key(node) != key):
                continue  # replaced by an earlier match
            match = rule.pattern(graph, node)
            if match is None or not rule.condition(graph, match):
                continue
            new = rule.replacement(graph, match)
            _replace(graph, match, new, removed)
            placed[id(match.nodes[-1])] = (match.nodes[-1], new)
            fired.append(f"{rule.name} (node {node.name or key[0]})")
        if placed:
            nodes = _splice(nodes, placed, removed)
            keyed = _keyed(nodes)
    if fired:
        _write(graph, nodes)
    return fired


def _keyed(nodes: list) -> list[tuple["onnx.NodeProto", tuple[str, ...]]]:
    """``(node, key)`` for each node with outputs."""
    return [(n, key) for n in nodes if (key := _key(n))]


def _key(node: "onnx.NodeProto") -> tuple[str, ...]:
    """A node's non-empty outputs: unique to it in a well-formed graph."""
    return tuple(o for o in node.output if o)


def _replace(graph: Graph, match: Match, nodes: list, removed: dict) -> None:
    """Swap the match's nodes for ``nodes`` in ``graph``'s maps, recording the removed ones by identity."""
    for n in match.nodes:
        graph.remove(n)
        removed[id(n)] = n
    for n in nodes:
        graph.add(n)


def _splice(nodes: list, placed: dict, removed: dict) -> list:
    """``nodes`` after a pass: each replacement where its root was (replacements of replacements too), the removed
    nodes gone."""
    out: list = []

    def put(n) -> None:
        if id(n) in placed:
            for m in placed[id(n)][1]:
                put(m)
        elif id(n) not in removed:
            out.append(n)

    for n in nodes:
        put(n)
    return out


def _write(graph: Graph, nodes: list) -> None:
    """Make ``nodes`` the graph's nodes and point ``graph.nodes`` and the producer map at the graph's copies
    (protobuf copies what it takes in; it keeps a removed message alive for its wrapper)."""
    g = graph.graph
    del g.node[:]
    g.node.extend(nodes)
    graph.nodes = list(g.node)
    graph.producer.update((o, n) for n in graph.nodes for o in n.output if o)


def _drop_unused(g: "onnx.GraphProto") -> None:
    """Remove Constant nodes, initializers and value_info the rewrites left unreferenced (subgraphs' references
    count)."""
    used = _references(g) | {i.name for i in g.input}
    nodes = [n for n in g.node if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or
             any(o in used for o in n.output)]
    del g.node[:]
    g.node.extend(nodes)
    produced = {o for n in g.node for o in n.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    info = [v for v in g.value_info if v.name in produced]
    del g.value_info[:]
    g.value_info.extend(info)


def _references(g: "onnx.GraphProto") -> set[str]:
    """Every tensor name read in ``g`` and its subgraphs, and ``g``'s outputs."""
    names = {o.name for o in g.output}
    for n in g.node:
        names.update(n.input)
        for sub in subgraphs(n):
            names |= _references(sub)
    return names
