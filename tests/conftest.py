"""Shared fixtures: example models built in code, the CLI runner, report schema checks."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "models.py"


@pytest.fixture(scope="session")
def models():
    """examples/models.py as a module (factories cnn, lstm, transformer)."""
    spec = importlib.util.spec_from_file_location("example_models", EXAMPLES)
    module = importlib.util.module_from_spec(spec)
    sys.modules["example_models"] = module  # so pickled example models can be loaded back
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cli(monkeypatch):
    """Invoke the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    from click.testing import CliRunner

    from onnxbridge.cli.main import cli as command

    def run(*args: str):
        return CliRunner().invoke(command, [str(a) for a in args], catch_exceptions=False)

    return run


def check_report(report) -> dict:
    """Validate a report (dict or JSON path) against the published JSON Schema."""
    import jsonschema

    from onnxbridge.report import SCHEMA_PATH

    data = json.loads(Path(report).read_text()) if isinstance(report, (str, Path)) else report
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(data)
    return data


def assert_one_line_error(result, code: int, *needles: str) -> str:
    """Exit code as expected, a single 'error:' line on stderr, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    err = result.stderr.strip()
    assert "Traceback" not in result.output
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:"), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err
