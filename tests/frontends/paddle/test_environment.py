"""paddle2onnx from an environment of its own: onnxbridge[all] has Paddle and a current onnx, paddle2onnx (which pins
onnx<=1.17) runs from the Python that has it; without one, the refusal says how to get it."""
from __future__ import annotations

import importlib.util
import sys
import tomllib

import onnx
import pytest

from tests.conftest import ROOT, assert_one_line_error

from onnxbridge.frontends.paddle import environment


def test_all_gets_a_current_onnx_and_paddle_without_paddle2onnx():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = " ".join(extras["all"])
    assert "paddlepaddle" in listed and "paddle2onnx" not in listed and "paddle," not in listed
    assert any(d.startswith("onnx>=1.20") for d in extras["all"])
    if importlib.util.find_spec("paddle2onnx") is None:  # an onnxbridge[all] environment: onnx is current
        assert tuple(int(p) for p in onnx.__version__.split(".")[:2]) >= (1, 19)


def test_the_conversion_ran_where_paddle2onnx_lives(paddle_files, tmp_path):
    """The interpreter found is the one the conversion used: this one only if paddle2onnx is installed here."""
    python = environment.require()
    assert (python == sys.executable) == (importlib.util.find_spec("paddle2onnx") is not None)
    assert environment.version(python) == environment.PADDLE2ONNX or python == sys.executable


def test_no_paddle2onnx_anywhere_says_how_to_get_it(cli, paddle_files, tmp_path, monkeypatch):
    if importlib.util.find_spec("paddle2onnx") is not None:
        pytest.skip("paddle2onnx is installed in this environment")
    monkeypatch.setenv("ONNXBRIDGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(environment.ENV_VAR, raising=False)
    res = cli("convert", paddle_files / "pir" / "convnet.json", "-o", tmp_path / "m.onnx")
    assert_one_line_error(res, 3, "paddle2onnx", "onnxbridge setup paddle2onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_a_wrong_interpreter_is_named(cli, paddle_files, tmp_path, monkeypatch):
    monkeypatch.setenv(environment.ENV_VAR, str(tmp_path / "no-python"))
    res = cli("convert", paddle_files / "pir" / "convnet.json", "-o", tmp_path / "m.onnx")
    assert_one_line_error(res, 2, f"{environment.ENV_VAR}={tmp_path / 'no-python'} is not a Python interpreter")
    assert not (tmp_path / "m.onnx").exists()
