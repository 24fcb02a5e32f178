"""Single-op models run before and after adaptation, compared in onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from onnxbridge.adapters import engine
from onnxbridge.builder import set_ir_version

ORT_MIN, ORT_MAX = 7, 23  # opsets onnxruntime runs and this project targets in tests


def model(nodes, inputs, outputs, opset: int, initializers=()) -> onnx.ModelProto:
    """inputs/outputs: (name, elem_type, shape) triples. Skips the test where this onnx does not know ``opset``
    (paddle2onnx pins onnx 1.17, which stops at 22)."""
    import pytest

    if opset > onnx.defs.onnx_opset_version():
        pytest.skip(f"onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()}")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    set_ir_version(m)
    return m


def run(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def roundtrip(m: onnx.ModelProto, target: int, feeds: dict, atol: float = 1e-5) -> onnx.ModelProto:
    """Adapt ``m`` to ``target``; the checker passes, the opset is right and outputs equal the source's."""
    out, problems = engine.convert(m, target)
    assert not problems
    set_ir_version(out)
    onnx.checker.check_model(out, full_check=True)
    assert {i.domain: i.version for i in out.opset_import}[""] == target
    for want, got in zip(run(m, feeds), run(out, feeds)):
        assert want.shape == got.shape and want.dtype == got.dtype
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(got, want, atol=atol, rtol=0)
        else:
            np.testing.assert_array_equal(got, want)
    return out
