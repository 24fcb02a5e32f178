"""PyTorch frontend: real models exported, run in onnxruntime, compared with torch."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError, UnsafeInputError, UnsupportedError
from tests.conftest import assert_one_line_error, check_report
from tests.helpers.extras import require

torch = require("torch")

SHAPES = {"cnn": (3, 32, 32), "lstm": (7, 12), "transformer": (10, 32)}


def _ort(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("opset", [13, 17, None], ids=["opset13", "opset17", "default"])
@pytest.mark.parametrize("name", ["cnn", "lstm", "transformer"])
@pytest.mark.fast_cases("cnn-opset17")
def test_convert_matches_torch(models, tmp_path, name, opset):
    model, args = getattr(models, name)()
    model.train()  # the export must still be in eval mode, and the flag must come back
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out = tmp_path / f"{name}.onnx"
    result = onnxbridge.convert(model, args, output=out, opset=opset, dynamic={"x": {0: "batch"}},
                                report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed", rep["hops"]
    assert result.report["status"] == "passed" and result.path == out
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())

    proto = onnx.load(out)
    got = {imp.domain or "ai.onnx": imp.version for imp in proto.opset_import}["ai.onnx"]
    assert got == opset if opset else got >= 18
    assert proto.ir_version == onnx.helper.find_min_ir_version_for(list(proto.opset_import), True) <= 13
    assert [i.name for i in proto.graph.input] == ["x"]
    hop = rep["hops"][0]
    assert (hop["from"], hop["to"], hop["samples"]) == ("torch", "onnx", 2)
    assert hop["sample_shapes"][1]["x"][0] == hop["sample_shapes"][0]["x"][0] + 1

    model.eval()  # independent check at a batch size never seen
    x = torch.randn(5, *SHAPES[name])
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(_ort(out).run(None, {"x": x.numpy()})[0], expected, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.fast_cases("torchscript")
def test_both_exporters(models, tmp_path, exporter):
    model, args = models.cnn()
    result = onnxbridge.convert(model, args, output=tmp_path / "m.onnx", opset=18, exporter=exporter,
                                output_names=["logits"])
    assert result.report["status"] == "passed"
    proto = onnx.load(tmp_path / "m.onnx")
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["onnxbridge.exporter"] == f"torch.onnx.export ({exporter})"
    assert meta["onnxbridge.source_framework"] == "torch"
    assert meta["onnxbridge.source_framework_version"] == torch.__version__
    assert proto.producer_name == "onnxbridge"
    assert [o.name for o in proto.graph.output] == ["logits"]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.slow
def test_dynamo_below_18_delivers_the_exact_opset(models, tmp_path, opset):
    """torch's dynamo exporter emits 18 and silently keeps it when 13 is asked; our adapters move it."""
    model, args = models.cnn()
    out = tmp_path / "m.onnx"
    result = onnxbridge.convert(model, args, output=out, opset=opset, exporter="dynamo", dynamic=["x:0"])
    assert onnx.load(out).opset_import[0].version == opset
    assert result.report["status"] == "passed"
    if opset == 13:  # at 17 torch's own converter may manage (it does with onnx >= 1.18)
        assert any("exporter produced opset 18; adapted to 13" in n for n in result.report["notes"])


def test_blocked_opset_names_the_node_and_writes_nothing(tmp_path):
    class Gridded(torch.nn.Module):
        def forward(self, x, grid):
            return torch.nn.functional.grid_sample(x, grid, align_corners=False)

    out = tmp_path / "g.onnx"
    with pytest.raises(UnsupportedError, match=r"\(GridSample\).*first appears in opset 16"):
        onnxbridge.convert(Gridded(), (torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1), output=out,
                           opset=13, exporter="dynamo")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_dynamic_batch_from_a_batch_of_one(models, tmp_path):
    """torch.export specialises size-1 axes; the export sample is grown so the batch stays dynamic."""
    model, _ = models.transformer()
    x = torch.randn(1, 10, 32)
    result = onnxbridge.convert(model, (x,), output=tmp_path / "t.onnx", exporter="dynamo",
                                dynamic=["x:0:batch"])
    assert result.report["status"] == "passed"
    assert any("exported with size 2" in n for n in result.report["notes"])
    assert result.report["hops"][0]["sample_shapes"][1]["x"][0] == 2


class BakesBatch(torch.nn.Module):
    def forward(self, x):
        return x.new_zeros(int(x.shape[0]), 3) + x[:, :3]  # int() makes the tracer bake the batch


def test_baked_batch_size_fails_validation(tmp_path, cli):
    """An export that looks fine at the sample shape but breaks at another batch is a failure."""
    result = onnxbridge.convert(BakesBatch(), (torch.randn(2, 5),), output=tmp_path / "b.onnx",
                                exporter="torchscript", dynamic=["x:0"], report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "failed" and not result.passed
    assert "onnx fails at input shapes {'x': [3, 5]} where torch runs" in rep["hops"][0]["errors"][0]


def test_multiple_inputs_and_outputs_and_kwargs(tmp_path):
    class Two(torch.nn.Module):
        def forward(self, a, b, scale: float = 2.0):
            return a * scale + b, (a - b).abs().sum(dim=1)

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    result = onnxbridge.convert(Two(), (a, b), output=tmp_path / "two.onnx", opset=17,
                                output_names=["sum", "dist"], dynamic=["a:0:n", "b:0:n"])
    rep = result.report
    assert rep["status"] == "passed"
    assert [o["name"] for o in rep["hops"][0]["outputs"]] == ["sum", "dist"]
    assert rep["hops"][0]["sample_shapes"][1] == {"a": [4, 4], "b": [4, 4]}


def test_integer_inputs_and_exact_outputs(tmp_path):
    class Emb(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)

        def forward(self, ids):
            return self.emb(ids), ids.argmax(dim=1)

    result = onnxbridge.convert(Emb(), (torch.tensor([[1, 2, 9]]),), output=tmp_path / "e.onnx", opset=17)
    outs = result.report["hops"][0]["outputs"]
    assert result.report["status"] == "passed"
    assert [o["kind"] for o in outs] == ["numeric", "exact"]


def test_in_memory_result(models):
    model, args = models.lstm()
    result = onnxbridge.convert(model, args, opset=17)
    assert result.path is None and isinstance(result.model, onnx.ModelProto)
    assert result.report["status"] == "passed"
    onnx.checker.check_model(result.model, full_check=True)


@pytest.mark.slow
def test_exported_program_pt2(models, tmp_path, cli):
    model, args = models.cnn()
    path = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(model, args), str(path))
    res = cli("-q", "convert", path, "-o", tmp_path / "cnn.onnx", "--opset", "18", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["source"]["kind"] == "torch.export .pt2"


def test_pt2_with_pickled_payload_needs_trust(models, tmp_path, cli):
    model, args = models.cnn()
    path, tampered = tmp_path / "cnn.pt2", tmp_path / "tampered.pt2"
    torch.export.save(torch.export.export(model, args), str(path))
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("_weights_config.json"):
                config = json.loads(data)
                next(iter(config["config"].values()))["use_pickle"] = True
                data = json.dumps(config).encode()
            dst.writestr(info, data)
    res = cli("convert", tampered, "-o", tmp_path / "x.onnx")
    assert_one_line_error(res, 2, "pickled objects", "--trust")
    with pytest.raises(UnsafeInputError):
        onnxbridge.convert(str(tampered))


@pytest.mark.slow
def test_torchscript_archive_needs_input_shapes(models, tmp_path, cli):
    model, args = models.cnn()
    path = tmp_path / "cnn.pt"
    torch.jit.trace(model, args).save(str(path))
    assert_one_line_error(cli("convert", path, "-o", tmp_path / "a.onnx"), 2, "--input-shape")
    res = cli("-q", "convert", path, "-o", tmp_path / "a.onnx", "--opset", "13", "--input-shape", "x:2,3,32,32",
              "--dynamic", "x:0", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["source"]["kind"] == "TorchScript"
    assert rep["inputs"]["samples"] == [{"x": [2, 3, 32, 32]}, {"x": [3, 3, 32, 32]}]


@pytest.mark.slow
def test_pickles_refused_without_trust(models, tmp_path, cli):
    model, _ = models.cnn()
    path = tmp_path / "model.pt"
    torch.save(model, path)
    assert_one_line_error(cli("convert", path, "-o", tmp_path / "p.onnx", "--input-shape", "x:1,3,16,16"),
                          2, "pickle", "--trust")
    assert not (tmp_path / "p.onnx").exists()
    res = cli("-q", "convert", path, "-o", tmp_path / "p.onnx", "--input-shape", "x:1,3,16,16", "--trust")
    assert res.exit_code == 0, res.output
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    assert_one_line_error(cli("convert", tmp_path / "sd.pt", "-o", tmp_path / "s.onnx", "--trust"), 2, "state_dict")


@pytest.mark.slow
def test_factory_from_module_path(tmp_path, monkeypatch, cli):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(
        "import torch\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Tanh()).eval()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert_one_line_error(cli("convert", "mypkg.nets:build", "-o", tmp_path / "n.onnx"), 2, "--input-shape")
    res = cli("-q", "convert", "mypkg.nets:build", "-o", tmp_path / "n.onnx", "--input-shape", "input:4,6")
    assert res.exit_code == 0, res.output


def test_input_shape_overrides_sample(models, tmp_path):
    result = onnxbridge.convert("examples/models.py:cnn", output=tmp_path / "c.onnx", opset=17,
                                input_shapes=["x:1,3,24,40"])
    assert result.report["inputs"]["samples"] == [{"x": [1, 3, 24, 40]}]
    assert result.report["status"] == "passed"


def test_bad_sample_inputs_are_bad_input(models):
    model, _ = models.cnn()
    with pytest.raises(BadInputError, match="fails on inputs"):
        onnxbridge.convert(model, (torch.randn(1, 5, 8, 8),))
