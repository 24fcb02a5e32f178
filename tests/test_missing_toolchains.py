"""A backend whose toolchain cannot be imported is exit 3 with the install hint in every command that needs it
(convert, check, validate, inspect), never exit 4 with a ModuleNotFoundError. Each toolchain is hidden by a folder
first on PYTHONPATH holding a package of its name whose import raises ImportError (its distribution metadata stays
installed, so only the import can tell)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_output_paths import small_onnx

HIDDEN = ("coremltools", "openvino", "tensorrt", "tensorrt_rtx", "onnxruntime_qnn")


@pytest.fixture(scope="module")
def hidden(tmp_path_factory) -> Path:
    """A PYTHONPATH folder in which every toolchain of ``HIDDEN`` fails to import."""
    folder = tmp_path_factory.mktemp("hidden")
    for name in HIDDEN:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f"raise ImportError('{name} is hidden by the test')\n")
    return folder


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return small_onnx(tmp_path_factory.mktemp("model") / "m.onnx")


def _cli(hidden: Path, cwd: Path, *args) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join([str(hidden), str(root)])}
    return subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd)


CASES = {
    "convert --to coreml": (["convert", "{m}", "-o", "o.mlpackage"], "coremltools", "onnxbridge[coreml]"),
    "check --targets coreml": (["check", "{m}", "--targets", "coreml"], "coremltools", "onnxbridge[coreml]"),
    "check --targets onnx,coreml": (["check", "{m}", "--targets", "onnx,coreml", "--opset", "13"], "coremltools",
                                    "onnxbridge[coreml]"),
    "inspect .mlpackage": (["inspect", "x.mlpackage"], "coremltools", "onnxbridge[coreml]"),
    "validate .mlpackage": (["validate", "{m}", "x.mlpackage"], "coremltools", "onnxbridge[coreml]"),
    "convert --to openvino": (["convert", "{m}", "-o", "o.xml"], "openvino", "onnxbridge[openvino]"),
    "check --targets openvino": (["check", "{m}", "--targets", "openvino"], "openvino", "onnxbridge[openvino]"),
    "inspect .xml": (["inspect", "x.xml"], "openvino", "onnxbridge[openvino]"),
    "validate .xml": (["validate", "{m}", "x.xml"], "openvino", "onnxbridge[openvino]"),
    "convert --to tensorrt": (["convert", "{m}", "-o", "o.engine"], "tensorrt", "onnxbridge[tensorrt]"),
    "check --targets tensorrt": (["check", "{m}", "--targets", "tensorrt"], "tensorrt", "onnxbridge[tensorrt]"),
    "convert --to dlc": (["convert", "{m}", "--to", "dlc", "-o", "o.dlc"], "onnxruntime", "onnxbridge[qnn]"),
    "validate .engine": (["validate", "{m}", "x.engine"], "tensorrt", "onnxbridge[tensorrt]"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hidden_toolchain_is_exit_3_with_the_install_hint(hidden, model, tmp_path, case):
    args, names, hint = CASES[case]
    (tmp_path / "x.mlpackage").mkdir()  # artifacts to read: refused for the toolchain before they are looked at
    (tmp_path / "x.xml").write_text("<net/>")
    (tmp_path / "x.bin").write_bytes(b"")
    (tmp_path / "x.engine").write_bytes(b"vtrt" + bytes(60))
    r = _cli(hidden, tmp_path, *[a.format(m=model) for a in args])
    err = r.stderr.strip()
    assert r.returncode == 3, (r.returncode, err)
    assert len(err.splitlines()) == 1 and err.startswith("error:") and "Traceback" not in err, err
    assert names in err and hint in err, err
    assert not any(p.name.startswith("o.") for p in tmp_path.iterdir())
