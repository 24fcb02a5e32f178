"""Weights beside the model: written atomically, loaded back, inspected and validated; over 2 GB for real."""
from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnxbridge
from onnxbridge.errors import UnsupportedError
from onnxbridge.onnxio import save_onnx
from tests.conftest import check_report
from tests.helpers.extras import require

torch = require("torch")


class Wide(torch.nn.Module):
    def __init__(self, width: int = 512):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(width, width)
        self.b = torch.nn.Linear(width, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.fast_cases("torchscript")
def test_external_data_round_trip(tmp_path, cli, exporter):
    out = tmp_path / "wide.onnx"
    result = onnxbridge.convert(Wide(), (torch.randn(2, 512),), output=out, opset=18, exporter=exporter,
                                external_data=True, report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["artifact"]["external_data"] == ["wide.onnx.data"]
    assert (tmp_path / "wide.onnx.data").stat().st_size >= 512 * 512 * 4
    assert out.stat().st_size < 20_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "wide.onnx", "wide.onnx.data"]
    info = onnxbridge.inspect_model(out)
    assert info["external_data"][0]["location"] == "wide.onnx.data" and info["parameters"] == 512 * 513 + 8 * 513
    # it stays loadable from anywhere: move the pair
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("wide.onnx", "wide.onnx.data"):
        shutil.move(tmp_path / name, moved / name)
    x = np.random.default_rng(0).standard_normal((2, 512)).astype(np.float32)
    got = ort.InferenceSession(str(moved / "wide.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = Wide()
    with torch.no_grad():
        np.testing.assert_allclose(got, model(torch.from_numpy(x)).numpy(), atol=1e-4, rtol=1e-3)
    assert cli("-q", "validate", moved / "wide.onnx", moved / "wide.onnx").exit_code == 0
    assert result.report["artifact"]["bytes"] == sum(p.stat().st_size for p in moved.iterdir())


@pytest.mark.slow
def test_external_source_retargeted_inline(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    onnxbridge.convert(Wide(), (torch.randn(2, 512),), output=src / "w.onnx", opset=18, external_data=True)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    out = tmp_path / "w21.onnx"
    result = onnxbridge.convert(src / "w.onnx", output=out, opset=21)
    assert result.report["status"] == "passed" and result.report["artifact"]["external_data"] == []
    assert onnx.load(out).opset_import[0].version == 21
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


@pytest.mark.slow
def test_overwrite_drops_stale_side_file(tmp_path):
    out = tmp_path / "w.onnx"
    onnxbridge.convert(Wide(), (torch.randn(2, 512),), output=out, opset=18, external_data=True)
    assert (tmp_path / "w.onnx.data").exists()
    onnxbridge.convert(Wide(), (torch.randn(2, 512),), output=out, opset=18)
    assert not (tmp_path / "w.onnx.data").exists()
    assert onnx.load(out).graph.initializer[0].data_location == onnx.TensorProto.DEFAULT


def test_failed_check_leaves_nothing_behind(tmp_path):
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]), ir_version=8,
        opset_imports=[onnx.helper.make_opsetid("", 17)])

    def reject(path):
        raise UnsupportedError("checker says no")

    with pytest.raises(UnsupportedError):
        save_onnx(model, tmp_path / "m.onnx", check=reject, external_data=True)
    assert list(tmp_path.iterdir()) == []


class OverTwoGB(torch.nn.Module):
    """2.16 GB of float32 weights in three tensors, each under 2 GB."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16384, 17000, bias=False)
        self.b = torch.nn.Linear(17000, 16, bias=False)
        self.e = torch.nn.Embedding(16000, 16384)

    def forward(self, x, ids):
        return self.b(self.a(x)), self.e(ids)


@pytest.mark.large
@pytest.mark.slow
def test_model_over_2gb(tmp_path, cli):
    if shutil.disk_usage(tmp_path).free < 8e9 or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") < 12e9:
        pytest.skip("needs 8 GB of free disk and 12 GB of memory")
    with torch.no_grad():
        model = OverTwoGB().eval()
    args = (torch.randn(2, 16384), torch.tensor([[1, 5, 15999]]))
    out = tmp_path / "big.onnx"
    result = onnxbridge.convert(model, args, output=out, report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed", rep["hops"]
    assert rep["artifact"]["external_data"] == ["big.onnx.data"] and rep["artifact"]["bytes"] > 2**31
    assert out.stat().st_size < 100_000
    res = cli("inspect", out, "--json")
    assert res.exit_code == 0 and '"parameters": 540944000' in res.stdout
    rep2 = onnxbridge.validate(model, out, sample_inputs=args)
    assert rep2["status"] == "passed"
    del result
