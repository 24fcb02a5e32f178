"""Shared fixtures: example models built in code, the CLI runner, report schema checks."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.helpers import isolation
from tests.helpers.extras import require, skip_unless_importable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "models.py"


def missing_modules(*modules: str) -> list[str]:
    """The modules not importable here; paddle2onnx counts as found where it runs from an environment of its own."""
    def found(module: str) -> bool:
        if module == "paddle2onnx":
            from onnxbridge.frontends.paddle import environment
            return environment.interpreter() is not None
        return importlib.util.find_spec(module) is not None
    return [m for m in modules if not found(m)]


def pytest_ignore_collect(collection_path, config):
    """The tests that need a process of their own are collected only there (tests/helpers/isolation.py)."""
    return isolation.ignored(collection_path, config)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.fast_cases(id, ...)`` on a parametrized test: its cases with other ids are ``slow``."""
    for item in items:
        keep = item.get_closest_marker("fast_cases")
        if keep is not None and hasattr(item, "callspec") and item.callspec.id not in keep.args:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)  # before its fixtures are set up
def pytest_runtest_setup(item):
    skip_unless_importable(item)


@pytest.fixture(scope="session")
def models():
    """examples/models.py as a module (factories cnn, lstm, transformer); its tests skip without torch."""
    require("torch")
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


@pytest.fixture
def native_in_process(monkeypatch):
    """Run backend builds and runners in this process instead of the worker, so a test can monkeypatch them
    (the isolation itself is tested in tests/core/test_worker.py)."""
    from onnxbridge.worker import IN_PROCESS_ENV

    monkeypatch.setenv(IN_PROCESS_ENV, "1")


@pytest.fixture(autouse=True)
def every_written_report_matches_the_schema(monkeypatch):
    """Every report a test makes onnxbridge write (--report, report=) is checked against the JSON Schema."""
    import onnxbridge.spine.results as results

    real = results.write_json

    def checked(path, data):
        check_report(data)
        return real(path, data)

    monkeypatch.setattr(results, "write_json", checked)


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
