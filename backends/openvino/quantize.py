"""int8 for OpenVINO: NNCF post-training quantization of the converted model on the user's ``--calibration``
batches (FakeQuantize nodes on activations, int8 weights; the CPU plugin runs those ops in int8)."""
from __future__ import annotations

import contextlib
import io

from onnxbridge.backends.openvino.ir import reason, shape
from onnxbridge.errors import BadInputError, UnavailableError, UnsupportedError


def quantize(model, calibration: dict | None, caught: list[str]) -> tuple[object, dict]:
    """(the quantized ``openvino.Model``, facts for the report); NNCF's warnings go to ``caught``."""
    from onnxbridge.calibration import batches
    from onnxbridge.quiet import quiet

    if not calibration:
        raise BadInputError("--precision int8 for OpenVINO needs --calibration DATA (.npz or a folder of .npy, one "
                            "array per input): NNCF takes int8 ranges from calibration batches")
    try:
        import nncf
    except ImportError as exc:
        raise UnavailableError(f"--precision int8 for OpenVINO needs nncf ({exc})",
                               hint="pip install 'onnxbridge[openvino]'") from None
    inputs = {p.get_any_name(): shape(p.get_partial_shape()) or () for p in model.inputs}
    dtypes = {p.get_any_name(): p.get_element_type().to_dtype() for p in model.inputs}
    feeds = [{k: v.astype(dtypes[k], copy=False) for k, v in f.items()} for f in batches(calibration, inputs)]
    try:
        with quiet(caught, ("nncf",)), contextlib.redirect_stderr(io.StringIO()):  # its progress bars
            quantized = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds))
    except Exception as exc:  # noqa: BLE001 - e.g. calibration values the model cannot run on
        raise UnsupportedError(f"NNCF {nncf.__version__} could not quantize the model: {reason(exc)}",
                               hint="check that --calibration holds real inputs of the model") from None
    return quantized, {"tool": f"nncf {nncf.__version__}", "batches": len(feeds),
                       "method": "post-training quantization, min-max ranges, performance preset (symmetric)"}
