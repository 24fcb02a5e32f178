"""What a new user trips on first (issue 21): install hints that survive the terminal, flags accepted after the
command, the backend inferred from -o's name, a LICENSE that matches pyproject, full-width piped output, reports
without the libraries' deprecation noise."""
from __future__ import annotations

from pathlib import Path

import pytest

from onnxbridge.errors import BadInputError
from tests.conftest import ROOT
from tests.helpers.extras import requires

HINT = "missing onnxruntime-qnn (pip install 'onnxbridge[qnn]')"


def test_install_hints_keep_their_extras_in_doctor(cli, monkeypatch):
    """rich would read '[qnn]' as markup and print "pip install 'onnxbridge'": the hint must be copy-pasteable."""
    from onnxbridge.plugins import BACKENDS

    real = BACKENDS.status
    monkeypatch.setattr(BACKENDS, "status", lambda name: {**real(name), "available": False, "reason": HINT}
                        if name == "dlc" else real(name))
    monkeypatch.setenv("COLUMNS", "400")
    res = cli("doctor")
    assert res.exit_code == 0 and "pip install 'onnxbridge[qnn]'" in res.output, res.output


@pytest.mark.slow
@requires("torch")
def test_quiet_and_debug_work_after_the_command(cli, tmp_path):
    quiet = cli("convert", f"{ROOT / 'examples' / 'models.py'}:cnn", "-o", tmp_path / "m.onnx", "--quiet")
    assert quiet.exit_code == 0 and quiet.stdout == "", quiet.output
    with pytest.raises(BadInputError, match="does not exist"):  # --debug: the traceback, not the one line
        cli("inspect", tmp_path / "missing.onnx", "--debug")
    plain = cli("inspect", tmp_path / "missing.onnx")
    assert plain.exit_code == 2 and "Traceback" not in plain.output


@pytest.mark.slow
@requires("torch")
def test_the_backend_is_inferred_from_the_output_name_and_said(tmp_path):
    import onnxbridge

    rep = onnxbridge.convert(f"{ROOT / 'examples' / 'models.py'}:cnn", output=tmp_path / "m.xml").report
    assert rep["artifact"]["format"] == "openvino" and (tmp_path / "m.bin").is_file()
    assert "--to openvino: inferred from the output's name (m.xml)" in rep["notes"]
    rep = onnxbridge.convert(f"{ROOT / 'examples' / 'models.py'}:cnn", output=tmp_path / "m.onnx").report
    assert rep["artifact"]["format"] == "onnx" and not any("inferred" in n for n in rep["notes"])
    with pytest.raises(BadInputError, match="-o m.model: no installed backend writes files named like that"):
        onnxbridge.convert(f"{ROOT / 'examples' / 'models.py'}:cnn", output=tmp_path / "m.model")  # no silent ONNX


def test_the_license_file_is_the_one_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()


def test_a_skipped_hop_prints_its_reason_not_an_empty_table():
    from rich.console import Console

    from onnxbridge.report import render

    console = Console(record=True, width=120)
    hop = {"from": "onnx", "to": "tensorrt", "status": "skipped", "samples": 0, "outputs": [], "errors": [],
           "tolerance": {"atol": 1e-4, "rtol": 1e-3, "precision": "fp32"}, "latency_s": {},
           "notes": ["skipped: no CUDA device [cudaError 35]"]}
    render({"hops": [hop]}, console)
    text = console.export_text()
    assert text.splitlines()[0] == "onnx -> tensorrt: skipped (0 sample(s), atol 0.0001, rtol 0.001)"
    assert "┃" not in text and "[cudaError 35]" in text  # no empty table; bracketed text is not eaten as markup


@pytest.mark.slow
@requires("torch")
def test_piped_output_is_not_cut_to_80_columns_and_the_report_holds_no_library_noise(tmp_path):
    """Through a pipe (CI logs) rich assumed 80 columns: shapes and numbers came out as '3x4x64x…'. The same run's
    report keeps the exporter's deprecations and advice to its caller out of ``warnings`` (--fail-on warning)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [sys.executable, "-m", "onnxbridge.cli.main", "convert", f"{ROOT / 'examples' / 'models.py'}:cnn", "-o",
           str(tmp_path / "m.onnx"), "--dynamic", "x:0", "--exporter", "torchscript", "--report",
           str(tmp_path / "r.json"), "--fail-on", "warning"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3x4x64x64" in proc.stdout and "…" not in proc.stdout, proc.stdout
    assert max(map(len, proc.stdout.splitlines())) > 80
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["warnings"] == [], rep["warnings"]


def test_library_noise_is_logged_at_debug_and_model_warnings_are_kept(tmp_path, caplog):
    import logging
    import sysconfig
    import warnings

    from onnxbridge.quiet import quiet

    user_file = str(tmp_path / "my_model.py")
    library_file = str(Path(sysconfig.get_path("purelib")) / "torch" / "onnx" / "utils.py")
    caught: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="onnxbridge.quiet"), quiet(caught):
        warnings.warn_explicit("The feature will be removed", DeprecationWarning, library_file, 1)
        warnings.warn_explicit("`x` is deprecated", FutureWarning, library_file, 2)
        warnings.warn_explicit("Implicitly cleaning up <TemporaryDirectory '/tmp/x'>", ResourceWarning,
                               library_file, 3)
        warnings.warn_explicit("You are using the legacy TorchScript-based ONNX export. ...", UserWarning,
                               user_file, 4)
        warnings.warn_explicit("Converting a tensor to a Python boolean might cause the trace to be incorrect",
                               UserWarning, library_file, 5)
        warnings.warn_explicit("my_op is deprecated", DeprecationWarning, user_file, 6)  # the model's own code
        import numpy as np

        with np.errstate(over="warn"):
            np.exp(np.float32(1000))  # a numpy RuntimeWarning: computed in the model's numbers, kept
    assert caught == ["Converting a tensor to a Python boolean might cause the trace to be incorrect",
                      "my_op is deprecated", "overflow encountered in exp"], caught
    logged = caplog.text
    assert "The feature will be removed" in logged and "Implicitly cleaning up" in logged and "legacy" in logged
