"""PyTorch frontend: which exporter runs and how (issue 19): the dynamo exporter below opset 18, ``--exporter auto``
keeping the export that validates, and ``--dynamic`` ranges reaching torch.export."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxbridge
from tests.helpers.extras import require

torch = require("torch")


class DiffOfHalves(torch.nn.Module):
    """aten::diff has no TorchScript symbolic; chunk becomes a Split (num_outputs is an opset-18 attribute)."""

    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return torch.diff(a, dim=-1) * b[..., 1:]


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class Dense(torch.nn.Module):
    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def _meta(path) -> dict:
    return {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}


def _opset(path) -> int:
    return {i.domain or "ai.onnx": i.version for i in onnx.load(path, load_external_data=False).opset_import}["ai.onnx"]


def _matches_torch(model, path, x):
    with torch.no_grad():
        want = model(x).numpy()
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("exporter", ["auto", "dynamo"])
@pytest.mark.slow
def test_dynamo_below_18_exports_at_18_and_adapts(tmp_path, exporter):
    """torch's own down-conversion kept Split's num_outputs at opset 17, which the checker rejects."""
    out = tmp_path / "d.onnx"
    result = onnxbridge.convert(DiffOfHalves(), (torch.randn(2, 8),), output=out, opset=17, exporter=exporter,
                                dynamic=["x:0"])
    notes = result.report["notes"]
    assert result.report["status"] == "passed", result.report["hops"]
    assert _opset(out) == 17 and _meta(out)["onnxbridge.exporter"] == "torch.onnx.export (dynamo)"
    assert any("dynamo exporter run at opset 18, not 17" in n for n in notes)
    assert "exporter produced opset 18; adapted to 17" in notes
    if exporter == "auto":
        assert any(n.startswith("fell back to the dynamo exporter after: torchscript exporter:") and "diff" in n
                   for n in notes)
    splits = [n for n in onnx.load(out).graph.node if n.op_type == "Split"]
    assert splits and not any(a.name == "num_outputs" for n in splits for a in n.attribute)
    _matches_torch(DiffOfHalves(), out, torch.randn(5, 8))


@pytest.mark.slow
def test_auto_keeps_the_export_that_validates(tmp_path):
    """TorchScript bakes a Reshape size into nn.MultiheadAttention at opset 13; auto swaps in the dynamo export."""
    out = tmp_path / "mha.onnx"
    model = Attention().eval()
    result = onnxbridge.convert(model, (torch.randn(2, 5, 16),), output=out, opset=13,
                                dynamic=["x:0:batch", "x:1:seq"])
    rep = result.report
    assert rep["status"] == "passed", rep["hops"]
    assert [s["x"] for s in rep["hops"][0]["sample_shapes"]] == [[2, 5, 16], [3, 6, 16]]
    assert _opset(out) == 13 and _meta(out)["onnxbridge.exporter"] == "torch.onnx.export (dynamo)"
    swap = [n for n in rep["notes"] if n.startswith("exporter auto: the torchscript export fails at input shapes")]
    assert swap and "the dynamo export passes" in swap[0]
    _matches_torch(model, out, torch.randn(4, 9, 16))


@pytest.mark.slow
def test_an_explicit_exporter_is_kept_even_when_it_fails_validation(tmp_path):
    result = onnxbridge.convert(Attention(), (torch.randn(2, 5, 16),), output=tmp_path / "mha.onnx", opset=13,
                                exporter="torchscript", dynamic=["x:0:batch", "x:1:seq"])
    assert result.report["status"] == "failed"
    assert "Reshape" in result.report["hops"][0]["errors"][0]
    assert not any("exporter auto" in n or "dynamo" in n for n in result.report["notes"])


def test_auto_keeps_a_torchscript_export_that_validates(tmp_path, monkeypatch):
    calls = []
    real = torch.onnx.export
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: calls.append(k.get("dynamo")) or real(*a, **k))
    model = Dense(4, 3)
    out = tmp_path / "lin.onnx"
    result = onnxbridge.convert(model, (torch.randn(2, 4),), output=out, opset=13, dynamic=["x:0"])
    assert result.report["status"] == "passed"
    assert calls == [False] and _meta(out)["onnxbridge.exporter"] == "torch.onnx.export (torchscript)"


@pytest.mark.slow
def test_dynamic_range_reaches_torch_export(tmp_path, monkeypatch):
    """``x:0:batch:1..16`` becomes torch.export.Dim('batch', min=1, max=16): the program's range constraint."""
    programs = []
    real = torch.onnx.export

    def spy(*args, **kwargs):
        programs.append((kwargs, real(*args, **kwargs)))
        return programs[-1][1]

    monkeypatch.setattr(torch.onnx, "export", spy)
    model = Dense(6, 4)
    out = tmp_path / "r.onnx"
    result = onnxbridge.convert(model, (torch.randn(3, 6),), output=out, exporter="dynamo", opset=18,
                                dynamic=["x:0:batch:1..16"])
    rep = result.report
    assert rep["status"] == "passed", rep["hops"]
    kwargs, onnx_program = programs[-1]
    dim = kwargs["dynamic_shapes"]["x"][0]
    assert (dim.__name__, dim.min, dim.max) == ("batch", 1, 16)
    bounds = [(int(r.lower), int(r.upper)) for r in onnx_program.exported_program.range_constraints.values()]
    assert (1, 16) in bounds
    assert "dynamic range given to torch.export: batch 1..16" in rep["notes"]
    assert [s["x"][0] for s in rep["hops"][0]["sample_shapes"]] == [3, 4, 1, 16]
    assert onnx.load(out).graph.input[0].type.tensor_type.shape.dim[0].dim_param
