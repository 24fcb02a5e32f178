"""The plugin seam: the core never imports the plugin packages, the built-in plugins are found through the same entry
points third parties use, and a plugin that fails to load is listed with the reason, not a crash."""
from __future__ import annotations

import ast
import importlib.metadata

import pytest

from onnxbridge.errors import UnavailableError
from onnxbridge.registry import Plugin, Registry
from tests.conftest import ROOT
from tests.helpers.extras import requires

PLUGIN_PACKAGES = ("onnxbridge.frontends", "onnxbridge.backends", "onnxbridge.cli")


def _imports(tree: ast.AST):
    """Every module a file imports, annotation-only (``if TYPE_CHECKING:``) imports included: the contracts live in
    the core, so not even a type refers into a plugin package."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_the_core_imports_no_plugin_package():
    found = [f"{path.relative_to(ROOT)}: {name}" for path in sorted((ROOT / "onnxbridge").rglob("*.py"))
             for name in _imports(ast.parse(path.read_text()))
             if name.startswith(PLUGIN_PACKAGES)]
    assert found == []


@pytest.mark.parametrize("group, names", [
    ("onnxbridge.frontends", ["torch", "tensorflow", "jax", "paddle", "sklearn", "onnx"]),
    ("onnxbridge.backends", ["onnx", "coreml", "dlc", "tensorrt", "openvino"]),
])
def test_built_in_plugins_come_from_entry_points(group, names):
    declared = {e.name for e in importlib.metadata.entry_points(group=group) if e.dist.name == "onnxbridge"}
    assert set(names) <= declared
    registry = Registry.from_entry_points(group.split(".")[1][:-1], group)
    assert [n for n in registry.names() if n in names] == names  # in priority order
    assert all(isinstance(registry.plugin(n), Plugin) and not registry.plugin(n).broken for n in names)


def test_a_broken_plugin_is_listed_with_the_reason(monkeypatch):
    class Entry:
        name, value = "shiny", "shiny_backend:PLUGIN"

        def load(self):
            raise ImportError("No module named 'shiny_backend'")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [Entry()])
    registry = Registry.from_entry_points("backend", "onnxbridge.backends")
    status = registry.status("shiny")
    assert not status["available"] and "failed to load: ImportError" in status["reason"]
    with pytest.raises(UnavailableError, match="backend 'shiny' failed to load"):
        registry.load("shiny")


def test_a_misnamed_plugin_is_broken(monkeypatch):
    class Entry:
        name, value = "one", "pkg:PLUGIN"

        def load(self):
            return Plugin("other", "pkg")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [Entry()])
    assert "not a Plugin named 'one'" in Registry.from_entry_points("backend", "g").plugin("one").broken



def test_an_option_goes_only_to_the_plugins_that_declare_it(cli, tmp_path):
    """Refused where the target does not declare it, naming the targets that do; a choice the target does not
    offer is refused with its own choices."""
    from tests.conftest import assert_one_line_error

    examples = ROOT / "examples" / "models.py"
    assert_one_line_error(cli("convert", f"{examples}:cnn", "-o", tmp_path / "m.onnx", "--workspace", "64"), 2,
                          "--workspace does not apply to --to onnx (it applies to --to tensorrt)")
    assert_one_line_error(cli("convert", f"{examples}:cnn", "-o", tmp_path / "m.dlc", "--to", "dlc",
                              "--flavour", "tensorrt-rtx"), 2,
                          "--flavour tensorrt-rtx does not apply to --to dlc; its choices: qairt, qnn-ir")
    assert not list(tmp_path.iterdir())


def test_cli_flags_are_built_from_declarations(monkeypatch):
    """A plugin's declared option becomes a flag, its help naming the plugin; one name declared by two plugins is
    one flag with their choices merged."""
    import click
    from click.testing import CliRunner

    import onnxbridge.plugins
    from onnxbridge.cli.main import plugin_options
    from onnxbridge.options import Option

    fake = Registry("backend", [
        Plugin("ort", "pkg_ort", options=(Option("optimization", "Graph optimization level.", kind="choice",
                                                 choices=("basic", "extended", "all")),)),
        Plugin("other", "pkg_other", options=(Option("optimization", "Level.", kind="choice", choices=("o3",)),))])
    monkeypatch.setattr(onnxbridge.plugins, "BACKENDS", fake)

    @click.command()
    @plugin_options("backend")
    def command(**options):
        click.echo(repr(options))

    text = CliRunner().invoke(command, ["--help"]).output
    assert "--optimization [basic|extended|all|o3]" in text and "[--to ort, other]" in text
    assert CliRunner().invoke(command, ["--optimization", "extended"]).output.strip() == "{'optimization': 'extended'}"
    assert CliRunner().invoke(command, ["--optimization", "nope"]).exit_code == 2


@pytest.mark.slow
@requires("torch")
def test_a_build_must_return_a_build_result(monkeypatch, cli, tmp_path, native_in_process):
    """The seam is typed: a backend whose build returns a dict (the old, untyped contract) is the plugin's bug, exit
    4, and what it wrote is removed."""
    import tests.helpers.crashing_backend as crashy
    from onnxbridge.plugins import BACKENDS

    plugin = Plugin("crashy", "tests.helpers.crashing_backend", requires=("onnx",))
    monkeypatch.setitem(BACKENDS._plugins, "crashy", plugin)
    monkeypatch.setattr(crashy, "build", lambda onnx_path, output, **kw: output.write_bytes(b"x") and {"facts": 1})
    res = cli("convert", f"{ROOT / 'examples' / 'models.py'}:cnn", "--to", "crashy", "-o", tmp_path / "m.crash")
    assert res.exit_code == 4 and res.stderr.count("\n") == 1
    assert "TypeError: backend 'crashy': build() returned dict, not a BuildResult" in res.stderr
    assert not (tmp_path / "m.crash").exists()


@pytest.mark.parametrize("kind", ["frontend", "backend"])
def test_every_built_in_plugin_satisfies_its_contract(kind):
    from onnxbridge.plugins import BACKENDS, FRONTENDS, Backend, Frontend

    registry, contract = (FRONTENDS, Frontend) if kind == "frontend" else (BACKENDS, Backend)
    for name in registry.names():
        if registry.status(name)["available"]:
            module = registry.load(name)
            assert isinstance(module, contract) and registry.lacking(module) == [], name


def test_a_backend_lacking_a_contract_member_is_refused_where_it_is_named(monkeypatch, cli, tmp_path):
    """A half-written backend (no ``check``) is exit 3 naming what it lacks, before any work."""
    import sys
    import types

    from onnxbridge.plugins import BACKENDS

    half = types.ModuleType("half_backend")
    half.SUFFIXES, half.PRECISIONS = (".half",), ("fp32",)
    half.build = half.runner = half.inspect = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "half_backend", half)
    monkeypatch.setitem(BACKENDS._plugins, "half", Plugin("half", "half_backend"))
    res = cli("convert", f"{ROOT / 'examples' / 'models.py'}:cnn", "--to", "half", "-o", tmp_path / "m.half")
    assert res.exit_code == 3 and "does not implement the backend contract: it lacks check" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_target_is_checked_against_what_the_backend_declares(cli, tmp_path):
    model = f"{ROOT / 'examples' / 'models.py'}:cnn"
    res = cli("convert", model, "--to", "openvino", "-o", tmp_path / "m.xml", "--target", "iOS17")
    assert res.exit_code == 2 and "--target does not apply to --to openvino (it applies to --to coreml)" in res.stderr
    res = cli("convert", model, "--to", "coreml", "-o", tmp_path / "m.mlpackage", "--target", "iOS9")
    assert res.exit_code == 2 and "unknown coreml target 'iOS9'; known: iOS15, iOS16, iOS17, iOS18" in res.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@requires("torch")
def test_the_onnx_output_is_a_backend_whose_artifact_is_the_graph_the_first_hop_ran(tmp_path):
    """``--to onnx`` goes through the same stages: written once at the output, built (nothing to convert), one
    hop on that file, each stage timed."""
    import onnxbridge
    from onnxbridge.plugins import BACKENDS

    res = onnxbridge.convert(f"{ROOT / 'examples' / 'models.py'}:cnn", output=tmp_path / "m.onnx")
    rep = res.report
    assert [h["to"] for h in rep["hops"]] == ["onnx"] and rep["status"] == "passed"
    assert rep["artifact"]["path"] == str(tmp_path / "m.onnx") and "backend" not in rep["artifact"]
    assert set(rep["timings"]) == {"load_s", "export_s", "build_s", "write_s", "backend_s", "validate_s", "total_s"}
    assert BACKENDS.load("onnx").ONNX_ARTIFACT and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_input_shapes_and_dynamic_are_parsed_once_into_the_build_context():
    from onnxbridge.plugins import BuildContext
    from onnxbridge.specs import DynamicAxis, InputSpec, TensorSpec

    spec = InputSpec.parse(["x:1,3,8,8", TensorSpec("y", (2,), None)], ["x:0:batch:1..4"])
    assert spec.fixed() == {"x": (1, 3, 8, 8), "y": (2,)}
    assert spec.dynamic == (DynamicAxis("x", 0, "batch", 1, 4),)
    assert InputSpec.parse(spec.shapes, list(spec.dynamic)) == spec  # parsed values pass through unchanged
    context = BuildContext(inputs=spec)
    assert context.input_shapes == spec.fixed() and context.dynamic == list(spec.dynamic)


def test_importing_a_plugin_module_first_does_not_break_its_registration():
    """Entry points are read on first use: a declaration module that imports onnxbridge.plugins (as the ONNX
    frontend does) may be imported before the registry without being listed as broken."""
    import subprocess
    import sys

    code = ("import onnxbridge.frontends.onnxfile\nfrom onnxbridge.plugins import FRONTENDS\n"
            "print(FRONTENDS.plugin('onnx').broken)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stderr[-2000:]


def test_every_package_folder_is_installed():
    """pyproject.toml lists its packages one by one (``package-dir`` maps frontends/, backends/, cli/ under
    onnxbridge): a package folder missing from the list would be left out of a wheel (an editable install still
    finds it, so nothing else would tell)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {f"onnxbridge.{top}" if top != "onnxbridge" else top: ROOT / top
               for top in ("onnxbridge", "frontends", "backends", "cli")}
    found = {name + "".join(f".{p}" for p in init.parent.relative_to(root).parts)
             for name, root in folders.items() for init in root.rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert sorted(found - set(config["packages"])) == []
