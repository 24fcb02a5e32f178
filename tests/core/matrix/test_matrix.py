"""Acceptance of ``onnxbridge.matrix``: 4 models x 2 targets x 2 precisions, two good torch factories, one that
raises and one whose process SIGKILLs itself => 16 cells, 8 passed, 8 error with reasons, JUnit with 16 testcases;
a rerun reuses the passed cells; a cell that breaks after a baseline run is reported as the regression."""
from __future__ import annotations

import importlib.util
import json
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import onnxbridge.matrix
from onnxbridge.errors import BadInputError
from onnxbridge.matrix import matrix
from tests.helpers.extras import require

ROOT = Path(__file__).resolve().parents[3]

MLP = '''\
import torch


def mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return net.eval(), (torch.randn(2, 8),)
'''

BAD = '''\
import os
import signal


def broken():
    raise RuntimeError("this factory is broken on purpose")


def killed():
    os.kill(os.getpid(), signal.SIGKILL)
'''

MANIFEST = f'''\
[matrix]
targets = ["onnx", "openvino"]
precisions = ["fp32", "fp16"]
opsets = [17]

[[model]]
name = "cnn"
source = "{ROOT / 'examples' / 'models.py'}:cnn"

[[model]]
name = "mlp"
source = "mlp.py:mlp"

[[model]]
name = "raises"
source = "bad.py:broken"

[[model]]
name = "sigkill"
source = "bad.py:killed"
'''

GOOD_MODELS = ("cnn", "mlp")


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The first run of the 16-cell manifest: (folder, outdir, matrix dict, seconds)."""
    require("torch")
    folder = tmp_path_factory.mktemp("matrix")
    (folder / "mlp.py").write_text(MLP)
    (folder / "bad.py").write_text(BAD)
    (folder / "matrix.toml").write_text(MANIFEST)
    out = folder / "out"
    t0 = time.perf_counter()
    result = matrix(folder / "matrix.toml", out, workers=2)
    return folder, out, result, time.perf_counter() - t0


@pytest.mark.slow
def test_sixteen_cells_eight_passed_eight_errors(first):
    _, out, result, _ = first
    cells = result["cells"]
    assert len(cells) == 16
    assert result["counts"] == {"passed": 8, "failed": 0, "error": 8, "skipped": 0}, \
        [(c["name"], c["status"], c["reason"]) for c in cells]
    assert result["status"] == "failed" and result["regressions"] == []
    for cell in cells:
        assert cell["cached"] is False and cell["key"]
        if cell["model"] in GOOD_MODELS:
            assert cell["status"] == "passed", cell
            assert (out / cell["report"]).is_file() and (out / cell["artifact"]).exists()
            assert json.loads((out / cell["report"]).read_text())["status"] == "passed"
            assert cell["worst"] and cell["worst"]["max_abs"] is not None
        else:
            assert cell["status"] == "error"
    reasons = {c["model"]: c["reason"] for c in cells if c["status"] == "error"}
    assert "broken on purpose" in reasons["raises"]
    assert "SIGKILL" in reasons["sigkill"]
    on_disk = json.loads((out / "matrix.json").read_text())
    assert on_disk["counts"] == result["counts"] and len(on_disk["cells"]) == 16
    assert on_disk["executor"]["kind"] == "local" and on_disk["executor"]["workers"] == 2


@pytest.mark.slow
def test_junit_has_a_testcase_per_cell(first):
    out = first[1]
    root = ET.parse(out / "matrix.xml").getroot()
    cases = list(root.iter("testcase"))
    assert len(cases) == 16
    bad = [c for c in cases if c.find("error") is not None or c.find("failure") is not None]
    assert len(bad) == 8
    assert (out / "matrix.md").is_file() and (out / "matrix.html").is_file()


@pytest.mark.slow
def test_rerun_reuses_the_passed_cells(first):
    folder, out, result, seconds = first
    t0 = time.perf_counter()
    again = matrix(folder / "matrix.toml", out, workers=2)
    rerun = time.perf_counter() - t0
    by_name = {c["name"]: c for c in again["cells"]}
    for cell in result["cells"]:
        now = by_name[cell["name"]]
        assert now["status"] == cell["status"]
        assert now["cached"] is (cell["status"] == "passed")  # errors run again, passed cells are reused
        assert now["key"] == cell["key"]
    assert again["counts"] == result["counts"]
    assert rerun < seconds / 2, (rerun, seconds)
    # --no-cache (cache=False) runs a passed cell again
    fresh = matrix(folder / "matrix.toml", out, workers=2, cache=False, only=["mlp/onnx-fp32-*"])
    assert [(c["name"], c["status"], c["cached"]) for c in fresh["cells"]] == \
        [("mlp/onnx-fp32-opset17", "passed", False)]


@pytest.mark.slow
def test_a_cell_that_breaks_after_the_baseline_is_the_regression(first):
    folder, out, _, _ = first
    baseline = folder / "baseline.json"
    matrix(folder / "matrix.toml", out, workers=2)  # every cell again: the passed ones from the cache
    shutil.copy(out / "matrix.json", baseline)
    (folder / "mlp.py").write_text(MLP.replace("    torch.manual_seed(0)\n", "    raise ValueError('regressed')\n"))
    try:
        result = matrix(folder / "matrix.toml", out, workers=2, baseline=baseline, only=["*/onnx-fp32-*"])
    finally:
        (folder / "mlp.py").write_text(MLP)
    statuses = {c["name"]: (c["status"], c["cached"]) for c in result["cells"]}
    assert statuses == {"cnn/onnx-fp32-opset17": ("passed", True), "mlp/onnx-fp32-opset17": ("error", False),
                        "raises/onnx-fp32-opset17": ("error", False), "sigkill/onnx-fp32-opset17": ("error", False)}
    assert result["regressions"] == ["mlp/onnx-fp32-opset17"]  # errors in the baseline too are not regressions
    assert result["status"] == "failed"
    assert json.loads((out / "matrix.json").read_text())["regressions"] == ["mlp/onnx-fp32-opset17"]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
@pytest.mark.slow
def test_ray_executor_gives_the_same_statuses(first, tmp_path):
    """The same manifest on a Ray the call starts and stops (one column, to stay quick: 4 cells)."""
    folder, _, result, _ = first
    ray = matrix(folder / "matrix.toml", tmp_path / "ray", executor="ray", workers=2, only=["*/openvino-fp16-*"])
    assert ray["executor"]["kind"] == "ray" and len(ray["cells"]) == 4
    local = {c["name"]: c["status"] for c in result["cells"]}
    assert {c["name"]: c["status"] for c in ray["cells"]} == {n: s for n, s in local.items() if "/openvino-fp16-" in n}
    reasons = {c["model"]: c["reason"] for c in ray["cells"] if c["status"] == "error"}
    assert "SIGKILL" in reasons["sigkill"] and "broken on purpose" in reasons["raises"]
    assert all((tmp_path / "ray" / c["report"]).is_file() for c in ray["cells"] if c["status"] == "passed")


@pytest.mark.slow
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, first):
    folder = first[0]
    (tmp_path / "bad.json").write_text("{not json")
    for baseline in (tmp_path / "missing.json", tmp_path / "bad.json"):
        with pytest.raises(BadInputError, match="baseline"):
            matrix(folder / "matrix.toml", tmp_path / "out", baseline=baseline)
    with pytest.raises(BadInputError, match="executor"):
        matrix(folder / "matrix.toml", tmp_path / "out", executor="slurm")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_skipped_cells_are_recorded_without_running(tmp_path, first):
    folder = first[0]
    text = MANIFEST.replace('precisions = ["fp32", "fp16"]', 'precisions = ["int8"]')
    (tmp_path / "m.toml").write_text(text.replace('targets = ["onnx", "openvino"]', 'targets = ["onnx"]')
                                     .replace('"mlp.py:mlp"', f'"{folder / "mlp.py"}:mlp"')
                                     .replace('"bad.py:', f'"{folder / "bad.py"}:'))
    result = matrix(tmp_path / "m.toml", tmp_path / "out", only=["mlp/*"])
    assert result["status"] == "skipped" and result["counts"]["skipped"] == 1  # a skipped cell is never a pass
    (cell,) = result["cells"]
    assert cell["status"] == "skipped" and "does not apply int8" in cell["reason"] and cell["report"] is None
    assert not (tmp_path / "out" / "mlp").exists()  # nothing ran


def test_the_package_is_callable():
    assert callable(onnxbridge.matrix) and onnxbridge.matrix.matrix is matrix
