"""The program's inputs: ONNX inputs as Core ML takes them (dtypes, ranks, sizes, flexible dims as ranges), or
why it cannot."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from onnxbridge.backends.coreml.ctimport import import_ct
from onnxbridge.backends.coreml.lower import INT32, _mil_name

if TYPE_CHECKING:
    import onnx


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


def input_specs(model: "onnx.ModelProto", inits: dict, ranges: dict, samples: dict, fixed: dict, notes: list,
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
