"""Is an ONNX file well formed enough for onnx's own C++ to read it? Checked before anything else touches a model
from the user.

onnx's shape inference, inliner and version converter run in this process, and on malformed graphs (cycles, tensors
whose data does not match their shape, functions that call themselves) they crash it with a signal rather than
raise. Measured on seeded mutations of small models (tests/core/test_fuzz_onnx.py): every file that crashed one of them
is refused by onnx's checker or by the tensor data check below, neither of which crashed on any.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    import onnx


def check(model: "onnx.ModelProto", what: str) -> None:
    """Refuse (BadInputError) a model with a ``problem`` or one onnx's checker rejects.

    ``what`` names the model in the message, e.g. "'model.onnx'". What onnxruntime accepts and the checker does not
    is let through: an IR newer than the installed onnx's, graph inputs and outputs of unknown rank."""
    import onnx

    found = problem(model)
    if found is None:
        try:
            onnx.checker.check_model(_probe(model))
        except (onnx.checker.ValidationError, ValueError, RuntimeError, TypeError) as exc:
            found = " ".join(str(exc).split())[:300]
    if found:
        raise BadInputError(f"{what} is not a valid ONNX model: {found}")


def _probe(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """What the checker reads: ``model`` without its weights' data (each initializer over 1,024 values, or held
    outside, becomes a typed graph input: ``problem`` has checked its data; the checker would look for
    external files in the current directory), at most at the installed onnx's IR, with unknown-rank graph inputs
    and outputs given a shape field (legal for onnxruntime, required by the checker)."""
    import math

    import onnx

    probe = onnx.ModelProto()
    _copy_fields(probe, model, skip="graph")
    _copy_fields(probe.graph, model.graph, skip="initializer")
    probe.ir_version = min(probe.ir_version, onnx.IR_VERSION)
    inputs = {i.name for i in probe.graph.input}
    for t in model.graph.initializer:
        if math.prod(t.dims) <= 1024 and t.data_location != onnx.TensorProto.EXTERNAL:
            probe.graph.initializer.add().CopyFrom(t)
        elif t.name not in inputs:
            probe.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for vi in [*probe.graph.input, *probe.graph.output]:
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()
    return probe


def _copy_fields(dest, src, skip: str) -> None:
    """Copy every field set in ``src`` but ``skip``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(dest, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dest, field.name).CopyFrom(value)
        else:
            setattr(dest, field.name, value)


CONSTANT_VALUES = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                   "value_strings", "sparse_value")


def problem(model: "onnx.ModelProto") -> str | None:
    """What makes ``model`` malformed that onnx's checker lets through (None: nothing): tensors that cannot be read
    as arrays of their dims, graph inputs and outputs of undefined types or negative dims, a Constant without
    exactly one value, local functions that call themselves (coremltools and onnx's inliner recurse until the
    stack overflows: SIGSEGV)."""
    from onnxbridge.modelwalk import iter_tensors

    for t in iter_tensors(model):
        found = tensor_problem(t)
        if found:
            return f"tensor '{t.name}' {found}"
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        for vi in values:
            found = _value_problem(vi, untyped_ok=kind == "output")
            if found:
                return f"{kind} '{vi.name}' {found}"
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and (
                len(node.attribute) != 1 or node.attribute[0].name not in CONSTANT_VALUES):
            return f"Constant node '{node.name}' needs exactly one of {', '.join(CONSTANT_VALUES)}"
    cycle = function_cycle(model)
    if cycle:
        return f"its local functions call themselves ({' -> '.join(cycle)}); ONNX functions may not recurse"
    return None


def function_cycle(model: "onnx.ModelProto") -> list[str] | None:
    """A cycle in the call graph of ``model``'s local functions, as names from a function back to itself (None:
    there is none). Calls from nodes in subgraphs of a function's body count; found without recursion."""
    functions = {_called(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    calls = {k: [c for c in _callees(f) if c in functions] for k, f in functions.items()}
    state: dict[str, int] = {}  # 1: on the path being walked, 2: every call from it walked
    for root in calls:
        if root in state:
            continue
        path, pending = [root], [iter(calls[root])]
        state[root] = 1
        while pending:
            callee = next(pending[-1], None)
            if callee is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(callee) == 1:
                return [*path[path.index(callee):], callee]
            elif callee not in state:
                state[callee] = 1
                path.append(callee)
                pending.append(iter(calls[callee]))
    return None


def _called(domain: str, name: str, overload: str) -> str:
    """How ``function_cycle`` names a function, and a node the function it calls."""
    return f"{domain}.{name}" + (f":{overload}" if overload else "")


def _callees(function: "onnx.FunctionProto") -> list[str]:
    """What the nodes of ``function``'s body call, as ``function_cycle``'s keys, nested subgraphs included."""
    from onnxbridge.modelwalk import subgraphs

    found, nodes = [], list(function.node)
    while nodes:
        node = nodes.pop()
        found.append(_called(node.domain, node.op_type, getattr(node, "overload", "")))
        nodes += [n for g in subgraphs(node) for n in g.node]
    return list(dict.fromkeys(found))


def _defined(elem_type: int) -> bool:
    import onnx

    return elem_type != onnx.TensorProto.UNDEFINED and elem_type in onnx.TensorProto.DataType.values()


def tensor_problem(t: "onnx.TensorProto") -> str | None:
    """Why a tensor cannot be read as an array of its dims (None: it can, or its data is external: ``external_data``
    reads and bounds that)."""
    import math

    import onnx
    from onnx import TensorProto

    from onnxbridge.modelwalk import tensor_nbytes

    if not _defined(t.data_type):
        return f"has data type {t.data_type}, which ONNX does not define"
    if any(d < 0 for d in t.dims):
        return f"has negative dims {list(t.dims)}"
    if t.data_location == TensorProto.EXTERNAL:
        return None
    count = math.prod(t.dims)
    if t.data_type == TensorProto.STRING:
        have, need, unit = len(t.string_data), count, "strings"
    elif t.HasField("raw_data"):
        have, need, unit = len(t.raw_data), tensor_nbytes(t), "bytes"
    else:
        have = len(getattr(t, onnx.helper.tensor_dtype_to_field(t.data_type)))
        need = count * 2 if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else \
            (count + 1) // 2 if t.data_type in (TensorProto.INT4, TensorProto.UINT4) else count
        unit = "values"
    return None if have == need else f"holds {have:,} {unit} where its dims {list(t.dims)} need {need:,}"


def _value_problem(vi: "onnx.ValueInfoProto", untyped_ok: bool) -> str | None:
    """Why a graph input or output's tensor type is malformed (None: it is not, or it is no tensor);
    ``untyped_ok``: an UNDEFINED element type is allowed (outputs: their type is what the graph computes)."""
    if not vi.type.HasField("tensor_type"):
        return None
    tensor = vi.type.tensor_type
    if not (_defined(tensor.elem_type) or untyped_ok and tensor.elem_type == 0):
        return f"has element type {tensor.elem_type}, which ONNX does not define"
    dims = [d.dim_value for d in tensor.shape.dim if d.HasField("dim_value")]
    return f"has negative dims {dims}" if any(d < 0 for d in dims) else None


def vet(model: "str | Path | onnx.ModelProto", what: str) -> None:
    """``check`` and the size limits (``budget.check_model``) in the worker process, before this process hands the
    model to onnx's C++: a checker that crashes on the file is the file's fault, reported as bad input."""
    from onnxbridge.errors import NativeCrash
    from onnxbridge.registry import dist_version
    from onnxbridge.worker import call

    arg = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    try:
        call("onnxbridge.wellformed:vet_here", (arg, what), step=f"checking {what} with onnx's checker",
             library=f"onnx {dist_version('onnx')}")
    except NativeCrash as exc:
        raise BadInputError(f"{what} is not a readable ONNX model: {exc.one_line()}") from None


def vet_here(model: "str | bytes | onnx.ModelProto", what: str) -> None:
    """``vet``'s work, where it runs (a path, a serialized model or a loaded one)."""
    import onnx

    from onnxbridge.budget import check_model
    from onnxbridge.onnxio import load_onnx

    proto = load_onnx(model) if isinstance(model, str) else \
        onnx.load_from_string(model) if isinstance(model, bytes) else model
    check(proto, what)
    check_model(proto, what)
