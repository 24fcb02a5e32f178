"""The core knows no plugin by name: what is true of one plugin (the frameworks it cannot follow into a process, what
its nodes are called, the GPUs it needs, its blocker hints, the commands it adds, whether its sources declare
shapes) is in its declaration (``Plugin``, or its ``SourceModel``), which the core reads through the registry.

``onnx`` is the exception: it is the format the core is built on, and the onnx frontend and backend are the built-in
identity plugins, so the core may name it, and the distributions the core itself depends on (onnxruntime,
onnxscript, ...), which some plugins also list."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from onnxbridge.errors import UnavailableError
from onnxbridge.plugins import BACKENDS, FRONTENDS
from onnxbridge.registry import Plugin, Registry, Setup
from tests.conftest import ROOT

CORE = (ROOT / "onnxbridge", ROOT / "cli")  # the onnxbridge and onnxbridge.cli packages (not the plugins')


def _core_dependencies() -> set[str]:
    """The distributions onnxbridge itself requires (no extra)."""
    found = set()
    for requirement in importlib.metadata.requires("onnxbridge") or ():
        if "extra ==" not in requirement:
            found.add(re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower())
    return found


def plugin_names() -> set[str]:
    """Every name that is one plugin's: the plugins' names, their distributions, their backends' hop names and their
    setups; less ``onnx`` and the core's own dependencies."""
    names: set[str] = set()
    for registry in (FRONTENDS, BACKENDS):
        for name in registry.names():
            plugin = registry.plugin(name)
            names.update((name, *plugin.requires, *plugin.any_of, *(s.name for s in plugin.setups)))
            if registry is BACKENDS and not plugin.broken:
                names.add(getattr(BACKENDS.module(name), "HOP_NAME", name))
    return names - {"onnx"} - _core_dependencies()


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)}


def named_in_code(path: Path, names: set[str]) -> list[str]:
    """``path``'s string constants (docstrings and comments are prose, not looked at) that are one of ``names``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = _docstrings(tree)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{shown}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
            and node.value in names]


def test_the_names_come_from_the_registry():
    names = plugin_names()
    assert {"torch", "tensorflow", "paddle", "coreml", "dlc", "tensorrt", "qnn-htp-simulator", "paddle2onnx",
            "coremltools"} <= names
    assert not {"onnx", "onnxruntime", "onnxscript", "numpy"} & names


def test_the_core_names_no_plugin():
    names = plugin_names()
    found = [hit for folder in CORE for path in sorted(folder.rglob("*.py")) for hit in named_in_code(path, names)]
    assert found == [], "facts about one plugin belong in its declaration (Plugin):\n" + "\n".join(found)


def test_a_name_in_code_is_found(tmp_path):
    """The check sees a name in code, and not in a docstring or a comment."""
    path = tmp_path / "isolation.py"
    path.write_text('"""torch"""\n# torch\nCONFLICTS = {"paddle": ("tensorflow",)}\n')
    assert [h.split(": ", 1)[1] for h in named_in_code(path, plugin_names())] == ["'paddle'", "'tensorflow'"]


def fake(monkeypatch, kind: str, *plugins: Plugin) -> Registry:
    import onnxbridge.plugins

    registry = Registry(kind, list(plugins))
    monkeypatch.setattr(onnxbridge.plugins, "FRONTENDS" if kind == "frontend" else "BACKENDS", registry)
    return registry


def test_a_declared_conflict_is_refused(monkeypatch):
    from onnxbridge.isolation import require_importable

    fake(monkeypatch, "frontend", Plugin("fw_probe", "pkg", conflicts=("json",)))
    monkeypatch.delitem(sys.modules, "fw_probe", raising=False)
    with pytest.raises(UnavailableError, match="fw_probe cannot be imported .* already imported json"):
        require_importable("fw_probe")


def test_paddle_declares_it_cannot_follow_tensorflow():
    assert FRONTENDS.plugin("paddle").conflicts == ("tensorflow",)


def test_what_a_node_is_called_comes_from_the_declarations(monkeypatch):
    from onnxbridge.report import source_kind

    assert source_kind({"from": "torch", "to": "qnn-htp-simulator"}) == "ONNX node"  # the DLC's hop name
    assert source_kind({"from": "tensorflow", "to": "onnx"}) == "Keras layer"
    assert source_kind({"from": "onnx@17", "to": "coreml"}) == "MIL op"
    fake(monkeypatch, "backend", Plugin("probe", "tests.helpers.crashing_backend", node_kind="probe op"))
    fake(monkeypatch, "frontend", Plugin("torch", "pkg"))  # declares nothing: the core's words
    assert source_kind({"from": "torch", "to": "probe"}) == "probe op"
    assert source_kind({"from": "torch", "to": "onnx"}) == "source"
    assert source_kind({"from": "onnx@13", "to": "onnx"}) == "adapted node"


def test_the_gpus_a_cell_reserves_are_declared(monkeypatch):
    from onnxbridge.matrix.ray_executor import _gpus

    assert (_gpus("tensorrt"), _gpus("coreml"), _gpus("no-such-backend")) == (1, 0, 0)
    fake(monkeypatch, "backend", Plugin("probe", "pkg", gpus=2))
    assert _gpus("probe") == 2


def test_a_backend_s_hints_are_its_own(monkeypatch):
    from onnxbridge.hints import hint

    blocker = "node 'u' (Unique) has no QNN op: the QNN execution provider cannot take it"
    assert "replace the op" in hint(blocker, "dlc") and hint(blocker, "openvino") is None
    fake(monkeypatch, "backend", Plugin("probe", "pkg", hints=((r"wants (\w+)", r"give it \1"),)))
    assert hint("node 'n' wants cake", "probe") == "give it cake"
    assert hint("node 'n' needs --target iOS17", "probe") == "build with --target iOS17 (or newer)"


def test_setup_runs_what_a_plugin_declares(monkeypatch, cli, tmp_path):
    """``onnxbridge setup NAME`` is the plugin's: read from the registry when used, its function imported then."""
    fake(monkeypatch, "frontend", Plugin("probe", "pkg", setups=(
        Setup("probe-env", f"{__name__}:_made", help="an environment for the probe", dir_help="probe: ~/probe"),)))
    text = cli("setup", "--help").output
    assert "probe-env: an environment for the probe." in text and "probe: ~/probe" in text
    result = cli("setup", "probe-env", "--dir", tmp_path)
    assert result.exit_code == 0 and result.stdout == f"made in {tmp_path}\n" and result.stderr == "note: probe\n"
    assert cli("-q", "setup", "probe-env").stdout == ""
    assert cli("setup", "paddle2onnx").exit_code == 2  # not declared by the probe registry


def _made(directory, *, say, note) -> None:
    note("note: probe")
    say(f"made in {directory}")


def test_paddle_declares_its_setup():
    (setup,) = FRONTENDS.plugin("paddle").setups
    assert setup.name == "paddle2onnx" and setup.run == "onnxbridge.frontends.paddle.environment:setup_command"


def test_a_source_that_declares_no_shapes_fixes_no_batch():
    """``--batch`` resizes axis 0 of a source whose specs are only its sample's (``declares_shapes`` False), and
    refuses it where the model fixes that axis."""
    import numpy as np

    from onnxbridge.errors import BadInputError
    from onnxbridge.inputfile import sample_for
    from onnxbridge.plugins import SourceModel
    from onnxbridge.specs import Sample, TensorSpec

    class Source(SourceModel):
        input_specs = [TensorSpec("x", (2, 3), "float32")]
        dynamic: list = []
        sample = Sample({"x": np.zeros((2, 3), np.float32)})

        def export(self, workdir, *, opset, output_names=None):
            raise NotImplementedError

        def run(self, feeds):
            raise NotImplementedError

    with pytest.raises(BadInputError, match="fixes axis 0 of input 'x' to 2"):
        sample_for(Source(), batch=4)
    Source.declares_shapes = False
    assert sample_for(Source(), batch=4).feeds["x"].shape == (4, 3)
