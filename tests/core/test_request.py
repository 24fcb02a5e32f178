"""One option, one declaration (onnxbridge.request): a core option declared once appears as a CLI flag, is taken and
checked by the Python API, and reaches the stages; every declared option does all three."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

import onnxbridge
from onnxbridge import request
from onnxbridge.errors import BadInputError
from onnxbridge.options import Option
from tests.conftest import ROOT
from tests.helpers.models import small_onnx

EXAMPLE = Option("dry_run_example", "An option declared only here, by the test.", kind="int", low=1, default=3)


@pytest.fixture
def declared(monkeypatch):
    """``EXAMPLE`` declared in the convert table (and nowhere else)."""
    monkeypatch.setattr(request, "CONVERT", [*request.CONVERT, EXAMPLE])
    monkeypatch.setitem(request.TABLES, "convert", request.CONVERT)
    return EXAMPLE


def _seen_by_the_stages(monkeypatch) -> list:
    from onnxbridge.spine.conversion import _Conversion

    seen, real = [], _Conversion.export

    def export(self, src, scratch):
        seen.append(self.request)
        return real(self, src, scratch)

    monkeypatch.setattr(_Conversion, "export", export)
    return seen


def test_a_new_option_reaches_the_api_and_the_stages(declared, monkeypatch, tmp_path):
    seen = _seen_by_the_stages(monkeypatch)
    model = small_onnx(tmp_path / "m.onnx")
    onnxbridge.convert(str(model), output=tmp_path / "a.onnx", dry_run_example=7, validate=False)
    onnxbridge.convert(str(model), output=tmp_path / "b.onnx", validate=False)
    assert [r.dry_run_example for r in seen] == [7, 3]  # as given, else its declared default
    with pytest.raises(BadInputError, match=r"argument dry_run_example='x' \(str\) must be an int"):
        onnxbridge.convert(str(model), output=tmp_path / "c.onnx", dry_run_example="x")
    with pytest.raises(BadInputError, match="argument dry_run_example=0 .* must be >= 1"):
        onnxbridge.convert(str(model), output=tmp_path / "c.onnx", dry_run_example=0)


def test_a_new_option_is_a_cli_flag_that_reaches_the_stages(tmp_path):
    """The CLI builds its flags from the table when it is imported: declared first, the flag is in --help and its
    value arrives in the request the stages read."""
    model = small_onnx(tmp_path / "m.onnx")
    script = textwrap.dedent(f"""
        import sys
        from onnxbridge import request
        from onnxbridge.options import Option
        request.CONVERT.append(Option("dry_run_example", "An option declared only here, by the test.", kind="int",
                                      low=1, default=3))
        from onnxbridge.spine.conversion import _Conversion
        real = _Conversion.export
        def export(self, src, scratch):
            print("stage got", self.request.dry_run_example)
            return real(self, src, scratch)
        _Conversion.export = export
        from onnxbridge.cli.main import cli
        cli(sys.argv[1:])
    """)

    def run(*args):
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env=env)

    helped = run("convert", "--help")
    assert "--dry-run-example INTEGER RANGE" in helped.stdout and "declared only here" in helped.stdout
    done = run("convert", model, "-o", tmp_path / "o.onnx", "--no-validate", "--dry-run-example", "5")
    assert done.returncode == 0, done.stderr
    assert "stage got 5" in done.stdout
    refused = run("convert", model, "-o", tmp_path / "o.onnx", "--dry-run-example", "0")
    assert refused.returncode == 2 and "--dry-run-example" in refused.stderr


@pytest.mark.parametrize("command", ["convert", "validate"])
def test_every_declared_option_is_a_flag_and_an_argument(command):
    from click.testing import CliRunner

    from onnxbridge.cli.main import cli

    helped = CliRunner().invoke(cli, [command, "--help"], terminal_width=200).output
    function = getattr(onnxbridge, command)
    parameters = inspect.signature(function).parameters
    for option in request.table(command):
        assert option.name in parameters, option.name
        assert (option.flag in helped) == option.cli, option.flag


def test_plugin_options_are_checked_by_their_declarations():
    """A plugin's option is checked as the plugin declares it (no second table of rules): TensorRT's workspace is
    an int >= 1; a choice two plugins declare differently passes for either and is refused by the spine for the
    other."""
    with pytest.raises(BadInputError, match=r"argument workspace=0 \(int\) must be >= 1"):
        onnxbridge.convert("m.onnx", output="m.engine", workspace=0)
    with pytest.raises(BadInputError, match=r"argument exporter='bogus' \(str\) must be one of auto, dynamo"):
        onnxbridge.convert("m.onnx", output="m.onnx", exporter="bogus")


def test_a_plugin_option_for_another_command_is_refused(models, tmp_path):
    """PyTorch's exporter applies to convert only (``Option.commands``): validate and inputs refuse it (exit 2 in
    the API as on the CLI, where the flag is not offered), never ignore it."""
    model, args = models.cnn()
    out = tmp_path / "m.onnx"
    onnxbridge.convert(model, args, output=out, validate=False)
    with pytest.raises(BadInputError, match=r"--exporter does not apply to validate \(it applies to convert\)"):
        onnxbridge.validate(model, out, sample_inputs=args, exporter="dynamo")
