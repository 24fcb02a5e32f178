"""Run each framework's tests (tests/frontends/<framework>/) in a pytest process of its own.

TensorFlow and Paddle cannot be imported into one process, so the main run never imports either; each group runs
in a child pytest (tests/helpers/isolation.py) under this run's marker expression, and fails with the child's
failures listed.
"""
from __future__ import annotations

import pytest

from tests.conftest import missing_modules
from tests.helpers.isolation import GROUPS, run_group

MODULES = {"tensorflow": ("tensorflow", "tf2onnx"), "paddle": ("paddle", "paddle2onnx"), "jax": ("jax", "flax", "jax2onnx")}


@pytest.mark.parametrize("framework", sorted(GROUPS))
def test_framework_suite(framework, tmp_path, request):
    missing = missing_modules(*MODULES[framework])
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    outcome = run_group(framework, tmp_path, request.config.getoption("markexpr"))
    print(f"{framework} suite: {outcome.summary()}")
    assert outcome.returncode == 0, f"{framework} suite ({outcome.summary()}) exited {outcome.returncode}:\n" + \
        ("\n".join(outcome.failed) or outcome.tail)
    assert outcome.counts.get("tests"), "the suite collected nothing"
