"""int8 for TensorRT as explicit Q/DQ nodes (the only int8 TensorRT 11 and TensorRT-RTX take): scales from the user's
calibration data through ``onnxruntime.quantization.quantize_static``, symmetric int8 as TensorRT requires."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    import numpy as np
    import onnx

# ops whose Q/DQ placement TensorRT fuses into int8 kernels; the rest stay in float between DQ and Q
INT8_OPS = ["Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
            "Concat", "Resize", "Relu"]


def batches(calibration: dict[str, "np.ndarray"], inputs: dict[str, tuple]) -> list[dict[str, "np.ndarray"]]:
    """Split calibration arrays into feeds: an array one rank above the input holds one batch per index of axis 0;
    an array of the input's rank is one batch. ``inputs``: name -> ONNX dims (ints, or None for dynamic)."""
    import numpy as np

    missing = [n for n in inputs if n not in calibration]
    if missing:
        raise BadInputError(f"--calibration has no array for input(s) {', '.join(map(repr, missing))}; "
                            f"it holds {', '.join(map(repr, calibration))}")
    per_input = {}
    for name, dims in inputs.items():
        arr = np.asarray(calibration[name])
        if arr.ndim == len(dims) + 1:
            items = [arr[i] for i in range(arr.shape[0])]
        elif arr.ndim == len(dims):
            items = [arr]
        else:
            raise BadInputError(f"--calibration '{name}' has rank {arr.ndim}; the input has rank {len(dims)} "
                                f"(give rank {len(dims)} for one batch or {len(dims) + 1} for several)")
        for item in items:
            for axis, (want, got) in enumerate(zip(dims, item.shape)):
                if isinstance(want, int) and want > 0 and want != got:
                    raise BadInputError(f"--calibration '{name}' has size {got} at axis {axis}; the model fixes {want}")
        per_input[name] = items
    counts = {len(v) for v in per_input.values()}
    if len(counts) != 1:
        raise BadInputError(f"--calibration arrays hold different numbers of batches: "
                            + ", ".join(f"{k} {len(v)}" for k, v in per_input.items()))
    return [{k: v[i] for k, v in per_input.items()} for i in range(counts.pop())]


def to_qdq(path: Path, workdir: Path, calibration: dict | None) -> tuple["onnx.ModelProto", dict]:
    """The model at ``path`` with Q/DQ pairs; BadInputError without calibration data."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    from onnx import helper

    from onnxbridge.fileio import load_onnx

    if not calibration:
        raise BadInputError("--precision int8 for TensorRT needs --calibration DATA (.npz or a folder of .npy, one "
                            "array per input): int8 scales come from calibration batches")
    model = load_onnx(path)
    inits = {t.name for t in model.graph.initializer}
    inputs = {i.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim)
              for i in model.graph.input if i.name not in inits}
    dtypes = {i.name: helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in model.graph.input
              if i.name in inputs}
    feeds = [{k: v.astype(dtypes[k], copy=False) for k, v in f.items()} for f in batches(calibration, inputs)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    out = workdir / "trt-qdq.onnx"
    logging.disable(logging.WARNING)  # quantize_static advises pre-processing on the root logger, every call
    try:
        quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ, op_types_to_quantize=INT8_OPS,
                        per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "QuantizeBias": False, "AddQDQPairToWeight": True})
    except Exception as exc:  # e.g. calibration values the model cannot run on
        raise UnsupportedError(f"int8 Q/DQ insertion failed: {' '.join(str(exc).split())[:300]}",
                               hint="check that --calibration holds real inputs of the model") from None
    finally:
        logging.disable(logging.NOTSET)
    qdq = load_onnx(out, load_external_data=True)
    counts = {op: sum(n.op_type == op for n in qdq.graph.node) for op in ("QuantizeLinear", "DequantizeLinear")}
    return qdq, {"batches": len(feeds), "method": "minmax, symmetric, per-channel weights", **counts}
