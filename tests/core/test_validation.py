"""Validation: metrics, a model that drifts fails with exit 1, user inputs, reports that name the output."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxbridge
from onnxbridge.compare import compare
from onnxbridge.errors import ValidationFailed
from tests.conftest import ROOT, assert_one_line_error, check_report
from tests.helpers.extras import require

torch = require("torch")

FACTORY = f"{ROOT / 'examples' / 'models.py'}:cnn"


def test_compare_metrics():
    ref = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    ok = compare(ref, ref + 5e-5, atol=1e-4, rtol=0)
    assert ok["passed"] and ok["max_abs"] == pytest.approx(5e-5, rel=1e-2) and ok["cosine"] == pytest.approx(1.0)
    bad = compare(ref, ref * np.array([1, 1, 1, 1.1], np.float32), atol=1e-4, rtol=1e-3)
    assert not bad["passed"] and bad["mismatch_fraction"] == 0.25
    assert bad["required_atol"] == pytest.approx(0.4 - 1e-3 * 4, rel=1e-4)
    nan = compare(ref, np.array([1, np.nan, 3, 4], np.float32), atol=1, rtol=1)
    assert not nan["passed"] and nan["nan_mismatch"] == 1 and nan["nonfinite_output"] == 1
    assert compare(np.array([np.nan]), np.array([np.nan]), atol=0, rtol=0)["passed"]
    exact = compare(np.array([1, 2, 3]), np.array([1, 2, 4]), atol=10, rtol=10)
    assert exact["kind"] == "exact" and not exact["passed"]
    shape = compare(np.zeros((2, 3)), np.zeros((3, 2)), atol=1, rtol=1)
    assert not shape["passed"] and "shape" in shape["error"]


@pytest.fixture(scope="module")
def cnn_onnx(tmp_path_factory):
    out = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    assert onnxbridge.convert(FACTORY, output=out, opset=17, dynamic=["x:0:batch"]).passed
    return out


@pytest.mark.slow
def test_perturbed_weights_fail_with_exit_1(cli, cnn_onnx, tmp_path):
    model = onnx.load(cnn_onnx)
    init = model.graph.initializer[0]
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.1, init.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, bad)
    res = cli("validate", FACTORY, bad, "--report", tmp_path / "r.json")
    err = assert_one_line_error(res, 1, "validation failed", "torch -> onnx", "output")
    assert "needs atol" in err
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "failed"
    hop = rep["hops"][0]
    assert (hop["from"], hop["to"], hop["status"]) == ("torch", "onnx", "failed")
    assert hop["outputs"][0]["name"] == "output" and not hop["outputs"][0]["passed"]
    with pytest.raises(ValidationFailed, match="torch -> onnx"):
        onnxbridge.validate(FACTORY, bad, raise_on_failure=True)
    # a loose enough tolerance passes, and says so
    loose = cli("-q", "validate", FACTORY, bad, "--atol", "100")
    assert loose.exit_code == 0


def test_validate_with_user_inputs(cli, cnn_onnx, tmp_path):
    x = np.random.default_rng(3).standard_normal((4, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "named.npz", x=x)
    np.savez(tmp_path / "positional.npz", x)
    for name in ("named", "positional"):
        res = cli("-q", "validate", FACTORY, cnn_onnx, "--inputs", tmp_path / f"{name}.npz",
                  "--report", tmp_path / "r.json")
        assert res.exit_code == 0, res.output
        rep = check_report(tmp_path / "r.json")
        assert rep["inputs"]["samples"] == [{"x": [4, 3, 32, 32]}, {"x": [5, 3, 32, 32]}]
        assert rep["inputs"]["origin"].startswith("user inputs")
    np.savez(tmp_path / "wrong.npz", y=x, z=x)
    assert_one_line_error(cli("validate", FACTORY, cnn_onnx, "--inputs", tmp_path / "wrong.npz"), 2, "name no input", "'x'")


def test_validate_onnx_against_onnx(cli, cnn_onnx, tmp_path):
    res = cli("-q", "validate", cnn_onnx, cnn_onnx, "--report", tmp_path / "r.json")
    assert res.exit_code == 0
    rep = check_report(tmp_path / "r.json")
    assert rep["hops"][0]["outputs"][0]["max_abs"] == 0.0


def test_validate_python_api_with_live_model(models, cnn_onnx):
    model, args = models.cnn()
    rep = onnxbridge.validate(model, cnn_onnx, sample_inputs=args)
    assert rep["status"] == "passed"
    other = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.Upsample(scale_factor=2)).eval()
    assert onnxbridge.validate(other, cnn_onnx, sample_inputs=args)["status"] == "failed"


def test_raise_for_status(models, tmp_path):
    class Drifts(torch.nn.Module):
        def forward(self, x):  # export and eager disagree: the traced branch is frozen
            return x * 2 if float(x.sum()) > 0 else x * 3

    x = torch.ones(2, 2)
    result = onnxbridge.convert(Drifts(), (x,), output=tmp_path / "d.onnx", exporter="torchscript",
                                inputs={"x": -x.numpy()})
    assert result.report["status"] == "failed"
    with pytest.raises(ValidationFailed):
        result.raise_for_status()
