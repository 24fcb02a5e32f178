"""ONNX -> MIL program -> ``.mlpackage`` (written atomically), and the host-side runner for validation."""
from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from onnxbridge.backends.coreml.ctimport import import_ct
from onnxbridge.backends.coreml.lower import FP16_MAX, INT32, OPS, TARGETS, Ctx, _mil_name, narrow, runtime_shape
from onnxbridge.backends.coreml.onnx_file import read_onnx
from onnxbridge.errors import BadInputError, UnsupportedError
from onnxbridge.fileio import placing
from onnxbridge.plugins import native_writes

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


def fold(node: "onnx.NodeProto", values: dict, opset: int, sources: dict | None = None) -> list[np.ndarray] | None:
    """The node's outputs when they are known before run time: a Constant, a Shape, a Size, or any op whose inputs
    are all constants (evaluated with onnx's reference evaluator), else None.

    A Shape (or Size) with flexible dims gives an object array holding ints and the MIL symbols of those dims
    (``sources`` learns which var and axis each symbol can be read from at run time); shape arithmetic on such
    arrays is folded symbolically (``_fold_symbolic``)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    if node.op_type == "Constant":
        return [constant_value(node)]
    inputs = [values.get(name) for name in node.input if name]
    if node.op_type in ("Shape", "Size") and inputs and not isinstance(inputs[0], np.ndarray):
        shape = list(inputs[0].shape)
        for axis, d in enumerate(shape):
            if sources is not None and not isinstance(d, (int, np.integer)):
                sources.setdefault(d, (inputs[0], axis))
        if node.op_type == "Size":
            return [_as_shape_value(np.array(math.prod(shape), dtype=object))]
        return [_as_shape_value(np.array(shape, dtype=object)[_shape_slice(node, len(shape))])]
    if any(isinstance(v, np.ndarray) and v.dtype == object for v in inputs):
        if not all(isinstance(v, np.ndarray) for v in inputs):
            return None
        try:
            out = _fold_symbolic(node, inputs)
        except Exception:  # leave it to the lowering
            return None
        return None if out is None else [_as_shape_value(out)]
    if not inputs or not all(isinstance(v, np.ndarray) for v in inputs) or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    feeds = dict(zip([n for n in node.input if n], inputs))
    try:
        size = _folded_size(node, feeds, opset)
        if size > FOLD_LIMIT:
            raise UnsupportedError(f"node '{node.name}' ({node.op_type}): it would fold to a constant of {size:,} "
                                   f"elements, over the {FOLD_LIMIT:,} onnxbridge folds")
        return list(ReferenceEvaluator(_node_model(node, feeds, opset, set())).run(None, feeds))
    except UnsupportedError:
        raise
    except Exception:  # e.g. string constants, or inputs the op refuses: the lowering says why it cannot
        return None


# folding stops at outputs this large (2**27 elements: 512 MB of fp32); a model that needs more is refused
FOLD_LIMIT = 1 << 27
SHAPE_LIKE = 4096  # constant inputs up to this size are shown to shape inference (shapes, repeats, pads, scales)


def _node_model(node: "onnx.NodeProto", inputs: dict, opset: int, known: set) -> "onnx.ModelProto":
    """A model of ``node`` alone: ``inputs`` (name -> array) are graph inputs, those named in ``known``
    initializers."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.helper.make_graph(
        [node], "fold", [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                         for n, v in inputs.items() if n not in known],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o],
        [numpy_helper.from_array(v, n) for n, v in inputs.items() if n in known])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])


def _folded_size(node: "onnx.NodeProto", inputs: dict, opset: int) -> int:
    """How many elements folding ``node`` would make, as far as ONNX shape inference tells from its small
    constant inputs (before any is made)."""
    import onnx

    model = _node_model(node, inputs, opset, {n for n, v in inputs.items() if v.size <= SHAPE_LIKE})
    total = 0
    for out in onnx.shape_inference.infer_shapes(model, data_prop=True).graph.output:
        dims = out.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            total += math.prod(d.dim_value for d in dims)
    return total


# a Constant node's value attributes other than ``value`` (a tensor), and the numpy dtype each holds
CONSTANT_ATTRIBUTES = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                       "value_ints": np.int64, "value_string": object, "value_strings": object}


def constant_value(node: "onnx.NodeProto") -> np.ndarray:
    """A Constant node's value, from whichever value attribute it has (``onnx_file.read_onnx`` made sure of one)."""
    import onnx
    from onnx import numpy_helper

    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name not in CONSTANT_ATTRIBUTES:
        raise UnsupportedError(f"node '{node.name}' (Constant): a {attr.name} is not lowered")
    return np.array(onnx.helper.get_attribute_value(attr), dtype=CONSTANT_ATTRIBUTES[attr.name])


def _as_shape_value(v: np.ndarray) -> np.ndarray:
    """An int64 array once every entry is known, else the object array."""
    v = np.asarray(v, dtype=object)
    return v.astype(np.int64) if all(isinstance(e, (int, np.integer)) for e in v.reshape(-1)) else v


def _fold_symbolic(node: "onnx.NodeProto", inputs: list) -> np.ndarray | None:
    """The shape arithmetic torch exports (Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Reshape, +, -, *, /)
    on object arrays of ints and symbols; None for anything else."""
    import onnx
    import sympy

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op, x = node.op_type, inputs[0]
    ints = [np.asarray(v).astype(np.int64).tolist() if v.dtype != object else None for v in inputs[1:]]
    if op in ("Identity", "Cast") and (op == "Identity" or attrs["to"] in (6, 7)):
        return x
    if op == "Gather":
        axis = attrs.get("axis", 0)
        idx = np.asarray(inputs[1]).astype(np.int64)
        return np.take(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis)
    if op in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes", ints[0] if ints else None)
        if op == "Unsqueeze":
            rank = x.ndim + len(axes)
            return x.reshape(_unsqueezed(x.shape, [a % rank for a in axes]))
        return np.squeeze(x, None if axes is None else tuple(axes))
    if op == "Concat":
        return np.concatenate([np.asarray(v, dtype=object).reshape(-1) if v.ndim == 0 else np.asarray(v, dtype=object)
                               for v in inputs], axis=attrs["axis"])
    if op == "Slice" and x.ndim == 1 and all(i is not None for i in ints):
        starts, ends = ints[0], ints[1]
        steps = ints[3] if len(ints) > 3 else [1]
        return x[slice(int(np.clip(starts[0], -2 ** 31, 2 ** 31)), int(np.clip(ends[0], -2 ** 31, 2 ** 31)),
                       steps[0])]
    if op == "Reshape" and ints[0] is not None:
        return x.reshape(ints[0])
    arith = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
             "Div": lambda a, b: a // b if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer))
             else sympy.floor(a / b)}  # sizes are positive: floor is ONNX's truncation
    if op in arith:
        a, b = np.broadcast_arrays(np.asarray(x, dtype=object), np.asarray(inputs[1], dtype=object))
        return np.array([arith[op](_py(u), _py(v)) for u, v in zip(a.reshape(-1), b.reshape(-1))],
                        dtype=object).reshape(a.shape)
    return None


def _unsqueezed(shape: tuple, axes: list[int]) -> list[int]:
    """``shape`` with 1s inserted at ``axes`` (of the result)."""
    dims = iter(shape)
    return [1 if i in axes else next(dims) for i in range(len(shape) + len(axes))]


def _py(v):
    return int(v) if isinstance(v, np.integer) else v


def _shape_slice(node: "onnx.NodeProto", rank: int) -> slice:
    attrs = {a.name: a.i for a in node.attribute}
    return slice(attrs.get("start", 0), attrs.get("end", rank))


# flexible dims without a requested range get [1, DEFAULT_UPPER] (Core ML needs a bounded range for ML programs)
DEFAULT_UPPER = 1024
MAX_RANK = 5
# ONNX input dtypes -> the MIL input dtype, and the dtype the graph then works in (cast inside)
INPUT_DTYPES = {"FLOAT": ("fp32", None), "DOUBLE": ("fp32", None), "FLOAT16": ("fp32", "fp16"),
                "INT64": ("int32", None), "INT32": ("int32", None), "INT16": ("int32", None),
                "INT8": ("int32", None), "UINT8": ("int32", None), "UINT16": ("int32", None),
                "BOOL": ("int32", "bool")}


def _input_dims(vi, dynamic: dict, samples: dict, fixed: dict) -> list | None:
    """An input's dims: ints, or ``(label, lower, upper, default)`` for a flexible one (``fixed``: sizes from
    ``--input-shape`` that replace flexible dims, or give the shape of an input that has none); None when its rank
    is unknown (no shape in ONNX, none given)."""
    if not vi.type.tensor_type.HasField("shape"):
        shape = fixed.get(vi.name)
        return [int(d) for d in shape] if shape and all(isinstance(d, int) for d in shape) else None
    dims = []
    for axis, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):  # 0 too: an empty input, refused by _input_problem
            dims.append(int(d.dim_value))
            continue
        shape = fixed.get(vi.name)
        if shape is not None and axis < len(shape) and isinstance(shape[axis], int):
            dims.append(int(shape[axis]))
            continue
        lo, hi = dynamic.get((vi.name, axis), (None, None))
        lo, hi = lo or 1, hi or DEFAULT_UPPER
        sample = samples.get(vi.name)
        if sample is not None and axis < len(sample) and sample[axis] == 0:
            dims.append(0)  # an empty sample
            continue
        default = sample[axis] if sample is not None and axis < len(sample) and lo <= sample[axis] <= hi else lo
        dims.append((d.dim_param or f"{vi.name}_dim{axis}", lo, hi, int(default)))
    return dims


def _input_problem(kind: str, dims: list | None) -> str | None:
    """Why Core ML cannot take an input of ONNX type ``kind`` with ``dims`` (``_input_dims``), None if it can."""
    if kind not in INPUT_DTYPES:
        return f"is {kind}; Core ML inputs are float or integer tensors"
    if dims is None:
        return "has no shape (unknown rank); give one with --input-shape"
    if len(dims) > MAX_RANK:
        return f"has rank {len(dims)}; Core ML allows rank <= {MAX_RANK}"
    if 0 in dims:
        shown = [d if isinstance(d, int) else d[0] for d in dims]
        return f"is empty (dims {shown}); Core ML arrays have sizes >= 1"
    big = [d for d in dims if isinstance(d, int) and d > INT32.max]
    if big:
        return f"has dim {big[0]}; Core ML sizes are int32"
    count = math.prod(d for d in dims if isinstance(d, int))
    return f"has {count:,} elements; Core ML arrays hold at most {INT32.max:,}" if count > INT32.max else None


def _input_specs(model: "onnx.ModelProto", inits: dict, ranges: dict, samples: dict, fixed: dict, notes: list,
                 refuse) -> tuple[dict, list, dict, set, set]:
    """MIL ``TensorSpec`` by name, coremltools ``TensorType``s (their ``RangeDim``s reach the spec), the cast
    each input needs inside the program (by ONNX name), the inputs refused (dtype, rank, size, or a MIL name
    another input has), and the rank-0 ones (Core ML inputs have rank >= 1: they are [1], squeezed inside)."""
    import onnx

    ct = import_ct()
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import get_new_symbol, types

    specs, types_, casts, symbols, bad, scalars = {}, [], {}, {}, set(), set()
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        kind = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type) if vi.type.HasField("tensor_type") \
            else f"a {vi.type.WhichOneof('value') or 'value of no type'}"
        dims = _input_dims(vi, ranges, samples, fixed)
        problem = _input_problem(kind, dims) or (f"becomes '{_mil_name(vi.name)}' in Core ML, as an earlier input "
                                                 "does" if _mil_name(vi.name) in specs else None)
        if problem:
            refuse(f"input '{vi.name}' {problem}")
            bad.add(vi.name)
            continue
        mil_dtype, casts[vi.name] = INPUT_DTYPES[kind]
        if kind not in ("FLOAT", "INT32"):
            notes.append(f"input '{vi.name}' is {kind} in ONNX and {mil_dtype} in Core ML"
                         + (" (values beyond int32 saturate)" if kind == "INT64" else ""))
        if not dims:
            notes.append(f"input '{vi.name}' is rank 0 in ONNX: the Core ML input is [1]")
            scalars.add(vi.name)
            dims = [1]
        mil_dims, ct_dims = [], []
        for d in dims:
            if isinstance(d, int):
                mil_dims.append(d)
                ct_dims.append(d)
            else:  # one MIL symbol per ONNX dim label, so inputs sharing a label share the size
                label, lo, hi, default = d
                mil_dims.append(symbols.setdefault(label, get_new_symbol()))
                ct_dims.append(ct.RangeDim(lower_bound=lo, upper_bound=hi, default=default))
        name = _mil_name(vi.name)
        specs[name] = mb.TensorSpec(shape=tuple(mil_dims), dtype=types.int32 if mil_dtype == "int32" else types.fp32)
        types_.append(ct.TensorType(name=name, shape=ct.Shape(ct_dims),
                                    dtype=np.int32 if mil_dtype == "int32" else np.float32))
    return specs, types_, casts, bad, scalars


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
    specs, types_, casts, bad, scalars = _input_specs(model, inits, ranges, sample_shapes or {},
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
        picked = range(source.rank)[_shape_slice(producer, source.rank)]
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
        ctx.refuse(_rejection(exc, target))
    for name, value in zip(node.output, result if isinstance(result, tuple) else (result,)):
        if name and value is not None:
            if not isinstance(value, np.ndarray) and value.rank > MAX_RANK:
                ctx.refuse(f"output '{name}' has rank {value.rank}; Core ML allows rank <= {MAX_RANK}")
            ctx.values[name] = value


def _rejection(exc: Exception, target: str) -> str:
    """coremltools' reason, with the deployment target that would work when that is the problem."""
    import re

    text = " ".join(str(exc).split())
    newer = re.search(r"(?:at least|update the minimum_deployment_target to) coremltools\.target\.(iOS\d+)", text)
    if newer:
        op = re.search(r"for (\w+) in the|since op (\w+)", text)
        what = f"MIL op '{next(g for g in op.groups() if g)}'" if op else "its lowering"
        return f"{what} needs --target {newer.group(1)} or newer (building for {target})"
    return f"Core ML rejects the lowering: {text[:300]}"


def legalize(model: "onnx.ModelProto", input_shapes: dict | None = None) -> tuple["onnx.ModelProto", list[str]]:
    """``model`` with the Core ML legalization rules applied, and which fired on which node. ``input_shapes``
    (``--input-shape``) fix flexible input dims first, as the build does, so rules needing static shapes see them."""
    from onnxbridge.legalize import apply
    from onnxbridge.legalize.rules import COREML_RULES

    return apply(_with_input_shapes(model, input_shapes or {}), COREML_RULES)


def _with_input_shapes(model: "onnx.ModelProto", input_shapes: dict) -> "onnx.ModelProto":
    """A copy of ``model`` whose flexible input dims have the sizes ``input_shapes`` gives (inputs of another rank
    are left for ``program`` to refuse), without the value_info naming the old dims; ``model`` when none is given."""
    import onnx

    if not input_shapes:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        dims, given = vi.type.tensor_type.shape.dim, input_shapes.get(vi.name)
        if given is None or len(given) != len(dims):
            continue
        for dim, size in zip(dims, given):
            if not dim.dim_value > 0 and isinstance(size, int) and size > 0:
                dim.dim_value = size  # clears dim_param (a oneof)
    del out.graph.value_info[:]
    return out


def check(model: "onnx.ModelProto", target: str = "iOS16", input_shapes: dict | None = None) -> list[str]:
    """Everything a build for ``target`` would refuse, each naming node, op and reason (no conversion)."""
    if target not in TARGETS:
        raise BadInputError(f"unknown Core ML target '{target}'; known: {', '.join(TARGETS)}")
    found: list[str] = []
    program(model, target, input_shapes=input_shapes, collect=found)
    return list(dict.fromkeys(found))


# --precision -> (what the program computes in, what its weights are stored as). int8 is weight-only: coremltools'
# linear_quantize_weights stores each large weight as int8 with a per-output-channel fp16 scale (symmetric, zero
# point 0) behind a constexpr op that Core ML dequantizes when it loads the model; activations and compute stay
# fp16 (Core ML's default for ML programs). No calibration data is involved.
APPLIED = {"fp32": ("fp32", "fp32"), "fp16": ("fp16", "fp16"), "int8": ("fp16", "int8")}
# the constexpr ops that hold int8 weights, by target, and the input that holds the int8 data
DEQUANTIZE_OPS = {"constexpr_affine_dequantize": "quantized_data",  # iOS16, iOS17
                  "constexpr_blockwise_shift_scale": "data"}  # iOS18 and newer
QUANTIZED = ("int8", "uint8", "int4", "uint4")  # stored dtypes of quantized weights
INT8_FIRST_TARGET = "iOS16"
# weights with no more elements stay float (coremltools' ``weight_threshold``; its default is 2048): a 256-element
# weight over 16 channels takes 576 bytes of weight.bin either way (int8 data plus the 64-byte-aligned blobs of its
# fp16 scales and zero points, or the fp16 data), so smaller ones would only lose accuracy
INT8_WEIGHT_THRESHOLD = 256


def check_precision(precision: str, target: str) -> None:
    """Refuse a precision this backend cannot apply for ``target`` (BadInputError, naming the way out)."""
    if precision not in APPLIED:
        raise BadInputError(f"--precision {precision} does not apply to --to coreml; use {', '.join(APPLIED)}")
    if precision == "int8" and TARGETS.index(target) < TARGETS.index(INT8_FIRST_TARGET):
        raise BadInputError(f"--precision int8 needs --target {INT8_FIRST_TARGET} or newer (building for {target}): "
                            "Core ML stores int8 weights through constexpr_affine_dequantize (iOS16) or "
                            "constexpr_blockwise_shift_scale (iOS18)")


def _pass_pipeline(ct, precision: str):
    """coremltools' default graph passes, with its weight quantization pass for int8 placed after the fp16 cast
    and constant folding (so the weights it quantizes are the fp16 ones the program uses; scales are fp16) and
    before the cleanup passes; None (the default pipeline) otherwise."""
    if precision != "int8":
        return None
    from coremltools.optimize.coreml import OpLinearQuantizerConfig, OptimizationConfig

    pipeline = ct.PassPipeline.DEFAULT
    cleanup = ct.PassPipeline.CLEANUP.passes
    ends_with_cleanup = pipeline.passes[-len(cleanup):] == cleanup  # true in coremltools 9; else quantize last
    pipeline.insert_pass(len(pipeline.passes) - (len(cleanup) if ends_with_cleanup else 0),
                         "compression::linear_quantize_weights")
    pipeline.set_options("compression::linear_quantize_weights", {"config": OptimizationConfig(
        global_config=OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                              weight_threshold=INT8_WEIGHT_THRESHOLD))})
    return pipeline


def weight_table(function) -> list[dict]:
    """The weight tensors of a MIL function by stored dtype, one row each: ``{"dtype", "tensors", "elements"}``
    (int8 first). A weight is what coremltools keeps in ``weight.bin`` and its quantizer considers (a float const
    of >= 10 elements, ``should_use_weight_file``) or the data of a dequantize constexpr op; the scales and zero
    points feeding such an op are not counted."""
    from coremltools.converters.mil.backend.mil.load import should_use_weight_file
    from coremltools.converters.mil.mil import types

    rows: dict[str, dict] = {}

    def visit(block) -> None:
        for op in block.operations:
            for inner in op.blocks:
                visit(inner)
            if op.op_type in DEQUANTIZE_OPS:
                var = op.inputs[DEQUANTIZE_OPS[op.op_type]]
            elif op.op_type == "const" and not any(c.op_type.startswith("constexpr_")
                                                   for c in op.outputs[0].child_ops):
                var = op.outputs[0]
                value = var.val
                if not (isinstance(value, np.ndarray) and value.dtype.kind == "f" and should_use_weight_file(value)):
                    continue
            else:
                continue
            name = types.builtin_to_string(var.dtype)
            row = rows.setdefault(name, {"dtype": name, "tensors": 0, "elements": 0})
            row["tensors"] += 1
            row["elements"] += int(np.prod(var.shape))

    visit(function)
    return sorted(rows.values(), key=lambda r: (r["dtype"] not in QUANTIZED, r["dtype"]))


def applied_precision(function, compute: str) -> dict:
    """What the program holds: weight and compute types, and how many weight tensors are quantized / float
    (float ones: at most ``INT8_WEIGHT_THRESHOLD`` elements, 1-D such as biases, or a float precision)."""
    counts = {r["dtype"]: r["tensors"] for r in weight_table(function)}
    quantized = sum(n for k, n in counts.items() if k in QUANTIZED)
    floats = {k: n for k, n in counts.items() if k not in QUANTIZED}
    weights = "int8" if quantized else "fp32" if "fp32" in floats else "fp16" if floats else compute
    return {"weights": weights, "compute": compute, "quantized_weights": quantized,
            "float_weights": sum(floats.values())}


def build(onnx_path: Path, output: Path, *, target: str = "iOS16", precision: str = "fp32", dynamic=(),
          sample_shapes: dict | None = None, input_shapes: dict | None = None) -> dict:
    """Convert, save ``output`` (.mlpackage) atomically, and return facts for the report. ``dynamic``: the
    ``DynamicAxis`` list (ranges for flexible dims); ``sample_shapes``: their default sizes. ``precision``: see
    ``APPLIED``; the facts say what the saved program holds (``compute_precision``, ``applied_precision``), not
    what was asked."""
    ct = import_ct()
    if target not in TARGETS:
        raise BadInputError(f"unknown Core ML target '{target}'; known: {', '.join(TARGETS)}")
    check_precision(precision, target)
    compute_name, _ = APPLIED[precision]
    model, fired = legalize(read_onnx(Path(onnx_path)), input_shapes)
    notes = ["legalized for Core ML: " + ", ".join(fired)] if fired else []
    scalar_outputs: list[str] = []
    prog = program(model, target, dynamic, sample_shapes, notes, input_shapes, fp16=compute_name == "fp16",
                   scalar_outputs=scalar_outputs)
    compute = ct.precision.FLOAT16 if compute_name == "fp16" else ct.precision.FLOAT32
    from onnxbridge.quiet import native_output_silenced, quiet

    caught: list[str] = []
    with _temporaries() as temp:
        try:
            with native_writes(temp, f"scratch files in '{temp.parent}'", hint=SCRATCH_HINT), \
                    quiet(caught, ("coremltools",)), native_output_silenced(), \
                    contextlib.redirect_stderr(io.StringIO()), _validated_once(prog):  # its progress bars: stderr
                mlmodel = ct.convert(prog, source="milinternal", convert_to="mlprogram", compute_precision=compute,
                                     minimum_deployment_target=getattr(ct.target, target), skip_model_load=True,
                                     pass_pipeline=_pass_pipeline(ct, precision))
        except BadInputError:
            raise
        except Exception as exc:  # e.g. a check that fires only in coremltools' passes
            reason = _rejection(exc, target)
            raise UnsupportedError(reason if "needs --target" in reason else "coremltools rejects the lowered "
                                   f"program: {' '.join(str(exc).split())[:300]}") from None
        return _save(mlmodel, model, output, scalar_outputs, notes, caught, target, precision, compute_name)


SCRATCH_HINT = "free space there, or point TMPDIR at a folder with more room"


@contextlib.contextmanager
def _temporaries():
    """A scratch folder (``fileio.workdir``) that holds every temporary file coremltools writes while it converts
    and saves (its weights, spec and package): removed after, and where a full disk is looked for when its native
    file writer fails."""
    import tempfile

    from onnxbridge.fileio import workdir

    with workdir() as folder:
        saved, tempfile.tempdir = tempfile.tempdir, str(folder)
        try:
            yield folder
        finally:
            tempfile.tempdir = saved


def _save(mlmodel, model: "onnx.ModelProto", output: Path, scalar_outputs: list[str], notes: list[str],
          caught: list[str], target: str, precision: str, compute_name: str) -> dict:
    """Place the package at ``output`` atomically; the facts for the report."""
    _mark_scalar_outputs(mlmodel, scalar_outputs)
    with placing(output) as staged, native_writes(staged.parent, f"'{output}'"):  # not shutil's list of copies
        mlmodel.save(str(staged))
    spec = mlmodel.get_spec()
    names = [v.name for v in [*model.graph.input, *model.graph.output]]
    renamed = {n: _mil_name(n) for n in names if _mil_name(n) != n}  # MIL names are identifiers
    flexible = {}
    for d in spec.description.input:
        ranges = d.type.multiArrayType.shapeRange.sizeRanges
        if any(r.lowerBound != r.upperBound for r in ranges):
            flexible[d.name] = [[r.lowerBound, r.upperBound] for r in ranges]
    main = mlmodel._mil_program.functions["main"]
    applied = applied_precision(main, compute_name)
    if precision == "int8" and not applied["quantized_weights"]:
        caught.append(f"--precision int8: no weight has more than {INT8_WEIGHT_THRESHOLD} elements, so none was "
                      f"quantized; the weights are {applied['weights']}")
    return {"target": target, "compute_precision": compute_name, "applied_precision": applied,
            "spec_version": spec.specificationVersion, "renamed": renamed, "flexible_inputs": flexible,
            "notes": notes, "ops": sorted({op.op_type for op in main.operations}), "warnings": caught}


# user-defined metadata of a package: the outputs that are rank 0 in ONNX (comma-separated MIL names; Core ML's are
# [1]), so the runners give them back as rank 0
SCALAR_OUTPUTS = "onnxbridge.rank0_outputs"


def _mark_scalar_outputs(mlmodel, names: list[str]) -> None:
    """Record ``names`` (rank 0 in ONNX, [1] in Core ML) in the model's metadata and output descriptions."""
    if names:
        mlmodel.user_defined_metadata[SCALAR_OUTPUTS] = ",".join(names)
    for name in names:
        mlmodel.output_description[name] = "rank 0 (a scalar) in the ONNX model; shape [1] here"


@contextlib.contextmanager
def _validated_once(prog):
    """coremltools validates the whole program after each of its ~100 graph passes, about half of the
    conversion time: validate it once, when the pipeline is done, instead (a broken pass still fails the build)."""
    prog.validate = lambda *args, **kwargs: None  # an instance attribute shadows Program.validate
    try:
        yield
    finally:
        del prog.validate
    type(prog).validate(prog)


class Runner:
    """Evaluates the saved package's MIL program with the numpy kernels in ``evaluate``."""

    def __init__(self, path: Path):
        from onnxbridge.backends.coreml.mlpackage import read

        package = read(Path(path))
        spec = package.spec
        self.function = package.function
        self.spec_version = spec.specificationVersion
        self.description = spec.description
        self.inputs = [d.name for d in spec.description.input]
        self.dtypes = {name: var.dtype for name, var in self.function.inputs.items()}
        self.outputs = [d.name for d in spec.description.output]
        self.ranges = {d.name: _input_ranges(d) for d in spec.description.input}
        # inputs fixed at build: validation gives the package only samples of these shapes ([1] may be rank 0)
        self.static_shapes = {n: [lo for lo, _ in r] for n, r in self.ranges.items()
                              if all(lo == hi for lo, hi in r) and [lo for lo, _ in r] != [1]}
        marked = spec.description.metadata.userDefined.get(SCALAR_OUTPUTS, "")
        self.scalar_outputs = set(marked.split(",")) if marked else set()
        self.what_ran = (f"host evaluator: onnxbridge's numpy kernels over the MIL program saved in {Path(path).name} "
                         "(not Core ML, which runs only on macOS; its latency is the evaluator's)")

    def feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs as the package takes them: MIL names, int32 (saturated) or fp32, rank 0 as [1]; a shape the
        package does not take (outside a fixed shape or a flexible dim's range) is refused, as Core ML would."""
        from coremltools.converters.mil.mil import types

        named = {_mil_name(k): np.asarray(v) for k, v in feeds.items()}
        for name, dtype in self.dtypes.items():
            value = named[name]
            if value.ndim == 0 and self.function.inputs[name].rank == 1:  # a rank-0 ONNX input is [1] in Core ML
                value = named[name] = value.reshape(1)
            if not all(lo <= n and (hi < 0 or n <= hi) for n, (lo, hi) in zip(value.shape, self.ranges[name])) \
                    or value.ndim != len(self.ranges[name]):
                raise ValueError(f"the package takes '{name}' with dims {_dims_text(self.ranges[name])}, not "
                                 f"{list(value.shape)}")
            if dtype == types.int32:
                named[name] = np.clip(value, INT32.min, INT32.max).astype(np.int32)
            elif value.dtype != np.float32:
                named[name] = value.astype(np.float32)
        return {n: named[n] for n in self.inputs}

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs on ``feeds``; a package the host evaluator cannot run (``EvaluatorGap``) is not judged here:
        HopSkipped, never a failure of the package."""
        from onnxbridge.backends.coreml.evaluate import run
        from onnxbridge.backends.coreml.gaps import EvaluatorGap
        from onnxbridge.errors import HopSkipped

        try:
            return self._outputs(run(self.function, self.feeds(feeds)))
        except EvaluatorGap as exc:
            raise HopSkipped(f"{exc} (the package may run on Core ML itself: validate it on macOS)") from None

    def _outputs(self, result: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs in order: fp16 as fp32, the rank-0 ONNX ones (``SCALAR_OUTPUTS``) as rank 0."""
        out = []
        for name in self.outputs:
            value = np.asarray(result[name])
            value = value.astype(np.float32) if value.dtype == np.float16 else value
            out.append(value.reshape(()) if name in self.scalar_outputs and value.size == 1 else value)
        return out


def _input_ranges(description) -> list[tuple[int, int]]:
    """(low, high) per dim of a package input: its fixed size twice, or a flexible dim's range (high -1: none)."""
    array = description.type.multiArrayType
    ranges = array.shapeRange.sizeRanges
    if ranges:
        return [(int(r.lowerBound), int(r.upperBound)) for r in ranges]
    return [(int(n), int(n)) for n in array.shape]


def _dims_text(ranges: list[tuple[int, int]]) -> str:
    return "[" + ", ".join(str(lo) if lo == hi else f"{lo}..{hi if hi >= 0 else ''}" for lo, hi in ranges) + "]"


class PredictRunner(Runner):
    """Core ML itself (``MLModel.predict``, macOS only), with the same input and output handling as ``Runner``."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.model = import_ct().models.MLModel(str(path))
        self.what_ran = f"Core ML (MLModel.predict, macOS) on {Path(path).name}"

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return self._outputs(self.model.predict(self.feeds(feeds)))
