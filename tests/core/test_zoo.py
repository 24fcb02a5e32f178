"""The zoo (``benchmarks/zoo.py``, issue 32): its catalog, how a conversion's outcome becomes a cell, the table and
its denominators, the matrix manifest, and a sample of two models from two libraries through the harness."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from onnxbridge import errors
from tests.conftest import ROOT
from tests.helpers.extras import requires

BENCH = ROOT / "benchmarks"


def _load(name: str):
    """benchmarks/NAME.py as a module, ``sys.path`` left as it was (the file puts benchmarks/ on it)."""
    spec = importlib.util.spec_from_file_location(f"zoo_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


zoo = _load("zoo")  # imports benchmarks/zoo_models.py as ``zoo_models``
models = sys.modules["zoo_models"]


def test_catalog_is_large_unique_and_covers_every_library():
    from onnxbridge.specs import parse_dynamic

    assert len(models.NAMES) >= 120
    assert len(set(models.NAMES)) == len(models.NAMES)
    assert all(n.isidentifier() for n in models.NAMES)  # matrix factories: zoo_models.py:NAME
    assert {"torchvision", "timm", "transformers", "keras", "paddle", "sklearn"} <= set(models.LIBRARIES)
    assert {"lightgbm", "xgboost", "catboost"} & set(models.LIBRARIES)
    for m in models.MODELS:
        assert m.flex in ("image", "sequence", "none"), m.name
        assert (m.flex == "none") == (not m.dynamic), m.name
        for spec in m.dynamic:
            axis = parse_dynamic(spec)
            assert axis.min is not None and axis.max is not None and axis.min < axis.max, (m.name, spec)
    families = {m.family for m in models.MODELS if m.library == "torchvision"}
    assert {"classification", "segmentation", "detection", "video", "optical flow"} <= families


def test_catalog_imports_no_framework():
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import zoo_models; "
            "print([m for m in ('torch', 'tensorflow', 'paddle', 'sklearn', 'numpy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cells_from_reports():
    passed = {"status": "passed", "hops": [{"from": "torch", "to": "onnx", "status": "passed"}]}
    assert zoo.cell_from_report(passed) == {"status": "passed"}
    failed = {"status": "failed", "introduced_by": "onnx -> coreml",
              "hops": [{"from": "torch", "to": "onnx", "status": "passed"},
                       {"from": "onnx", "to": "coreml", "status": "failed", "errors": [],
                        "outputs": [{"name": "logits", "passed": False,
                                     "failed_check": "rel_rms 2.1e-02 > budget 3.1e-03"}]}]}
    cell = zoo.cell_from_report(failed)
    assert cell == {"status": "failed", "hop": "onnx -> coreml",
                    "error": "output logits: rel_rms 2.1e-02 > budget 3.1e-03"}
    skipped = {"status": "skipped", "hops": [{"from": "onnx", "to": "coreml", "status": "skipped",
                                              "skipped_reason": "dynamic axes x:1 not exercised"}]}
    assert zoo.cell_from_report(skipped)["reason"] == "dynamic axes x:1 not exercised"
    blocked = {"status": "blocked", "blockers": ["node 'Trilu_4' (Trilu): Trilu first appears in opset 14"]}
    assert zoo.cell_from_report(blocked)["op"] == "Trilu"


def test_cells_from_exceptions():
    cell = zoo.cell_from_exception(errors.UnsupportedError("1 node(s) cannot be lowered to Core ML; first: node "
                                                           "'/roi_heads/TopK' (TopK): no Core ML lowering"))
    assert (cell["status"], cell["op"], cell["node"]) == ("refused", "TopK", "/roi_heads/TopK")
    ov = zoo.cell_from_exception(errors.UnsupportedError("OpenVINO cannot convert 'm.onnx': op ai.onnx.ml::Scaler "
                                                         "has no conversion rule: node 'Scaler'"))
    assert (ov["op"], ov["node"]) == ("ai.onnx.ml::Scaler", "Scaler")
    assert zoo.cell_from_exception(errors.NativeCrash("the worker died (SIGSEGV)"))["status"] == "crashed"
    assert zoo.cell_from_exception(errors.TimedOut("ran past 600 s"))["status"] == "timeout"
    assert zoo.cell_from_exception(errors.UnavailableError("no coremltools"))["status"] == "skipped"
    assert zoo.cell_from_exception(errors.ExportError("torch.onnx.export failed"))["hop"] == "export"
    assert zoo.cell_from_exception(errors.BadInputError("KMeans fails on its sample inputs"))["hop"] == "load"
    dlc = zoo.cell_from_exception(errors.UnsupportedError("the graph split into 2 QNN partitions; node(s) that fell "
                                                          "out to the CPU: '/inner/Transpose' (Transpose)"))
    assert (dlc["op"], dlc["node"]) == ("Transpose", "/inner/Transpose")
    assert zoo.cell_from_exception(KeyError("x"))["status"] == "crashed"


def _cell(model: str, target: str, status: str = "passed", **kw) -> dict:
    return {"model": model, "library": models.get(model).library, "target": target, "status": status,
            "seconds": 2.0, **kw}


def test_table_counts_honest_denominators(tmp_path):
    cells = [_cell("resnet18", t) for t in zoo.DEFAULT_TARGETS]
    cells += [_cell("bert", t) for t in ("onnx", "openvino", "coreml-flex", "dlc")]
    cells.append(_cell("bert", "coreml", "refused", op="Gather", node="/emb/Gather", error="node '/emb/Gather' ..."))
    cells += [_cell("sk_decision_tree", "onnx"),  # ai.onnx.ml: outside the DLC's denominator
              _cell("sk_decision_tree", "dlc", "refused", op="ai.onnx.ml::TreeEnsembleClassifier")]
    tot = zoo.totals(cells, list(zoo.DEFAULT_TARGETS))
    assert (tot["coreml"]["passed"], tot["coreml"]["denominator"]) == (1, 2)
    assert (tot["coreml-flex"]["passed"], tot["coreml-flex"]["denominator"]) == (2, 2)
    assert (tot["dlc"]["passed"], tot["dlc"]["denominator"], tot["dlc"]["apart"]) == (2, 2, 1)
    assert tot["onnx"]["seconds"] == 6.0
    data = {"cells": cells, "runs": [{"command": "benchmarks/zoo.py --jobs 1", "date": "2026-01-02T03:04:05+00:00",
                                      "seconds": 65, "versions": {"onnx": "1.20.1"}}]}
    text = zoo.table(data)
    assert "| Core ML fixed (`coreml`) | 1 | 2 | 50.0 % | 1 | 0 | 0 | 0 | 0 | 0 min 04 s |" in text
    assert "| refused: Gather | 1 | coreml | bert |" in text
    assert "`benchmarks/zoo.py --jobs 1`" in text and "onnx 1.20.1" in text
    row = "| `sk_decision_tree` | sklearn | tabular | none | ✅ 2s | — | — | — | ⛔ ai.onnx.ml::TreeEnsembleClassifier |"
    assert row in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{zoo.README_BEGIN}\nold\n{zoo.README_END}\n\nrest\n")
    assert zoo.update_readme(readme, zoo.totals_line(data))
    new = readme.read_text()
    assert "old" not in new and "Core ML fixed 1/2 (50.0 %)" in new and "DLC 2/2 (100.0 % of the float models)" in new
    assert new.endswith(f"{zoo.README_END}\n\nrest\n")


def test_manifest_loads_in_the_matrix(tmp_path):
    from onnxbridge.matrix.cells import expand
    from onnxbridge.matrix.manifest import load_manifest

    path = tmp_path / "zoo.toml"
    picked = [models.get("resnet18"), models.get("sk_decision_tree")]
    path.write_text(zoo.manifest(picked, list(zoo.DEFAULT_TARGETS), path))
    names = [c.name for c in expand(load_manifest(path))]
    assert "resnet18/dlc-fp32-opset17" in names and "sk_decision_tree/openvino-fp32-opset17" in names
    assert names.count("resnet18_flexible/coreml-fp32-opset17") == 1
    assert not any(n.startswith("sk_decision_tree_flexible") for n in names)


@pytest.mark.slow
@requires("torch", "sklearn", "skl2onnx", "openvino")
@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="torchvision is not installed (zoo extra)")
def test_sample_through_the_harness(tmp_path):  # (torchvision imports only after register_torchvision_ops)
    """Two models from two libraries through ONNX and OpenVINO, each in its own process: real verdicts, a refusal
    that names its op, the results file, the table, and a resumed run that keeps every finished cell."""
    out, md = tmp_path / "r.json", tmp_path / "coverage.md"
    args = [sys.executable, str(BENCH / "zoo.py"), "--models", "^(squeezenet1_1|sk_decision_tree)$",
            "--targets", "onnx,openvino", "--out", str(out), "--table", str(md), "--timeout", "120"]
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    cells = {(c["model"], c["target"]): c for c in json.loads(out.read_text())["cells"]}
    assert {k: c["status"] for k, c in cells.items()} == {
        ("squeezenet1_1", "onnx"): "passed", ("squeezenet1_1", "openvino"): "passed",
        ("sk_decision_tree", "onnx"): "passed", ("sk_decision_tree", "openvino"): "refused"}
    refused = cells["sk_decision_tree", "openvino"]
    assert refused["op"].endswith("TreeEnsembleClassifier") and refused["node"]
    assert "wall time" in run.stdout and "openvino" in run.stdout
    assert "| OpenVINO (`openvino`) | 1 | 2 | 50.0 % | 1 |" in md.read_text()
    again = subprocess.run(args + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    data = json.loads(out.read_text())
    assert len(data["cells"]) == 4 and len(data["runs"]) == 1  # nothing left to run: the table rewritten
