"""The scripts under examples/ run and say every conversion passed."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, check_report
from tests.helpers.extras import requires


SCRIPTS = ["adapt_opsets.py", "convert_torch.py", "convert_sklearn.py", "validation_reports.py", "convert_coreml.py",
           "convert_tensorrt.py", "convert_dlc.py", "true_verdicts.py", "optimize.py", "hostile_inputs.py",
           "transformers_to_edge.py", "calibrated_verdicts.py", "killed_runs.py"]
WITHOUT_TORCH = {"adapt_opsets.py", "convert_sklearn.py", "killed_runs.py"}  # the others convert torch models


@pytest.mark.parametrize("script", [s if s in WITHOUT_TORCH else pytest.param(s, marks=requires("torch"))
                                    for s in SCRIPTS])
@pytest.mark.fast_cases("adapt_opsets.py")
def test_example_runs(script, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), str(tmp_path)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed" in out.stdout  # each script exits non-zero when a conversion fails
    reports = [p for p in tmp_path.rglob("*.json") if '"schema_version"' in p.read_text()[:200]]
    for report in reports:  # the reports the scripts write match the published schema too
        check_report(report)
