"""Walk every node of a model from its opset to the target, one schema step at a time.

Each node is handled on its own (linear time): its chain of schema versions between the two
opsets is looked up, and each step applies the registered rewrite or, for an unchanged signature,
passes (checking element types going down). Subgraphs are adapted with their parent node;
model-local functions are inlined first.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from onnxbridge.adapters import schema
from onnxbridge.adapters.folding import ConstantFolder
from onnxbridge.adapters.registry import DOWN, UP, load_rules
from onnxbridge.adapters.rewriter import Rewriter, read_names
from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx

DEFAULT = ("", "ai.onnx")
_GRAPH_ATTRS = (5, 10)  # AttributeProto.GRAPH, GRAPHS


def value_types(model: "onnx.ModelProto | bytes") -> dict:
    """Type records (ValueInfoProto or TensorProto) of every value shape inference can tell, subgraphs
    included; the Rewriter reads element type and dims from them when asked."""
    import onnx

    if isinstance(model, bytes):
        model = onnx.load_from_string(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        inferred = model
    types: dict = {}

    def visit(graph):
        types.update((t.name, t) for t in graph.initializer)
        types.update((v.name, v) for v in graph.value_info)
        types.update((v.name, v) for v in graph.input)
        types.update((v.name, v) for v in graph.output)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                        visit(g)

    visit(inferred.graph)
    return types


class LazyTypes(dict):
    """Value types, inferred only when a rewrite first asks for one (upgrades often never do)."""

    def __init__(self, model: "onnx.ModelProto"):
        super().__init__()
        self.source = model.SerializeToString()  # the model as it was before any rewrite
        self._model = self.source
        self._present: frozenset | None = None
        self._steps: dict[tuple, bool] = {}

    def get(self, name, default=None):
        if self._model is not None:
            model, self._model = self._model, None
            for key, value in value_types(model).items():
                self.setdefault(key, value)
            self.get = super().get  # from now on, plain dict lookups
        return super().get(name, default)

    def present(self) -> frozenset:
        """Element types (ints) and kinds ("seq", "optional") that occur anywhere in the model."""
        if self._present is None:
            self.get("")
            found = set()
            for value in self.values():
                if isinstance(value, tuple):
                    found.add(value[0])
                elif hasattr(value, "data_type"):
                    found.add(value.data_type)
                else:
                    which = value.type.WhichOneof("value")
                    if which == "tensor_type":
                        found.add(value.type.tensor_type.elem_type)
                    else:
                        found.update(("seq", "optional"))  # inner types unknown here: check such steps
            self._present = frozenset(found)
        return self._present

    def step_needs_check(self, op: str, newer: int, older: int) -> bool:
        """Whether any node of ``op`` could fail the type check moving ``newer`` -> ``older``: some
        type the model uses is allowed by ``newer`` and not ``older``, or type variables merge."""
        key = (op, newer, older)
        if key not in self._steps:
            present = self.present()
            need = False
            for output in (False, True):
                new, old = schema.params(op, newer, output), schema.params(op, older, output)
                for i, (var, elems, kinds) in enumerate(new):
                    ovar, oelems, okinds = old[min(i, len(old) - 1)] if old else (None, elems, kinds)
                    need |= bool((elems - oelems) & present) or bool((kinds - okinds) & present)
                old_vars = [p[0] for p in old]
                new_vars = [p[0] for p in new[:len(old)]]
                need |= len(set(old_vars)) < len(set(new_vars))
            self._steps[key] = need
        return self._steps[key]

    def __contains__(self, name) -> bool:
        self.get(name)
        return super().__contains__(name)


class Collector:
    """Gathers every blocker instead of stopping at the first (``adapt --check``)."""

    def __init__(self, collect: bool):
        self.collect = collect
        self.problems: list[str] = []

    def fail(self, exc: UnsupportedError) -> None:
        if not self.collect:
            raise exc
        self.problems.append(str(exc))


def convert(model: "onnx.ModelProto", target: int, *, collect: bool = False) -> tuple["onnx.ModelProto", list[str]]:
    """Adapt a copy of ``model`` to default-domain ``target``; returns it and the blockers found
    (with ``collect`` the walk goes on past blockers, leaving those nodes unchanged)."""
    import onnx

    load_rules()
    src = next((i.version for i in model.opset_import if i.domain in DEFAULT), None)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if out.functions:
        import onnx.inliner

        out = onnx.inliner.inline_local_functions(out)
    if src is None or src == target:
        return out, []
    types = LazyTypes(out)
    sink = Collector(collect)
    touched: set[str] = set()
    folder = ConstantFolder(types.source, src, lambda name: Rewriter(out.graph, types).shape(name))
    _graph(out.graph, src, target, types, None, sink, touched, folder)
    if touched:
        _drop_orphans(out.graph, touched)
    for imp in out.opset_import:
        if imp.domain in DEFAULT:
            imp.version = target
    return out, sink.problems


def _drop_orphans(graph: "onnx.GraphProto", touched: set[str]) -> None:
    """Remove initializers a rewrite stopped using (an axes input that became an attribute)."""
    used = read_names(graph) | {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name in used or t.name not in touched]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


def _graph(graph: "onnx.GraphProto", src: int, dst: int, types, outer: Rewriter | None, sink: Collector,
           touched: set[str], folder: ConstantFolder | None = None) -> None:
    rw = Rewriter(graph, types, outer, touched, folder)
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            if attr.type in _GRAPH_ATTRS:
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    _graph(g, src, dst, types, rw, sink, touched)
        if node.domain not in DEFAULT:
            nodes.append(node)
            continue
        try:
            nodes.extend(_node(node, src, dst, rw))
        except UnsupportedError as exc:
            sink.fail(exc)
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(rw.new_initializers)


def _label(node: "onnx.NodeProto") -> str:
    return f"node '{node.name}' ({node.op_type})" if node.name else f"a {node.op_type} node"


def _node(node: "onnx.NodeProto", at: int, dst: int, rw: Rewriter) -> list["onnx.NodeProto"]:
    """The nodes that express ``node`` (valid at opset ``at``) at opset ``dst``."""
    op = node.op_type
    if not schema.known(op):
        raise UnsupportedError(f"{_label(node)}: '{op}' is not an operator this onnx knows")
    v = schema.version_at(op, at)
    if v is None:
        raise UnsupportedError(f"{_label(node)}: {op} does not exist at opset {at}")
    return _up(node, v, dst, rw) if dst > at else _down(node, v, dst, rw)


def _carry(nodes: list["onnx.NodeProto"], at: int, dst: int, rw: Rewriter) -> list["onnx.NodeProto"]:
    return [m for n in nodes for m in _node(n, at, dst, rw)]


@functools.lru_cache(maxsize=None)
def _later(op: str, v: int, dst: int) -> tuple[int, ...]:
    return tuple(x for x in schema.versions(op) if v < x <= dst)


@functools.lru_cache(maxsize=None)
def _earlier(op: str, v: int) -> int | None:
    found = [x for x in schema.versions(op) if x < v]
    return found[-1] if found else None


def _up(node, v: int, dst: int, rw: Rewriter):
    op = node.op_type
    for nv in _later(op, v, dst):
        rewrite = UP.get((op, nv))
        if nv == schema.removed_at(op):
            if rewrite is None:
                raise UnsupportedError(f"{_label(node)}: {op} is deprecated from opset {nv} and has no replacement",
                                       hint=f"keep opset < {nv}")
            return _carry(_apply(rewrite, node, rw, nv, up=True) or [node], nv, dst, rw)
        if rewrite is None:
            if not (schema.same_signature(op, v, nv) or schema.additive(op, v, nv)):
                raise UnsupportedError(f"{_label(node)}: no adapter for {op} {v} -> {nv}", hint=f"keep opset < {nv}")
            if schema.types_narrowed(op, v, nv):  # e.g. Dropout 10's mask became bool
                _check_types(node, op, nv, nv, rw)
        else:
            result = _apply(rewrite, node, rw, nv, up=True)
            if result is not None:
                return _carry(result, nv, dst, rw)
        v = nv
    return [node]


def _down(node, v: int, dst: int, rw: Rewriter):
    op = node.op_type
    while True:
        target = schema.version_at(op, dst)
        if target == v:
            return [node]
        prev = _earlier(op, v)
        rewrite = DOWN.get((op, v))
        if prev is None or target is None and v == schema.first_version(op):
            if rewrite is None:
                raise UnsupportedError(f"{_label(node)}: {op} first appears in opset {v} and has no "
                                       "decomposition for earlier opsets", hint=f"keep opset >= {v}")
            return _carry(_apply(rewrite, node, rw, v, up=False), v - 1, dst, rw)
        if rewrite is None:
            if schema.additive(op, prev, v) and not schema.same_signature(op, prev, v):
                _check_features(node, op, prev, v)
            elif not schema.same_signature(op, prev, v):
                raise UnsupportedError(f"{_label(node)}: no adapter for {op} {v} -> {prev}", hint=f"keep opset >= {v}")
            if schema.types_narrowed(op, v, prev) and _step_needs_check(rw, op, v, prev):
                _check_types(node, op, prev, v, rw)
        else:
            result = _apply(rewrite, node, rw, v, up=False)
            if result is not None:
                return _carry(result, v - 1, dst, rw)
            if schema.types_narrowed(op, v, prev) and _step_needs_check(rw, op, v, prev):
                _check_types(node, op, prev, v, rw)
        v = prev


def _apply(rewrite, node, rw: Rewriter, version: int, *, up: bool):
    rw.touched.update(i for i in node.input if i in rw.initializers)
    try:
        return rewrite(node, rw)
    except UnsupportedError as exc:
        if exc.hint:
            raise
        raise UnsupportedError(f"{_label(node)}: {exc}",
                               hint=f"keep opset {'<' if up else '>='} {version}") from None


def _check_features(node, op: str, prev: int, v: int) -> None:
    """A node may step down past added optional inputs/outputs/attributes only if it does not use them."""
    max_in, max_out, attrs = schema.new_features(op, prev, v)
    used = [a.name for a in node.attribute if a.name not in attrs]
    used += [f"input {i}" for i, name in enumerate(node.input) if name and i >= max_in]
    used += [f"output {i}" for i, name in enumerate(node.output) if name and i >= max_out]
    if used:
        raise UnsupportedError(f"{_label(node)}: uses {', '.join(used)}, which {op} has only from opset {v}",
                               hint=f"keep opset >= {v}")


def _step_needs_check(rw: Rewriter, op: str, newer: int, older: int) -> bool:
    types = rw.types
    return types.step_needs_check(op, newer, older) if isinstance(types, LazyTypes) else True


def _check_types(node, op: str, version: int, changed_at: int, rw: Rewriter) -> None:
    """Every known input/output type must be allowed by ``op``-``version``, and inputs/outputs that
    share a type variable there must agree (BatchNormalization 15 -> 14 with fp16 X and fp32 scale)."""
    bound: dict[str, int] = {}
    for outputs, names in ((False, node.input), (True, node.output)):
        table = schema.params(op, version, outputs)
        if not table:
            continue
        last = len(table) - 1
        for i, name in enumerate(names):
            if not name:
                continue
            kind, et = rw.value_type(name)
            var, elems, kinds = table[i if i < last else last]
            if kind and kind not in kinds:
                _type_error(node, op, version, changed_at, f"{kind} values")
            if not et:
                continue
            if et not in elems:
                _type_error(node, op, version, changed_at, _type_name(et), i, outputs)
            if var is not None and bound.setdefault(var, et) != et:
                raise UnsupportedError(f"{_label(node)}: {op}-{version} needs the same type for every {var}, "
                                       f"here mixed", hint=f"keep opset >= {changed_at}")


def _type_name(et: int) -> str:
    import onnx

    return onnx.helper.tensor_dtype_to_string(et).replace("TensorProto.", "").lower()


def _type_error(node, op, version, changed_at, what, index=None, output=False):
    where = f" ({'output' if output else 'input'} {index})" if index is not None else ""
    raise UnsupportedError(f"{_label(node)}: {op}-{version} does not take {what}{where}",
                           hint=f"keep opset {'>=' if changed_at > version else '<'} {changed_at}")
