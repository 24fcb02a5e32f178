"""int8: a QDQ model from the user's calibration data with onnxruntime.quantization's QNN config (uint8
activations and weights, int32 bias), which the QNN execution provider serializes as a quantized DLC."""
from __future__ import annotations

from pathlib import Path

from onnxbridge.errors import BadInputError


def batches(calibration: dict, input_shapes: dict[str, list[int]]) -> list[dict]:
    """Calibration feeds at the model's static shapes (``onnxbridge.calibration.batches``), floats as float32."""
    import numpy as np

    from onnxbridge.calibration import batches as split

    return [{n: a.astype(np.float32) if a.dtype.kind == "f" else a for n, a in feed.items()}
            for feed in split(calibration, input_shapes)]


def qdq(model_path: Path, out_path: Path, feeds: list[dict]) -> list[str]:
    """Write the QDQ model of ``model_path`` calibrated on ``feeds``; returns notes for the report."""
    import logging

    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from onnxbridge.calibration import reader

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer's "consider pre-processing" advice is for CPU kernels
    try:
        config = get_qnn_qdq_config(str(model_path), reader(feeds), activation_type=QuantType.QUInt8,
                                    weight_type=QuantType.QUInt8)
        quantize(str(model_path), str(out_path), config)
    except Exception as exc:
        raise BadInputError(f"int8 quantization failed: {' '.join(str(exc).split())[:300]}") from None
    finally:
        root.setLevel(level)
    return [f"int8: QDQ with onnxruntime.quantization (QNN config: uint8 activations and weights, int32 bias), "
            f"calibrated on {len(feeds)} batch(es) of the --calibration data"]
