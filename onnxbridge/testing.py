"""pytest helpers: fail a test when a conversion changes the numbers.

    from onnxbridge.testing import assert_roundtrip

    def test_export_keeps_numbers():
        assert_roundtrip(model, (x,), opset=17, dynamic={"x": {0: "batch"}})
"""
from __future__ import annotations

from typing import Any


def assert_roundtrip(model: Any, inputs: Any = None, **options: Any) -> dict:
    """Convert ``model`` (``inputs``: its sample inputs), validate every hop, and raise AssertionError
    naming the failing hop and outputs if any differs beyond tolerance. Returns the report.

    ``options`` are ``onnxbridge.convert``'s (``to``, ``opset``, ``precision``, ``atol``, ``dynamic``, ``signature``,
    ...; ``onnxbridge.request`` declares the core's), with the same defaults.
    """
    from onnxbridge import report as reports
    from onnxbridge.spine import convert

    rep = convert(model, inputs, **options).report
    if rep["status"] == "failed":
        raise AssertionError(reports.failure_summary(rep))
    if rep["status"] != "passed":
        raise AssertionError(f"nothing was compared (status {rep['status']})")
    return rep
