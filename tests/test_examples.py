"""The scripts under examples/ run and say every conversion passed."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("script", ["adapt_opsets.py", "convert_torch.py", "convert_sklearn.py",
                                    "validation_reports.py", "convert_coreml.py",
                                    "convert_tensorrt.py", "convert_dlc.py"])
def test_example_runs(script, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), str(tmp_path)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed" in out.stdout  # each script exits non-zero when a conversion fails
