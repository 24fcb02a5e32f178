"""The MIL program of an ONNX model: inputs, then each node folded or lowered through the table in ``lower``, then
the outputs as Core ML shows them; or, for ``check``, every refusal it meets."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from onnxbridge.backends.coreml.ctimport import import_ct
from onnxbridge.backends.coreml.fold import fold, shape_slice
from onnxbridge.backends.coreml.inputs import MAX_RANK, input_specs
from onnxbridge.backends.coreml.lower import FP16_MAX, OPS, TARGETS, Ctx, _mil_name, narrow, runtime_shape
from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    import onnx


# ops lowered only when their values are known before run time (folded); otherwise refused when reached
FOLDED_ONLY = ("Constant", "Shape", "Size", "NonZero")


def blockers(model: "onnx.ModelProto") -> list[str]:
    """Every node the lowering table has no entry for (empty: all can be tried)."""
    return [f"node '{n.name}' ({n.op_type}): no Core ML lowering" for n in model.graph.node if not _lowerable(n)]


def _lowerable(node: "onnx.NodeProto") -> bool:
    """Whether the lowering table (or folding) has an entry for ``node``: ONNX's own ops only."""
    return node.domain in ("", "ai.onnx") and (node.op_type in OPS or node.op_type in FOLDED_ONLY)


class _Blocked(Exception):
    """A node whose input could not be lowered (check mode: it is skipped, not reported)."""


_POISON = object()


def clamp_fp16(value):
    """A float constant with finite values beyond +-65504 clamped, so fp16 compute does not turn them into
    +-inf (``-FLT_MAX`` attention masks would give NaN); anything else unchanged."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
        finite = np.isfinite(value)
        if np.any(np.abs(value[finite]) > FP16_MAX):
            return np.where(finite, np.clip(value, -FP16_MAX, FP16_MAX), value).astype(value.dtype)
    return value


def program(model: "onnx.ModelProto", target: str, dynamic=(), sample_shapes=None, notes: list | None = None,
            input_shapes: dict | None = None, collect: list | None = None, fp16: bool = False,
            scalar_outputs: list | None = None):
    """The MIL program of ``model``. Flexible input dims become MIL symbols (one per ONNX dim label) with a
    ``RangeDim`` from ``dynamic`` (``DynamicAxis`` min/max) or ``[1, DEFAULT_UPPER]``. Integer inputs are int32
    (int64 values saturate), float ones fp32; ``notes`` collects what changed at the interface.

    ``fp16``: float constants are clamped to fp16's range (``clamp_fp16``) as they enter the program.
    ``scalar_outputs`` collects the MIL names of the outputs that are rank 0 in ONNX (Core ML outputs them as [1]).
    With ``collect`` (a list), nothing is raised: every refusal is appended (naming node, op and reason), nodes
    fed by a refused one are skipped, and None is returned (``onnxbridge check``)."""
    from onnx import numpy_helper

    from onnxbridge.adapters import default_opset

    ct = import_ct()
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program

    notes = [] if notes is None else notes
    scalar_outputs = [] if scalar_outputs is None else scalar_outputs
    problems = blockers(model)
    if problems and collect is None:
        raise UnsupportedError(f"{len(problems)} node(s) cannot be lowered to Core ML; first: {problems[0]}")

    def refuse(message: str):
        if collect is None:
            raise UnsupportedError(message)
        collect.append(message)

    if collect is not None:
        collect.extend(problems)
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    ranges = {(d.name, d.axis): (d.min, d.max) for d in dynamic}
    specs, types_, casts, bad, scalars = input_specs(model, inits, ranges, sample_shapes or {},
                                                     input_shapes or {}, notes, refuse)
    if all(vi.name in inits for vi in g.input):
        refuse("the model has no inputs; a Core ML model needs at least one (Core ML does not load one without)")
    blocked = {i for i, n in enumerate(g.node) if not _lowerable(n)}
    for sparse in g.sparse_initializer:
        refuse(f"sparse initializer '{sparse.values.name}' is not lowered")
    with Function(specs, opset_version=getattr(ct.target, target)) as func:
        func.set_input_types(tuple(types_))
        ctx = Ctx(mb, default_opset(model), target)
        ctx.fp16 = fp16
        ctx.values.update({k: clamp_fp16(v) for k, v in inits.items()} if fp16 else inits)
        ctx.values.update({sparse.values.name: _POISON for sparse in g.sparse_initializer})
        for vi in g.input:
            if vi.name in bad:
                ctx.values[vi.name] = _POISON
            elif vi.name not in inits:
                var = func.inputs[_mil_name(vi.name)]
                value = mb.squeeze(x=var, axes=[0]) if vi.name in scalars else var
                ctx.values[vi.name] = mb.cast(x=value, dtype=casts[vi.name]) if casts[vi.name] else value
                for axis, d in enumerate(var.shape):
                    if not isinstance(d, (int, np.integer)):
                        ctx.symbols.setdefault(d, (var, axis))
        for i, node in enumerate(g.node):
            ctx.node = node
            try:
                if i in blocked or any(ctx.values.get(n) is _POISON for n in node.input if n):
                    raise _Blocked
                _lower_node(ctx, node, target)
            except _Blocked:
                ctx.values.update({name: _POISON for name in node.output})
            except UnsupportedError as exc:
                refuse(str(exc))
                ctx.values.update({name: _POISON for name in node.output})
        outputs = []
        producers = {name: node for node in g.node for name in node.output}
        for vi in g.output:
            value = ctx.values.get(vi.name, _POISON)
            if value is _POISON:
                if vi.name not in ctx.values:
                    refuse(f"output '{vi.name}' is not computed by the lowering of the node that makes it")
                continue
            try:
                outputs.append(_graph_output(ctx, vi, producers.get(vi.name), notes, scalar_outputs))
            except UnsupportedError as exc:
                refuse(str(exc))
        if collect is not None:
            return None
        func.set_outputs(outputs)
    prog = Program()
    prog.add_function("main", func)
    return prog


def _graph_output(ctx: Ctx, vi: "onnx.ValueInfoProto", producer: "onnx.NodeProto | None", notes: list,
                  scalar_outputs: list):
    """The MIL var of graph output ``vi``, named as Core ML shows it: computed at run time if it was folded
    (``_computed``), bool as int32, rank 0 as [1] (its MIL name added to ``scalar_outputs``); ``notes`` says
    what changed."""
    import onnx
    from coremltools.converters.mil.mil import types

    value, name = ctx.values[vi.name], _mil_name(vi.name)
    if isinstance(value, np.ndarray):
        value = _computed(ctx, vi.name, value, producer, notes)
    if value.dtype == types.bool:  # Core ML outputs are numbers
        notes.append(f"output '{vi.name}' is BOOL in ONNX and int32 (0/1) in Core ML")
        value = ctx.mb.cast(x=value, dtype="int32")
    elif value.dtype == types.int32 and vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        notes.append(f"output '{vi.name}' is INT64 in ONNX and int32 in Core ML")
    if value.rank == 0:  # Core ML outputs have rank >= 1 (predict gives a rank-0 MIL output as [1] anyway)
        notes.append(f"output '{vi.name}' is rank 0 in ONNX: the Core ML output is [1]")
        scalar_outputs.append(name)
        if value.name == name:
            value.set_name(f"{name}_rank0")
        return ctx.mb.expand_dims(x=value, axes=[0], name=name)
    return value if value.name == name else ctx.mb.identity(x=value, name=name)


def _computed(ctx: Ctx, name: str, value: np.ndarray, producer: "onnx.NodeProto | None", notes: list):
    """A graph output that folded to ``value``: a Shape or Size of a var computed from that var's shape at run
    time, sizes holding flexible dims (an object array) from the shapes of the vars they come from; anything else
    (a Constant, a Shape of an initializer) is output as a const op (a block output Core ML takes; coremltools
    folds a static Shape to one too), noted, or refused when MIL cannot hold it exactly."""
    ctx.node = producer
    source = ctx.values.get(producer.input[0]) if producer is not None and producer.op_type in ("Shape", "Size") \
        else None
    if source is not None and not isinstance(source, np.ndarray) and source.rank > 0 and value.size:
        shape = ctx.mb.shape(x=source)
        if producer.op_type == "Size":
            return ctx.mb.reduce_prod(x=shape, axes=[0], keep_dims=False)
        picked = range(source.rank)[shape_slice(producer, source.rank)]
        return ctx.mb.slice_by_index(x=shape, begin=np.array([picked.start], np.int32),
                                     end=np.array([picked.stop], np.int32))
    if value.dtype == object:
        return runtime_shape(ctx, value)
    const = narrow(value) if value.dtype.kind in "biuf" else None
    if const is None or not value.size or (value.dtype.kind in "iu" and not np.array_equal(const, value)):
        why = "empty" if const is not None and not value.size else f"{value.dtype} values MIL cannot hold exactly"
        raise UnsupportedError(f"output '{name}' is a constant ({why}); Core ML cannot output it")
    notes.append(f"output '{name}' is a constant in ONNX (no input changes it): Core ML outputs its value")
    return ctx.mb.const(val=const)


def _lower_node(ctx: Ctx, node: "onnx.NodeProto", target: str) -> None:
    """Fold ``node`` or lower it, storing its outputs in ``ctx.values``; raises UnsupportedError naming it."""
    folded = fold(node, ctx.values, ctx.opset, ctx.symbols)
    if folded is not None:
        ctx.values.update(zip(node.output, [clamp_fp16(v) for v in folded] if ctx.fp16 else folded))
        return
    if node.op_type not in OPS:
        ctx.refuse("its value depends on run-time data and it has no Core ML lowering")
    for name in node.input:
        value = ctx.values.get(name) if name else None
        if value is not None and len(value.shape) > MAX_RANK:
            ctx.refuse(f"input '{name}' has rank {len(value.shape)}; Core ML allows rank <= {MAX_RANK}")
    try:
        result = OPS[node.op_type](ctx)
    except UnsupportedError:
        raise
    except Exception as exc:
        ctx.refuse(rejection(exc, target))
    for name, value in zip(node.output, result if isinstance(result, tuple) else (result,)):
        if name and value is not None:
            if not isinstance(value, np.ndarray) and value.rank > MAX_RANK:
                ctx.refuse(f"output '{name}' has rank {value.rank}; Core ML allows rank <= {MAX_RANK}")
            ctx.values[name] = value
            if not isinstance(value, np.ndarray):  # sizes MIL derived (a conv's output): readable at run time
                for axis, d in enumerate(value.shape):
                    if not isinstance(d, (int, np.integer)):
                        ctx.symbols.setdefault(d, (value, axis))


def rejection(exc: Exception, target: str) -> str:
    """coremltools' reason, with the deployment target that would work when that is the problem."""
    import re

    text = " ".join(str(exc).split())
    newer = re.search(r"(?:at least|update the minimum_deployment_target to) coremltools\.target\.(iOS\d+)", text)
    if newer:
        op = re.search(r"for (\w+) in the|since op (\w+)", text)
        what = f"MIL op '{next(g for g in op.groups() if g)}'" if op else "its lowering"
        return f"{what} needs --target {newer.group(1)} or newer (building for {target})"
    return f"Core ML rejects the lowering: {text[:300]}"


def check(model: "onnx.ModelProto", target: str = "iOS16", input_shapes: dict | None = None) -> list[str]:
    """Everything a build for ``target`` would refuse, each naming node, op and reason (no conversion)."""
    if target not in TARGETS:
        raise BadInputError(f"unknown Core ML target '{target}'; known: {', '.join(TARGETS)}")
    found: list[str] = []
    program(model, target, input_shapes=input_shapes, collect=found)
    return list(dict.fromkeys(found))
