"""int8 for TensorRT as explicit Q/DQ nodes (the only int8 TensorRT 11 and TensorRT-RTX take): scales from the user's
calibration data through ``onnxruntime.quantization.quantize_static``, symmetric int8 as TensorRT requires."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    import onnx

# ops whose Q/DQ placement TensorRT fuses into int8 kernels; the rest stay in float between DQ and Q
INT8_OPS = ["Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
            "Concat", "Resize", "Relu"]


def to_qdq(path: Path, workdir: Path, calibration: dict | None) -> tuple["onnx.ModelProto", dict]:
    """The model at ``path`` with Q/DQ pairs; BadInputError without calibration data."""
    from onnx import helper
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from onnxbridge.calibration import batches, reader
    from onnxbridge.onnxio import load_onnx

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

    out = workdir / "trt-qdq.onnx"
    logging.disable(logging.WARNING)  # quantize_static advises pre-processing on the root logger, every call
    try:
        quantize_static(str(path), str(out), reader(feeds), quant_format=QuantFormat.QDQ, op_types_to_quantize=INT8_OPS,
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
