"""Graph simplification for ``--optimize``: onnxscript's optimizer on onnx-ir, plus symbolic Reshape shapes.

The result holds standard-domain ops only, keeps the graph's input and output names, types and dim_params, its
opsets and IR version, and leaves external weights where they are (they are referenced, never loaded whole).

Levels:
    "basic"    constant folding, dead-node and Identity removal, common-subexpression elimination, duplicate
               initializers merged, Constant nodes lifted to initializers (no pattern rewrites).
    "default"  "basic" plus onnxscript's default rewrite rules (no-op removal, Conv+BatchNorm, slice/cast/matmul
               clean-ups) and Reshape shapes computed at run time (Shape -> Gather -> Concat) replaced by constants
               where symbolic shape inference proves them (0 copies a dim, -1 infers one): the shape arithmetic
               of TorchScript exports goes away and onnxruntime's own fusions (SkipLayerNorm, Gelu) can match;
               and GELU's 0.5 moved from the (1 + erf/tanh) term onto x, ``x * (0.5 * (1 + t))`` ->
               ``(x * 0.5) * (1 + t)`` (bit-identical: scaling by 0.5 is exact), the form onnxruntime fuses into one
               Gelu/FastGelu kernel at load; the torch dynamo exporter writes the other. GELU is found by the
               legalization engine's pattern (``onnxbridge.legalize.gelu``, the one backends' GELU rules use), on
               the main graph.
"""
from __future__ import annotations

import collections
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError, UnavailableError, UnsupportedError

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

LEVELS = ("basic", "default")
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def optimize_model(model: "onnx.ModelProto", *, level: str = "default",
                   base_dir: str | Path | None = None) -> tuple["onnx.ModelProto", dict]:
    """``model`` simplified at ``level`` and a record of what changed: node counts and op types before/after.

    ``base_dir``: where the model's external data lives (its weights are read in place, only where folding
    needs them: small tensors). The record: ``{"level", "library", "before", "after", "removed": {op: n},
    "added": {op: n}, "initializers": {"before", "after"}, "reshape_shapes_materialized": n,
    "gelu_half_moved": n}``.
    """
    import onnx_ir as ir

    if level not in LEVELS:
        raise BadInputError(f"optimization level {level!r} is not one of {', '.join(LEVELS)}")
    try:
        import onnxscript.optimizer  # noqa: F401
    except ImportError as exc:
        raise UnavailableError(f"graph optimization needs onnxscript ({exc})", hint="pip install onnxscript") from None
    local = {f.domain for f in model.functions}  # model-local functions are inlined first
    _refuse_foreign(model.graph, local)
    before = _op_counts(model.graph)
    inits_before = len(model.graph.initializer)
    interface = _interface(model.graph)
    irm = ir.from_proto(model)
    if base_dir is not None:
        ir.external_data.set_base_dir(irm.graph, base_dir)
    try:
        materialized = _optimize(irm, level)
        result = ir.to_proto(irm)
    finally:
        forget_rewriter_matches()
    del irm
    gelus = _move_gelu_half(result) if level == "default" else 0
    _refuse_foreign(result.graph)  # what the inlined functions held
    _restore_interface(result.graph, interface)
    _check_result(model, result)
    after = _op_counts(result.graph)
    return result, {
        "level": level, "library": _library(),
        "before": sum(before.values()), "after": sum(after.values()),
        "removed": {op: n - after.get(op, 0) for op, n in sorted(before.items()) if n > after.get(op, 0)},
        "added": {op: n - before.get(op, 0) for op, n in sorted(after.items()) if n > before.get(op, 0)},
        "initializers": {"before": inits_before, "after": len(result.graph.initializer)},
        "reshape_shapes_materialized": materialized, "gelu_half_moved": gelus,
    }


def forget_rewriter_matches() -> None:
    """Drop the graph that onnxscript's default rewrite rules remember from their last match.

    Those rules are module-level objects whose matchers keep the last graph, node and match they saw, and with
    them every weight of that model: after ``torch.onnx.export(dynamo=True)`` (which runs them) a GPT-2-sized
    model's 0.5 GB of parameters stayed alive until the next export. Call after anything that runs the rules.
    """
    import sys

    rewriter = sys.modules.get("onnxscript.rewriter")
    for rule in getattr(rewriter, "_DEFAULT_REWRITE_RULES", ()) if rewriter is not None else ():
        matcher = getattr(rule, "_matcher", None)
        for attr in ("_current_node", "_graph", "_match"):
            if matcher is not None and getattr(matcher, attr, None) is not None:
                setattr(matcher, attr, None)


def _optimize(model: "ir.Model", level: str) -> int:
    """Run the passes in place; returns how many Reshape shapes became constants."""
    import onnx_ir as ir
    import onnxscript.optimizer as oso
    from onnx_ir.passes import common

    if level == "basic":
        common.InlinePass()(model)
        oso.fold_constants_ir(model)
        ir.passes.Sequential(
            common.IdentityEliminationPass(), common.RemoveUnusedNodesPass(),
            common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            common.DeduplicateInitializersPass(), common.CommonSubexpressionEliminationPass(),
            common.RemoveUnusedNodesPass(), common.RemoveUnusedOpsetsPass(), common.OutputFixPass(),
            common.NameFixPass())(model)
        return 0
    _optimize_ir(model)  # folding first, so shape inference sees constant shapes
    common.ShapeInferencePass(strict_mode=False, data_prop=True)(model)
    materialized = _materialize_reshape_shapes(model.graph)
    if materialized:
        _optimize_ir(model)  # the Shape -> Gather -> Concat chains are dead now
    return materialized


def _optimize_ir(model: "ir.Model") -> None:
    """onnxscript's ``optimize_ir``, and the initializers its rewriter dropped put back.

    onnxscript 0.7.2's ``RewriteRuleSet`` registers each rewrite's new initializers under their own names and, where
    one exists already, replaces it (its duplicate-name check skips nothing): two rewrites that name an initializer
    after the same input (``Flatten2Reshape``'s ``<input>/shape``, ``ReshapeReshape``, BatchNorm fusion) leave the
    first rewrite's node reading a value that is no longer in the graph, and the written model is invalid ("not
    topologically sorted"). That value still holds its tensor: it becomes an initializer again, and the duplicates
    this leaves are merged as the optimizer would have.
    """
    import onnx_ir as ir
    import onnxscript.optimizer as oso
    from onnx_ir.passes import common

    oso.optimize_ir(model)
    if _reattach_dropped_initializers(model.graph):
        ir.passes.Sequential(common.DeduplicateInitializersPass(), common.CommonSubexpressionEliminationPass(),
                             common.RemoveUnusedNodesPass())(model)


def _reattach_dropped_initializers(graph: "ir.Graph") -> int:
    """Register as main-graph initializers the constant values that nodes read but that no node produces and no
    graph owns (visible from every subgraph); how many."""
    import onnx_ir as ir

    taken = {v.name for n in ir.traversal.RecursiveGraphIterator(graph) for v in (*n.inputs, *n.outputs) if v}
    taken |= {v.name for v in (*graph.inputs, *graph.initializers.values())}
    count = 0
    for node in ir.traversal.RecursiveGraphIterator(graph):
        for value in node.inputs:
            if value is None or value.producer() is not None or value.graph is not None or value.const_value is None:
                continue
            if not value.name or value.name in graph.initializers:
                base, i = value.name or "dropped_initializer", 1
                while f"{base}_{i}" in taken:
                    i += 1
                value.name = f"{base}_{i}"
                taken.add(value.name)
            graph.register_initializer(value)
            count += 1
    return count


def _move_gelu_half(model: "onnx.ModelProto") -> int:
    """``x * (0.5 * (1 + t))`` -> ``(x * 0.5) * (1 + t)`` in place, t an Erf or Tanh (a GELU's product, as
    ``onnxbridge.legalize.gelu`` reads it); how many moved."""
    from onnxbridge.legalize import Rule, apply

    return len(apply(model, [Rule("gelu-half-onto-x", _gelu_half_on_tail, lambda graph, match: True, _half_on_x)],
                     in_place=True)[1])


def _gelu_half_on_tail(graph, node):
    """A GELU's product ending in Mul ``node`` whose inner Mul is ``0.5 * (1 + t)``: that Mul and ``node``."""
    from onnxbridge.legalize import Match, gelu

    p = next((p for p in gelu.gelu_products(graph, node) if p.half_on_tail), None)
    return None if p is None else Match([p.inner, node], {"x": p.x, "half": p.half, "tail": p.add.output[0]},
                                        [node.output[0]])


def _half_on_x(graph, match) -> list:
    from onnx import helper

    base = match.nodes[-1].name or "gelu"
    scaled = graph.fresh(f"{base}_half_x")
    return [helper.make_node("Mul", [match.inputs["x"], match.inputs["half"]], [scaled], name=graph.fresh(base)),
            helper.make_node("Mul", [scaled, match.inputs["tail"]], match.outputs, name=graph.fresh(base))]


def _materialize_reshape_shapes(graph: "ir.Graph") -> int:
    """Replace each Reshape's computed shape with a constant where the inferred shapes prove it: a dim equal
    (same symbol) to the input's dim at the same index becomes 0 (copy), a known size stays, at most one other
    becomes -1. Reshapes whose output has a literal 0 dim, or whose shape is already constant, are left alone."""
    import numpy as np
    import onnx_ir as ir

    count = 0
    for node in list(graph):
        if node.op_type != "Reshape" or node.domain not in STANDARD_DOMAINS or len(node.inputs) < 2:
            continue
        data, shape = node.inputs[0], node.inputs[1]
        if data is None or shape is None or shape.const_value is not None or shape.is_initializer():
            continue
        dims = _proven_dims(data.shape, node.outputs[0].shape)
        if dims is None:
            continue
        const = ir.Value(name=f"{node.name or 'reshape'}_shape_{count}",
                         const_value=ir.tensor(np.asarray(dims, dtype=np.int64)))
        const.shape, const.dtype = ir.Shape([len(dims)]), ir.DataType.INT64
        graph.register_initializer(const)
        node.replace_input_with(1, const)
        node.attributes.pop("allowzero", None)  # 0 means copy (allowzero=0, the default)
        count += 1
    return count


def _proven_dims(ins: "ir.Shape | None", outs: "ir.Shape | None") -> list[int] | None:
    if ins is None or outs is None:
        return None
    dims, free = [], 0
    for j, d in enumerate(outs):
        if isinstance(d, int):
            if d == 0:  # a real empty dim: 0 would mean "copy" without allowzero
                return None
            dims.append(d)
        elif d.value is not None and j < len(ins) and not isinstance(ins[j], int) and ins[j].value == d.value:
            dims.append(0)
        else:
            dims.append(-1)
            free += 1
    return dims if free <= 1 else None


def _refuse_foreign(graph: "onnx.GraphProto", allowed: set[str] = frozenset()) -> None:
    foreign = sorted({n.domain for n in _all_nodes(graph)} - set(STANDARD_DOMAINS) - set(allowed))
    if foreign:
        raise UnsupportedError(f"the graph optimizer works on standard-domain ONNX only; this model uses "
                               f"{', '.join(foreign)} ops", hint="convert without --optimize")


def _all_nodes(graph: "onnx.GraphProto"):
    from onnxbridge.modelwalk import graphs

    for g in graphs(graph):
        yield from g.node


def _op_counts(graph: "onnx.GraphProto") -> dict[str, int]:
    return dict(collections.Counter(n.op_type if n.domain in STANDARD_DOMAINS else f"{n.domain}.{n.op_type}"
                                    for n in _all_nodes(graph)))


def _interface(graph: "onnx.GraphProto") -> tuple[list, list]:
    """Copies of the graph's input and output ValueInfos (names, types, dim_params, docs)."""
    import onnx

    def copy(v):
        c = onnx.ValueInfoProto()
        c.CopyFrom(v)
        return c

    inits = {i.name for i in graph.initializer}
    return [copy(v) for v in graph.input if v.name not in inits], [copy(v) for v in graph.output]


def _restore_interface(graph: "onnx.GraphProto", interface: tuple[list, list]) -> None:
    """Put back the inputs' and outputs' declared types (shape inference may have named unknown dims)."""
    inputs, outputs = interface
    by_name = {v.name: v for v in [*inputs, *outputs]}
    for v in [*graph.input, *graph.output]:
        if v.name in by_name:
            v.CopyFrom(by_name[v.name])


def _check_result(source: "onnx.ModelProto", result: "onnx.ModelProto") -> None:
    """The optimizer must keep the interface, opsets and domains; a change here is our bug."""
    want_in, got_in = _fed_inputs(source.graph), _fed_inputs(result.graph)
    want_out, got_out = [v.name for v in source.graph.output], [v.name for v in result.graph.output]
    if got_in != want_in or got_out != want_out:
        raise RuntimeError(f"the optimizer changed the graph's interface: inputs {want_in} -> {got_in}, "
                           f"outputs {want_out} -> {got_out}")
    want = {o.domain or "ai.onnx": o.version for o in source.opset_import}
    got = {o.domain or "ai.onnx": o.version for o in result.opset_import}
    if any(want.get(d) != v for d, v in got.items()) or got.get("ai.onnx") != want.get("ai.onnx"):
        raise RuntimeError(f"the optimizer changed the opsets: {want} -> {got}")
    if result.ir_version != source.ir_version:
        result.ir_version = source.ir_version


def _fed_inputs(graph: "onnx.GraphProto") -> list[str]:
    inits = {i.name for i in graph.initializer}
    return [v.name for v in graph.input if v.name not in inits]


def _library() -> str:
    from onnxbridge.registry import dist_version

    return f"onnxscript {dist_version('onnxscript')} (onnx-ir {dist_version('onnx-ir')})"
