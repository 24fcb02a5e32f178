"""examples/plugins/onnxbridge-ort-format, installed into a temporary target directory (no file of onnxbridge
changes): it shows in `doctor`, its declared flag in `convert --help`, and `--to ort --optimization extended`
converts and passes its hop; without it, `--to ort` is an unknown backend; its own tests pass."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PLUGIN = ROOT / "examples" / "plugins" / "onnxbridge-ort-format"
CLI = Path(sys.executable).parent / "onnxbridge"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The environment of a process that sees the plugin (PYTHONPATH: where pip put it)."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(target), str(PLUGIN)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}


def _run(args, env, cwd):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


@pytest.mark.slow
def test_the_installed_plugin_is_a_backend(installed, tmp_path):
    from tests.helpers.models import save_small_model

    save_small_model(tmp_path / "m.onnx")
    doctor = json.loads(_run(["doctor", "--json"], installed, tmp_path).stdout)
    assert any(p["name"] == "ort" and p["kind"] == "backend" and p["available"] for p in doctor["plugins"])
    assert "--optimization [basic|extended|all]" in _run(["convert", "--help"], installed, tmp_path).stdout
    res = _run(["convert", "m.onnx", "--to", "ort", "-o", "m.ort", "--optimization", "extended", "--report", "r.json"],
               installed, tmp_path)
    assert res.returncode == 0, res.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["status"] == "passed" and rep["hops"][-1]["to"] == "ort" and rep["hops"][-1]["status"] == "passed"
    assert rep["artifact"]["backend"]["optimization"] == "extended"
    wrong = _run(["convert", "m.onnx", "--to", "onnx", "-o", "x.onnx", "--optimization", "basic"], installed, tmp_path)
    assert wrong.returncode == 2 and "--optimization does not apply to --to onnx (it applies to --to ort)" in wrong.stderr


def test_without_it_ort_is_unknown(tmp_path):
    from tests.helpers.models import save_small_model

    save_small_model(tmp_path / "m.onnx")
    res = _run(["convert", "m.onnx", "--to", "ort", "-o", "m.ort"], {**os.environ, "PYTHONPATH": str(ROOT)}, tmp_path)
    assert res.returncode == 2 and "unknown backend 'ort'" in res.stderr


@pytest.mark.slow
def test_the_plugins_own_tests(installed):
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
                         capture_output=True, text=True, timeout=600, env=installed, cwd=PLUGIN)
    assert res.returncode == 0, res.stdout[-3000:]
