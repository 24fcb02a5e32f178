"""pytest helpers: fail a test when a conversion changes the numbers.

    from onnxbridge.testing import assert_roundtrip

    def test_export_keeps_numbers():
        assert_roundtrip(model, (x,), opset=17, dynamic={"x": {0: "batch"}})
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def assert_roundtrip(model: Any, inputs: Any = None, *, to: str = "onnx", opset: int | None = None,
                     precision: str = "fp32", atol: Any = None, rtol: Any = None, samples: int = 1,
                     output: str | Path | None = None, **options: Any) -> dict:
    """Convert ``model`` (``inputs``: its sample inputs), validate every hop, and raise AssertionError
    naming the failing hop and outputs if any differs beyond tolerance. Returns the report.

    ``options`` are passed to ``onnxbridge.convert`` (``dynamic``, ``input_names``, ``signature``, ...).
    """
    from onnxbridge import report as reports
    from onnxbridge.spine import convert

    result = convert(model, inputs, to=to, opset=opset, precision=precision, atol=atol, rtol=rtol,
                     samples=samples, output=output, **options)
    rep = result.report
    if rep["status"] == "failed":
        raise AssertionError(reports.failure_summary(rep))
    if rep["status"] != "passed":
        raise AssertionError(f"nothing was compared (status {rep['status']})")
    return rep
