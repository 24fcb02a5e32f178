"""The transformer-family models of examples/transformers.py through the edge backends, each hop passed: Core ML
with fixed shapes and with a flexible sequence, DLC with fixed shapes (the HTP simulator's hop).

Not yet here (refused cleanly, naming the node; see benchmarks/backend_coverage.py): ViT with a flexible patch
grid (bicubic position-table resize to run-time sizes) and Whisper with a flexible sequence (a slice of the position
table to the run-time length)."""
from __future__ import annotations

import pytest

import onnxbridge
from examples.transformers import MODELS, dynamic_axes
from tests.conftest import ROOT

FLEXIBLE = ("bert_encoder", "llama_decoder", "t5_encoder", "wav2vec2_features")
CASES = [(name, "coreml", False) for name in MODELS] + [(name, "coreml", True) for name in FLEXIBLE] + \
    [(name, "dlc", False) for name in MODELS]


@pytest.mark.parametrize("name, backend, flexible", CASES,
                         ids=[f"{n}-{b}{'-flexible' if f else ''}" for n, b, f in CASES])
def test_transformer_reaches_the_backend(tmp_path, name, backend, flexible):
    pytest.importorskip("coremltools" if backend == "coreml" else "onnxruntime_qnn")
    out = tmp_path / f"{name}{'.mlpackage' if backend == 'coreml' else '.dlc'}"
    dynamic = dynamic_axes(name, batch=False) if flexible else []
    rep = onnxbridge.convert(f"{ROOT / 'examples' / 'transformers.py'}:{name}", to=backend, output=str(out),
                             opset=17, dynamic=dynamic).report
    assert rep["status"] == "passed", rep["hops"][-1]
    hop = rep["hops"][-1]
    assert hop["to"] == ("coreml" if backend == "coreml" else "qnn-htp-simulator") and hop["status"] == "passed"
    if flexible:  # the sequence stays flexible in the package and is validated at more than one length
        assert len({tuple(s[next(iter(s))]) for s in rep["inputs"]["samples"]}) > 1
