"""The onnx package's node test cases (models with stored inputs and outputs) and how an adapted one fares."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import onnxruntime as ort

ORT_MAX = 23
OUTCOMES = ("passed", "refused", "broken", "WRONG")


def _session(model: onnx.ModelProto):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def matches(model: onnx.ModelProto, data_sets, atol: float = 1e-5, rtol: float = 1e-3) -> bool:
    """onnxruntime reproduces the stored outputs (floats within atol + rtol relative, others exactly)."""
    sess = _session(model)
    names = [i.name for i in sess.get_inputs()]
    for inputs, outputs in data_sets:
        got = sess.run(None, dict(zip(names, inputs)))
        for want, have in zip(outputs, got):
            want, have = np.asarray(want), np.asarray(have)
            if want.shape != have.shape:
                return False
            if want.dtype.kind in "fc":
                if not np.allclose(have, want, rtol=rtol, atol=atol, equal_nan=True):
                    return False
            elif want.dtype == object or not np.array_equal(have, want):
                return False
    return True


@functools.lru_cache(maxsize=1)
def usable_cases() -> tuple:
    """Cases in the default domain that onnxruntime runs at their own opset with the stored outputs."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    usable = []
    for case in cases:
        model = case.model
        domains = {i.domain for i in model.opset_import}
        opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), None)
        if opset is None or opset > ORT_MAX or not domains <= {"", "ai.onnx"}:
            continue
        model.ir_version = min(model.ir_version, 10)
        try:
            if matches(model, case.data_sets):
                usable.append(case)
        except Exception:
            continue
    return tuple(usable)


FP16_TOL = (1e-2, 1e-2)  # (atol, rtol): the fp16 policy of onnxbridge.compare


class Fp16Case:
    """An fp32 node case turned into fp16; its expected outputs are onnxruntime's at the case's own opset."""

    def __init__(self, name: str, model: onnx.ModelProto, data_sets: list):
        self.name, self.model, self.data_sets = name, model, data_sets


@functools.lru_cache(maxsize=1)
def usable_fp16_cases() -> tuple:
    """fp16 versions of the usable cases whose float inputs onnxruntime runs in fp16 at their own opset."""
    from onnxbridge.precision import to_fp16

    usable = []
    for case in usable_cases():
        try:
            model = to_fp16(case.model, keep_io=False)
        except Exception:
            continue
        if not any(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
                                    for i in model.graph.input):
            continue
        data_sets = []
        try:
            sess = _session(model)
            for inputs, _ in case.data_sets:
                feeds = [np.asarray(x).astype(np.float16) if np.asarray(x).dtype == np.float32 else x
                         for x in inputs]
                got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feeds)))
                data_sets.append((feeds, got))
        except Exception:
            continue
        usable.append(Fp16Case(case.name + "_fp16", model, data_sets))
    return tuple(usable)


def opset_of(model: onnx.ModelProto) -> int:
    return next(i.version for i in model.opset_import if i.domain in ("", "ai.onnx"))


def outcome(tool, model: onnx.ModelProto, data_sets, target: int, atol: float = 1e-5, rtol: float = 1e-3) -> str:
    """passed / refused (a clear error) / broken (invalid or does not run) / WRONG (runs, numbers differ)."""
    from onnxbridge.errors import OnnxBridgeError

    try:
        out = tool(model, target)
    except (OnnxBridgeError, RuntimeError, onnx.checker.ValidationError, ValueError, IndexError, KeyError):
        return "refused"
    try:
        onnx.checker.check_model(out)
        ok = matches(out, data_sets, atol, rtol)
    except Exception:
        return "broken"
    return "passed" if ok else "WRONG"
