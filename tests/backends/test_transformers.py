"""The transformer-family models of examples/transformers.py through the edge backends, each hop passed: Core ML
with fixed shapes and flexible (the sequence; Swin: the batch), DLC with fixed shapes (the HTP simulator's hop)."""
from __future__ import annotations

import pytest

import onnxbridge
from tests.conftest import ROOT
from tests.helpers.extras import require

require("torch")
from examples.transformers import MODELS, flexible_axes  # noqa: E402

CASES = [(name, "coreml", False) for name in MODELS] + [(name, "coreml", True) for name in MODELS] + \
    [(name, "dlc", False) for name in MODELS]


@pytest.mark.parametrize("name, backend, flexible", CASES,
                         ids=[f"{n}-{b}{'-flexible' if f else ''}" for n, b, f in CASES])
@pytest.mark.fast_cases("wav2vec2_features-dlc")
def test_transformer_reaches_the_backend(tmp_path, name, backend, flexible):
    require("coremltools" if backend == "coreml" else "onnxruntime_qnn")
    out = tmp_path / f"{name}{'.mlpackage' if backend == 'coreml' else '.dlc'}"
    dynamic = flexible_axes(name) if flexible else []
    rep = onnxbridge.convert(f"{ROOT / 'examples' / 'transformers.py'}:{name}", to=backend, output=str(out),
                             opset=17, dynamic=dynamic).report
    assert rep["status"] == "passed", rep["hops"][-1]
    hop = rep["hops"][-1]
    assert hop["to"] == ("coreml" if backend == "coreml" else "qnn-htp-simulator") and hop["status"] == "passed"
    if flexible:  # the axis stays flexible in the package and is validated at more than one size
        assert len({tuple(s[next(iter(s))]) for s in rep["inputs"]["samples"]}) > 1
