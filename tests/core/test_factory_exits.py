"""User code that calls ``sys.exit`` (a factory, its module, a model's forward) never ends a run silently with that
status: it is bad input, one line and exit 2, and nothing is written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.conftest import missing_modules

FACTORIES = '''
import sys

def quits():
    sys.exit(0)

def says_why():
    sys.exit("no GPU here")

def runs_a_model_that_quits():
    import torch

    class Quits(torch.nn.Module):
        def forward(self, x):
            sys.exit(0)

    return Quits(), (torch.ones(2),)
'''


@pytest.fixture
def factories(tmp_path) -> Path:
    (tmp_path / "f.py").write_text(FACTORIES)
    (tmp_path / "quits_on_import.py").write_text("import sys\nsys.exit()\n\ndef model():\n    pass\n")
    return tmp_path


def _convert(folder: Path, source: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", "convert", source, "-o", "o.onnx",
                           "--report", "r.json"], capture_output=True, text=True, timeout=300, cwd=folder,
                          env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(root)})


@pytest.mark.parametrize("source, message", [
    ("f.py:quits", "error: the factory 'f.py:quits' called sys.exit(0)"),
    ("f.py:says_why", "error: the factory 'f.py:says_why' called sys.exit('no GPU here')"),
    ("quits_on_import.py:model", "error: importing 'quits_on_import.py' for the factory 'quits_on_import.py:model' "
                                 "called sys.exit()"),
    pytest.param("f.py:runs_a_model_that_quits", "error: the model's code (or a library it calls) called sys.exit(0)",
                 marks=[pytest.mark.slow,  # torch's import and export: ~10 s
                        pytest.mark.skipif(bool(missing_modules("torch")), reason="needs torch")]),
])
def test_user_code_calling_sys_exit_is_exit_2(factories, source, message):
    r = _convert(factories, source)
    assert (r.returncode, r.stderr.strip()) == (2, message)
    assert not (factories / "o.onnx").exists() and not (factories / "r.json").exists()


def test_the_python_api_raises_for_a_factory_that_exits(factories, monkeypatch):
    monkeypatch.chdir(factories)
    with pytest.raises(BadInputError, match=r"^the factory 'f.py:quits' called sys.exit\(0\)$"):
        onnxbridge.convert("f.py:quits", output=factories / "o.onnx")
