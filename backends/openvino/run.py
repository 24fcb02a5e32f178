"""Run an IR on OpenVINO's CPU plugin: one compiled model and infer request, fed by input name, with the inference
precision hint set to f32 (OpenVINO's default on CPUs with AVX512-bf16 or AMX is bf16).

The IR cannot carry that hint: OpenVINO (2026.4) reads ``runtime_options`` from a model's rt_info for a few keys only
(KV cache precision, dynamic quantization group size); the CPU plugin ignores ``INFERENCE_PRECISION_HINT`` and
``EXECUTION_MODE_HINT`` there. So a user who compiles the .xml with defaults (``core.compile_model(xml, "CPU")``) may
get other numbers than the hop validated. The runner therefore also compiles the IR with no config, runs it on every
sample and says what it computes (``what_ran``) and how far its outputs are from the validated run (``last_notes``).
Where the default compile is far off (an output below ``DEFAULT_MIN_SNR_DB`` against the validated run, or values
not finite where the validated run's are), the runner returns the default compile's outputs instead: the hop then
judges, and fails on, the numbers a default compile gives, with the note saying why."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping

from onnxbridge.backends.openvino.ir import VALIDATED
from onnxbridge.errors import HopSkipped, UnsupportedError

DEVICE = "CPU"
# the loosest agreement onnxbridge accepts of any reduced-precision computation (the int8 rule's SNR bar): a default
# compile below it on some output gives numbers no hop would pass, so the hop judges those numbers
DEFAULT_MIN_SNR_DB = 20.0


class Runner:
    """``Runner(path)(feeds) -> [outputs]`` in the IR's output order, as numpy arrays. ``compute_precision`` is
    "int8" for an IR with FakeQuantize nodes (NNCF), "fp16" for one whose weights are stored in fp16
    (``compress_to_fp16``; the CPU computes in f32): its hop is held to that precision's tolerance.

    ``default_precision`` is what a compile with no config computes in on this CPU (``bf16`` where the CPU has bf16
    units); where it is not the validated f32, every call also runs that compile (``check_defaults``) and
    ``last_notes`` says how far its outputs are from the validated ones. ``fresh`` runs the validated compile only
    (what latency figures time), and ``last_seconds`` is the validated compile's time."""

    def __init__(self, path: Path, *, check_defaults: bool = True):
        from onnxbridge.backends.openvino.ir import constants, ops, read, reason, release

        ov, core, model = read(path)  # without OpenVINO: UnavailableError (exit 3, with the install hint)
        if DEVICE not in core.available_devices:
            raise HopSkipped(f"OpenVINO {release(ov)} has no CPU plugin on this host (devices: "
                             f"{', '.join(core.available_devices) or 'none'})")
        try:
            self.compiled = core.compile_model(model, DEVICE, dict(VALIDATED))
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError and its own classes
            raise UnsupportedError(f"OpenVINO {release(ov)}'s CPU plugin cannot compile '{Path(path).name}': "
                                   f"{reason(exc)}") from None
        self.request = self.compiled.create_infer_request()
        # every name of each port: a compiled model can name an input after a tensor it feeds (GPT-2's 'view' for
        # 'x'), so the feeds are matched to any of them and passed by position
        self.inputs = [(sorted(p.get_names()) or [p.get_any_name()], p.get_element_type().to_dtype())
                       for p in self.compiled.inputs]
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]
        hint = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        fp16_weights = constants(model).get("f16", 0)
        quantized = ops(model).get("FakeQuantize", 0)
        self.compute_precision = "int8" if quantized else "fp16" if fp16_weights else "fp32"
        weights = f"; {fp16_weights} fp16 weight tensors" if fp16_weights else ""
        weights += f"; {quantized} FakeQuantize nodes (int8)" if quantized else ""
        self.last_notes: list[str] = []
        self.last_seconds: float | None = None
        self.default_request = None
        self.default_precision: str | None = None
        self.default_error: str | None = None
        default = ""
        if check_defaults:
            default = "; " + self._default_compile(core, model, hint, reason)
        self.what_ran = (f"OpenVINO CPU plugin {release(ov)} on {Path(path).name} (inference precision hint "
                         f"{hint}, set by onnxbridge{weights}{default})")

    def _default_compile(self, core, model, hint: str, reason) -> str:
        """Compile the IR as a user would with no config; keep it where it computes otherwise than ``hint``. What
        it computes, for ``what_ran``."""
        try:
            compiled = core.compile_model(model, DEVICE)
            self.default_precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError and its own classes
            self.default_error = reason(exc)
            self.default_note = (f"OpenVINO's default compile on this CPU (core.compile_model(xml, \"CPU\"), no "
                                 f"config) fails where the validated one ({hint}) compiles: {self.default_error}")
            return f"OpenVINO's default compile fails on this CPU: {self.default_error}"
        if self.default_precision == hint:
            return f"a default compile on this CPU also computes in {hint}"
        self.default_request = compiled.create_infer_request()
        units = [c for c in core.get_property(DEVICE, "OPTIMIZATION_CAPABILITIES") if c in ("BF16", "FP16")]
        self.default_note = (f"OpenVINO's default compile on this CPU (core.compile_model(xml, \"CPU\"), no config) "
                             f"computes in {self.default_precision}, not the validated {hint}"
                             + (f" (the CPU has {'/'.join(units)} units)" if units else "")
                             + f": a user who compiles the .xml with defaults gets its numbers (an IR cannot set "
                             f"the hint: OpenVINO ignores it in the IR's rt_info); pass "
                             f"{{\"INFERENCE_PRECISION_HINT\": \"{hint}\"}} to compile_model for the validated ones")
        return (f"OpenVINO's default compile on this CPU computes in {self.default_precision}: also run on every "
                f"sample and compared")

    def inputs_of(self, feeds: Mapping) -> dict:
        """The compiled model's inputs from ``feeds`` (matched by any of each port's names), in port order and at its
        element types."""
        import numpy as np

        named = [next((n for n in names if n in feeds), None) for names, _ in self.inputs]
        missing = [names[0] for (names, _), name in zip(self.inputs, named) if name is None]
        if missing:
            raise ValueError(f"missing input(s) {', '.join(missing)}")
        return {name: np.ascontiguousarray(np.asarray(feeds[name]).astype(want, copy=False))
                for name, (_, want) in zip(named, self.inputs)}

    def _infer(self, request, inputs: dict) -> list:
        import numpy as np

        request.infer(list(inputs.values()))  # by position: the port's own name may be another of its names
        return [np.array(request.get_output_tensor(i).data, copy=True) for i in range(len(self.output_names))]

    def fresh(self, feeds: Mapping) -> list:
        """The validated compile only."""
        return self._infer(self.request, self.inputs_of(feeds))

    def __call__(self, feeds: Mapping) -> list:
        inputs = self.inputs_of(feeds)
        t = time.perf_counter()
        outputs = self._infer(self.request, inputs)
        self.last_seconds = time.perf_counter() - t
        self.last_notes = [self.default_note] if self.default_error else []
        if self.default_request is None:
            return outputs
        at = ", ".join(f"{name} {list(value.shape)}" for name, value in inputs.items())
        try:
            default = self._infer(self.default_request, inputs)
        except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError and its own classes
            from onnxbridge.backends.openvino.ir import reason

            self.last_notes = [self.default_note, f"OpenVINO default compile ({self.default_precision}) fails at "
                                                  f"{at}: {reason(exc)}"]
            return outputs
        rows = [difference(name, got, ref) for name, got, ref in zip(self.output_names, default, outputs)]
        worst = max(rows, key=lambda r: (r["broken"], r["rel_rms"]))
        shown = (f"max abs {worst['max_abs']:.2e}, rel_rms {worst['rel_rms']:.2e}"
                 + (f" (SNR {worst['snr_db']:.0f} dB)" if worst["snr_db"] is not None else "")
                 + (f", {worst['nonfinite']} value(s) not finite where the validated run's are"
                    if worst["nonfinite"] else ""))
        line = (f"OpenVINO default compile ({self.default_precision}) at {at}: {shown} vs the validated run on "
                f"'{worst['name']}'")
        if worst["broken"]:
            why = "values not finite" if worst["nonfinite"] else f"below the {DEFAULT_MIN_SNR_DB:.0f} dB SNR"
            line += (f"; {why} no reduced precision may give, so this hop judged the default compile's outputs (the "
                     f"numbers a user compiling with defaults gets)")
            outputs = default
        self.last_notes = [self.default_note, line]
        return outputs


def difference(name: str, got, ref) -> dict:
    """How far the default compile's output ``got`` is from the validated ``ref`` (``compare``'s figures): max abs,
    rel_rms (||got-ref|| / ||ref||), SNR in dB (None where they are equal), values not finite in ``got`` only;
    ``broken`` when the SNR is below ``DEFAULT_MIN_SNR_DB``, such values exist, or they cannot be compared."""
    import numpy as np

    from onnxbridge.compare import compare

    got, ref = np.asarray(got), np.asarray(ref)
    m = compare(ref, got, atol=0.0, rtol=0.0)
    if "error" in m:  # shape or dtype
        return {"name": name, "max_abs": float("inf"), "rel_rms": float("inf"), "snr_db": None, "nonfinite": 0,
                "broken": True}
    if m["kind"] == "exact":
        wrong = not m["passed"]
        return {"name": name, "max_abs": float(np.max(np.abs(got.astype(np.float64) - ref))) if wrong else 0.0,
                "rel_rms": float("inf") if wrong else 0.0, "snr_db": None, "nonfinite": 0, "broken": wrong}
    nonfinite = int(np.count_nonzero(~np.isfinite(got) & np.isfinite(ref)))
    rel_rms = m["rel_rms"] if m["rel_rms"] is not None else float("inf")
    broken = nonfinite > 0 or (m["snr_db"] is not None and m["snr_db"] < DEFAULT_MIN_SNR_DB) or \
        (m["snr_db"] is None and rel_rms > 0)
    return {"name": name, "max_abs": m["max_abs"], "rel_rms": rel_rms, "snr_db": m["snr_db"], "nonfinite": nonfinite,
            "broken": broken}
