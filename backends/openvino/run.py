"""Run an IR on OpenVINO's CPU plugin: one compiled model and infer request, fed by input name, with the inference
precision hint set to f32 (OpenVINO's default on CPUs with AVX512-bf16 or AMX is bf16)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from onnxbridge.errors import HopSkipped, UnavailableError, UnsupportedError

DEVICE = "CPU"


class Runner:
    """``Runner(path)(feeds) -> [outputs]`` in the IR's output order, as numpy arrays. ``compute_precision`` is
    "int8" for an IR with FakeQuantize nodes (NNCF), "fp16" for one whose weights are stored in fp16
    (``compress_to_fp16``; the CPU computes in f32): its hop is held to that precision's tolerance."""

    def __init__(self, path: Path):
        from onnxbridge.backends.openvino.ir import constants, ops, read, reason, release

        try:
            ov, core, model = read(path)
        except UnavailableError as exc:
            raise HopSkipped(f"OpenVINO runtime not installed: {exc.one_line()}") from None
        if DEVICE not in core.available_devices:
            raise HopSkipped(f"OpenVINO {release(ov)} has no CPU plugin on this host (devices: "
                             f"{', '.join(core.available_devices) or 'none'})")
        try:
            self.compiled = core.compile_model(model, DEVICE, {"INFERENCE_PRECISION_HINT": "f32"})
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError and its own classes
            raise UnsupportedError(f"OpenVINO {release(ov)}'s CPU plugin cannot compile '{Path(path).name}': "
                                   f"{reason(exc)}") from None
        self.request = self.compiled.create_infer_request()
        self.inputs = [(p.get_any_name(), p.get_element_type().to_dtype()) for p in self.compiled.inputs]
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]
        hint = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        fp16_weights = constants(model).get("f16", 0)
        quantized = ops(model).get("FakeQuantize", 0)
        self.compute_precision = "int8" if quantized else "fp16" if fp16_weights else "fp32"
        weights = f"; {fp16_weights} fp16 weight tensors" if fp16_weights else ""
        weights += f"; {quantized} FakeQuantize nodes (int8)" if quantized else ""
        self.what_ran = (f"OpenVINO CPU plugin {release(ov)} on {Path(path).name} (inference precision hint "
                         f"{hint}, set by onnxbridge{weights})")

    def __call__(self, feeds: Mapping) -> list:
        import numpy as np

        missing = [name for name, _ in self.inputs if name not in feeds]
        if missing:
            raise ValueError(f"missing input(s) {', '.join(missing)}")
        self.request.infer({name: np.ascontiguousarray(np.asarray(feeds[name]).astype(want, copy=False))
                            for name, want in self.inputs})
        return [np.array(self.request.get_output_tensor(i).data, copy=True) for i in range(len(self.output_names))]
