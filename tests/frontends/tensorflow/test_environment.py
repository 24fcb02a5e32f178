"""The frontend in its environment: doctor, quiet output, lazy imports, the Paddle guard, the example."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_doctor_shows_tensorflow_and_tf2onnx(cli):
    info = json.loads(cli("doctor", "--json").stdout)
    row = next(p for p in info["plugins"] if p["kind"] == "frontend" and p["name"] == "tensorflow")
    assert row["available"] and row["versions"]["tensorflow"] and row["versions"]["tf2onnx"]


@pytest.mark.slow
def test_cli_output_stays_clean(tf_files, tmp_path):
    """No TF C++ start-up lines, absl or tf2onnx logs: a quiet conversion prints nothing at all."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = ("import sys; from onnxbridge.cli.main import main; sys.argv[0] = 'onnxbridge'; main()")
    out = subprocess.run([sys.executable, "-c", code, "-q", "convert", str(tf_files / "scorer.tflite"),
                          "-o", str(tmp_path / "t.onnx")], cwd=ROOT, env=env, check=False, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


def test_frontend_registry_does_not_import_tensorflow():
    code = ("import sys; from onnxbridge.plugins import FRONTENDS; m = FRONTENDS.load('tensorflow'); "
            "assert m.accepts('model.keras') and m.accepts('m.tflite') and not m.accepts('m.onnx'); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_paddle_is_refused_after_tensorflow():
    """In this process TF is loaded: a Paddle source must get a clear error, not a segfault."""
    from onnxbridge.errors import UnavailableError
    from onnxbridge.isolation import require_importable

    if "paddle" in sys.modules:
        pytest.skip("paddle already imported")
    with pytest.raises(UnavailableError, match="already imported tensorflow"):
        require_importable("paddle")


@pytest.mark.slow
def test_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "convert_tensorflow.py"), str(tmp_path)],
                         check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") == 12
