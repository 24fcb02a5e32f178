"""Is an ONNX file well formed enough for onnx's own C++ to read it? Checked before anything else touches a model
from the user.

onnx's shape inference, inliner and version converter run in this process, and on malformed graphs (cycles, tensors
whose data does not match their shape, functions that call themselves) they crash it with a signal rather than
raise. Measured on seeded mutations of small models (tests/test_fuzz_onnx.py): every file that crashed one of them
is refused by onnx's checker or by the tensor data check below, neither of which crashed on any.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    import onnx


def check(model: "onnx.ModelProto", what: str) -> None:
    """Refuse (BadInputError) a model onnx's checker rejects, or with a tensor whose data does not fit its shape.

    ``what`` names the model in the message, e.g. "'model.onnx'". What onnxruntime accepts and the checker does not
    is let through: an IR newer than the installed onnx's, graph inputs and outputs of unknown rank."""
    import onnx

    _check_tensors(model, what)
    probe = _probe(model)
    try:
        onnx.checker.check_model(probe)
    except (onnx.checker.ValidationError, ValueError, RuntimeError, TypeError) as exc:
        text = " ".join(str(exc).split())
        raise BadInputError(f"{what} is not a valid ONNX model: {text[:300]}") from None


def _probe(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """What the checker reads: ``model`` without its weights' data (each initializer over 1,024 values, or held
    outside, becomes a typed graph input: ``_check_tensors`` has checked its data; the checker would look for
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


def _check_tensors(model: "onnx.ModelProto", what: str) -> None:
    """Every inline tensor's data must be exactly what its dims and data type call for (types whose packing is
    unusual, e.g. int4 or complex, are left to onnx)."""
    import math

    from onnx import TensorProto as T

    from onnxbridge.fileio import iter_tensors, tensor_nbytes
    from onnxbridge.inspection import dtype_name

    fields = {T.FLOAT: "float_data", T.DOUBLE: "double_data", T.INT64: "int64_data", T.UINT64: "uint64_data",
              T.UINT32: "uint64_data", T.STRING: "string_data",
              **dict.fromkeys((T.INT32, T.INT16, T.INT8, T.UINT16, T.UINT8, T.BOOL, T.FLOAT16, T.BFLOAT16),
                              "int32_data")}
    for t in iter_tensors(model):
        if t.data_location == T.EXTERNAL:
            continue
        if any(d < 0 for d in t.dims):
            raise BadInputError(f"{what}: tensor '{t.name}' has a negative dimension {list(t.dims)}")
        if dtype_name(t.data_type).startswith("unknown"):
            raise BadInputError(f"{what}: tensor '{t.name}' has data type {t.data_type}, which ONNX does not define")
        if t.data_type not in fields:
            continue
        if t.HasField("raw_data") and t.data_type != T.STRING:
            need, held, unit = tensor_nbytes(t), len(t.raw_data), "bytes of data"
        else:
            need, held, unit = math.prod(t.dims), len(getattr(t, fields[t.data_type])), "values"
        if held != need:
            raise BadInputError(f"{what}: tensor '{t.name}' holds {held:,} {unit} where its shape {list(t.dims)} "
                                f"and type {dtype_name(t.data_type)} need {need:,}")


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
    from onnxbridge.fileio import load_onnx

    proto = load_onnx(model) if isinstance(model, str) else \
        onnx.load_from_string(model) if isinstance(model, bytes) else model
    check(proto, what)
    check_model(proto, what)
