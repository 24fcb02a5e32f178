"""The docs say what the code does (issue 31, item 8): README.md's "Command line" synopsis lists exactly the options
of each command's ``--help``; the report schema version named in README.md and docs/ is ``SCHEMA_VERSION`` (and the
matrix's, ``MATRIX_SCHEMA_VERSION``); every extra of pyproject.toml is in the README's extras list; and
docs/report-schema.md documents every ``timings`` key a conversion writes."""
from __future__ import annotations

import re
import tomllib

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
SCHEMA_DOC = (ROOT / "docs" / "report-schema.md").read_text(encoding="utf-8")
MATRIX_DOC = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# an option in a synopsis line: -o, --opset, --no-validate (in --validate/--no-validate), not qnn-ir or x:0
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def synopsis() -> dict[str | None, set[str]]:
    """The options the README's synopsis lists, per command (``None``: the group, ``onnxbridge [OPTIONS] COMMAND``).
    A command's entry starts at a line ``onnxbridge COMMAND`` and runs over its indented continuation lines."""
    block = re.search(r"^## Command line\n\n```text\n(.*?)^```", README, re.S | re.M)
    assert block, "README.md has no ```text block under '## Command line'"
    found: dict[str | None, set[str]] = {}
    current = None
    for line in block[1].splitlines():
        if line.startswith("onnxbridge "):
            word = line.split()[1]
            current = None if word.startswith(("[", "-")) else word
            assert current not in found, f"{current or 'onnxbridge'} has two entries in the synopsis"
            found[current] = set()
        else:
            assert line.startswith(" ") and found, f"a synopsis line outside any command: {line!r}"
        found[current] |= set(OPTION.findall(line))
    return found


def _third_party_flags() -> set[str]:
    """Flags declared only by plugins that are not onnxbridge's own (an out-of-tree backend installed here): the
    README cannot list them."""
    from onnxbridge.plugins import BACKENDS, FRONTENDS

    own = {kind: set(PYPROJECT["project"]["entry-points"][f"onnxbridge.{kind}"]) for kind in ("frontends", "backends")}
    flags = set()
    for kind, registry in (("frontends", FRONTENDS), ("backends", BACKENDS)):
        for by_plugin in registry.options().values():
            if not set(by_plugin) & own[kind]:
                flags.add(next(iter(by_plugin.values())).flag)
    return flags


def cli_options() -> dict[str | None, list[tuple[str, ...]]]:
    """Each command's options as ``--help`` shows them (every spelling of one option together), ``--help`` left out;
    the group's under ``None``."""
    import click

    from onnxbridge.cli.main import cli

    foreign = _third_party_flags()

    def options(command: click.Command, ctx: click.Context) -> list[tuple[str, ...]]:
        help_text = CliRunner().invoke(cli, [*([command.name] if command is not cli else []), "--help"]).output
        found = []
        for param in command.get_params(ctx):
            if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
                continue
            names = tuple(param.opts + param.secondary_opts)
            if set(names) & foreign:
                continue
            assert any(n in help_text for n in names), f"{names} is not in {command.name} --help"
            found.append(names)
        return found

    root = click.Context(cli, info_name="onnxbridge")
    result: dict[str | None, list[tuple[str, ...]]] = {None: options(cli, root)}
    for name, command in cli.commands.items():
        result[name] = options(command, click.Context(command, info_name=name, parent=root))
    return result


def test_the_synopsis_names_every_command():
    listed, real = synopsis(), cli_options()
    assert set(listed) == set(real), f"synopsis {sorted(map(str, listed))} vs --help {sorted(map(str, real))}"


@pytest.mark.parametrize("command", [None, "convert", "validate", "inputs", "setup", "adapt", "check", "inspect",
                                     "doctor", "matrix"])
def test_the_synopsis_lists_each_commands_real_options(command):
    """Every option the synopsis gives a command exists in its ``--help``, and every option of its ``--help`` is in
    the synopsis under that command (one spelling of it is enough: ``-o`` for ``--output``). The global
    ``-q``/``--debug``, which each command also takes, are listed once, on the group's line."""
    listed, real = synopsis(), cli_options()
    assert command in real, f"onnxbridge has no command {command}"
    spellings = {n for names in real[command] for n in names}
    unknown = sorted(listed.get(command, set()) - spellings)
    assert not unknown, f"the README's synopsis of {command or 'onnxbridge'} lists {unknown}, not in its --help"
    shown = listed.get(command, set()) | (listed.get(None, set()) if command is not None else set())
    missing = [names for names in real[command] if not set(names) & shown]
    assert not missing, f"{command or 'onnxbridge'} --help has {missing}, not in the README's synopsis"


def test_the_schema_versions_named_are_the_code_s():
    from onnxbridge.matrix.outputs import MATRIX_SCHEMA_VERSION
    from onnxbridge.report import SCHEMA_VERSION

    named = {
        "README.md `schema_version`": re.findall(r"`schema_version` (\d+\.\d+)", README),
        "docs/report-schema.md title": re.findall(r"^# Report schema \(version (\d+\.\d+)\)", SCHEMA_DOC, re.M),
        "docs/report-schema.md table": re.findall(r"^\| `schema_version` \| `\"(\d+\.\d+)\"`", SCHEMA_DOC, re.M),
    }
    for where, versions in named.items():
        assert versions, f"{where}: no schema version found"
        assert set(versions) == {SCHEMA_VERSION}, f"{where} says {versions}, reports write {SCHEMA_VERSION}"
    matrix = re.findall(r"^\| `schema_version` \| `\"(\d+\.\d+)\"`", MATRIX_DOC, re.M)
    assert matrix == [MATRIX_SCHEMA_VERSION], f"docs/matrix.md says {matrix}, matrix.json has {MATRIX_SCHEMA_VERSION}"


def test_every_extra_is_in_the_readme():
    sentence = re.search(r"^Extras: (.*?)\.\s", README, re.S | re.M)
    assert sentence, "README.md has no 'Extras: ...' list"
    listed = set(re.findall(r"`([\w-]+)`", sentence[1]))
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    assert extras <= listed, f"extras not in the README's list: {sorted(extras - listed)}"
    assert listed <= extras, f"the README lists extras pyproject.toml does not have: {sorted(listed - extras)}"


def test_the_report_schema_doc_has_every_timing(tmp_path):
    """One tiny ONNX -> ONNX conversion with every timed stage that runs without a framework (optimize, localize on),
    its ``timings`` keys against the ``timings`` row of docs/report-schema.md."""
    import onnxbridge
    from tests.helpers.models import save_small_model

    save_small_model(tmp_path / "m.onnx")
    result = onnxbridge.convert(str(tmp_path / "m.onnx"), output=tmp_path / "out.onnx", opset=17, optimize=True,
                                localize="on")
    written = set(result.report["timings"])
    assert {"load_s", "export_s", "build_s", "write_s", "validate_s", "total_s", "optimize_s"} <= written
    row = re.search(r"^\| `timings` \|(.*)$", SCHEMA_DOC, re.M)
    assert row, "docs/report-schema.md has no `timings` row"
    documented = set(re.findall(r"`(\w+_s)`", row[1]))
    assert written <= documented, f"timings not in docs/report-schema.md: {sorted(written - documented)}"
    stages = set(re.findall(r"_stage\(\"(\w+)\"", (ROOT / "onnxbridge" / "spine" / "conversion.py").read_text(encoding="utf-8")))
    assert stages, "no _stage(...) keys found in onnxbridge/spine/conversion.py"  # every timed stage, run here or not
    assert {f"{s}_s" for s in stages} | {"total_s"} <= documented, \
        f"stages not in docs/report-schema.md: {sorted({f'{s}_s' for s in stages} - documented)}"
