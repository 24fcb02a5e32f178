"""A backend whose toolchain is missing is exit 3 with the install hint in every command that needs it (check
--targets, convert, inspect, validate), never exit 4 with a ModuleNotFoundError, and the same for every backend: each
backend's toolchain is hidden in turn by a folder first on PYTHONPATH holding a package of its name whose import
raises ImportError (its distribution metadata stays installed, so only the import can tell). One the metadata says
is not installed is refused by the registry (``Registry.require``) before the backend is called."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onnxbridge.errors import UnavailableError
from onnxbridge.plugins import BACKENDS
from tests.helpers.extras import require
from tests.helpers.models import small_onnx

# every backend but the onnx output (onnxruntime is the core's own) -> the modules its toolchain is imported as
TOOLCHAINS = {"coreml": ("coremltools",), "openvino": ("openvino",), "tensorrt": ("tensorrt", "tensorrt_rtx"),
              "dlc": ("onnxruntime_qnn",)}
# what the refusal names, besides the install hint
NAMED = {"coreml": "coremltools", "openvino": "openvino", "tensorrt": "tensorrt", "dlc": "onnxruntime-qnn"}
SUFFIX = {"coreml": ".mlpackage", "openvino": ".xml", "tensorrt": ".engine", "dlc": ".dlc"}


def test_every_backend_has_its_toolchain_hidden_here():
    assert set(TOOLCHAINS) == set(BACKENDS.names()) - {"onnx"}


def _hide(folder: Path, modules: tuple[str, ...]) -> Path:
    for name in modules:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"raise ImportError('{name} is hidden by the test')\n")
    return folder


@pytest.fixture(scope="module")
def hidden(tmp_path_factory) -> dict[str, Path]:
    """Per backend, a PYTHONPATH folder in which its toolchain (only) fails to import."""
    root = tmp_path_factory.mktemp("hidden")
    return {backend: _hide(root / backend, modules) for backend, modules in TOOLCHAINS.items()}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return small_onnx(tmp_path_factory.mktemp("model") / "m.onnx")


def _cli(hidden: Path | None, cwd: Path, *args) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "NO_COLOR": "1",
           "PYTHONPATH": os.pathsep.join([*([str(hidden)] if hidden else []), str(root)])}
    return subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env, cwd=cwd)


COMMANDS = {
    "check --targets": lambda b: ["check", "{m}", "--targets", b],
    "convert --to": lambda b: ["convert", "{m}", "--to", b, "-o", f"o{SUFFIX[b]}"],
    "inspect": lambda b: ["inspect", f"x{SUFFIX[b]}"],
    "validate": lambda b: ["validate", "{m}", f"x{SUFFIX[b]}"],
}
CASES = {f"{command} {backend}": (backend, make(backend))
         for backend in TOOLCHAINS for command, make in COMMANDS.items()
         # a DLC is read by our own reader (tested below); its hop runs on onnxruntime-qnn's simulator
         if not (backend == "dlc" and command in ("inspect", "validate"))}
CASES["check --targets onnx,coreml --opset 13"] = ("coreml", ["check", "{m}", "--targets", "onnx,coreml", "--opset",
                                                              "13"])


@pytest.mark.parametrize("case", CASES)
def test_a_hidden_toolchain_is_exit_3_with_the_install_hint(hidden, model, tmp_path, case):
    backend, args = CASES[case]
    (tmp_path / "x.mlpackage").mkdir()  # artifacts to read: refused for the toolchain before they are looked at
    (tmp_path / "x.xml").write_text("<net/>")
    (tmp_path / "x.bin").write_bytes(b"")
    (tmp_path / "x.engine").write_bytes(b"vtrt" + bytes(60))
    r = _cli(hidden[backend], tmp_path, *[a.format(m=model) for a in args])
    err = r.stderr.strip()
    assert r.returncode == 3, (r.returncode, err)
    assert len(err.splitlines()) == 1 and err.startswith("error:") and "Traceback" not in err, err
    assert NAMED[backend] in err and f"onnxbridge[{BACKENDS.plugin(backend).extra}]" in err, err
    assert not any(p.name.startswith("o.") for p in tmp_path.iterdir())


def test_a_dlc_is_inspected_without_its_toolchain(hidden, model, tmp_path):
    """``inspect`` of a DLC reads it with onnxbridge's own ZIP + FlatBuffer reader: no Qualcomm library needed."""
    require("onnxruntime_qnn")
    made = _cli(None, tmp_path, "convert", model, "--to", "dlc", "-o", "m.dlc", "--no-validate")
    assert made.returncode == 0, made.stderr
    r = _cli(hidden["dlc"], tmp_path, "inspect", "m.dlc", "--json")
    assert r.returncode == 0, r.stderr
    assert '"inputs"' in r.stdout and "hidden by the test" not in r.stdout + r.stderr


@pytest.fixture
def not_installed(monkeypatch):
    """Core ML declared to need a distribution no environment has: the registry says it is not installed."""
    plugin = dataclasses.replace(BACKENDS.plugin("coreml"), requires=("onnxbridge-test-no-such-dist",))
    monkeypatch.setitem(BACKENDS._plugins, "coreml", plugin)
    monkeypatch.delitem(BACKENDS._loaded, "coreml", raising=False)
    return plugin


def test_the_registry_refuses_a_backend_that_is_not_installed(not_installed):
    with pytest.raises(UnavailableError, match="needs onnxbridge-test-no-such-dist, not installed") as caught:
        BACKENDS.require("coreml")
    assert caught.value.hint == "pip install 'onnxbridge[coreml]'"
    with pytest.raises(UnavailableError):
        BACKENDS.load("coreml")
    assert BACKENDS.module("coreml").SUFFIXES == (".mlpackage",)  # what needs no toolchain is still there


def test_convert_asks_the_registry(not_installed, cli, model, tmp_path):
    from tests.conftest import assert_one_line_error

    assert_one_line_error(cli("convert", model, "-o", tmp_path / "o.mlpackage"), 3,
                          "onnxbridge-test-no-such-dist, not installed", "onnxbridge[coreml]")


def test_check_targets_asks_the_registry(not_installed, cli, model):
    from tests.conftest import assert_one_line_error

    assert_one_line_error(cli("check", model, "--targets", "coreml"), 3,
                          "onnxbridge-test-no-such-dist, not installed", "onnxbridge[coreml]")
