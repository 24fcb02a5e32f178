"""Shared fixtures: example models built in code, the CLI runner, report schema checks."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "models.py"

# Frameworks that cannot share a process (tensorflow then paddle segfaults): their tests live in
# these folders and run in a pytest process of their own (tests/test_framework_suites.py starts it).
ISOLATED = {"tensorflow": ROOT / "tests" / "frontends" / "tensorflow",
            "paddle": ROOT / "tests" / "frontends" / "paddle",
            "jax": ROOT / "tests" / "frontends" / "jax"}  # not a crash: jax's XLA threads and memory kept apart
ISOLATED_ENV = "ONNXBRIDGE_TEST_FRAMEWORK"


def missing_modules(*modules: str) -> list[str]:
    """The modules not importable here; paddle2onnx counts as found where it runs from an environment of its own."""
    def found(module: str) -> bool:
        if module == "paddle2onnx":
            from onnxbridge.frontends.paddle import environment
            return environment.interpreter() is not None
        return importlib.util.find_spec(module) is not None
    return [m for m in modules if not found(m)]


def _named_on_command_line(config, folder: Path) -> bool:
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path == folder or folder in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    """Collect an isolated framework's tests only in its own process: when ONNXBRIDGE_TEST_FRAMEWORK
    names it, or when only that framework's folder is named on the command line."""
    path = Path(collection_path).resolve()
    for name, folder in ISOLATED.items():
        if path == folder or folder in path.parents:
            chosen = os.environ.get(ISOLATED_ENV)
            if chosen is not None:
                return None if chosen == name else True
            named = [n for n, f in ISOLATED.items() if _named_on_command_line(config, f)]
            return None if named == [name] else True
    return None


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


@pytest.fixture
def native_in_process(monkeypatch):
    """Run backend builds and runners in this process instead of the worker, so a test can monkeypatch them
    (the isolation itself is tested in tests/test_worker.py)."""
    from onnxbridge.worker import IN_PROCESS_ENV

    monkeypatch.setenv(IN_PROCESS_ENV, "1")


@pytest.fixture(autouse=True)
def every_written_report_matches_the_schema(monkeypatch):
    """Every report a test makes onnxbridge write (--report, report=) is checked against the JSON Schema."""
    import onnxbridge.spine as spine

    real = spine.write_json

    def checked(path, data):
        check_report(data)
        return real(path, data)

    monkeypatch.setattr(spine, "write_json", checked)


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
