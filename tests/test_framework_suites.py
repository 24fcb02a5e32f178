"""Run each isolated framework's tests (tests/frontends/<framework>/) in a pytest process of its own.

TensorFlow and Paddle cannot be imported into one process, so the main run never imports either;
this test starts one child pytest per framework and fails with the child's failures listed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import ISOLATED, ISOLATED_ENV, ROOT, missing_modules

MODULES = {"tensorflow": ("tensorflow", "tf2onnx"), "paddle": ("paddle", "paddle2onnx"), "jax": ("jax", "flax", "jax2onnx")}


@pytest.mark.parametrize("framework", sorted(ISOLATED))
def test_framework_suite(framework, tmp_path):
    missing = missing_modules(*MODULES[framework])
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")
    junit = tmp_path / "junit.xml"
    env = {**os.environ, ISOLATED_ENV: framework}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                           str(ISOLATED[framework])], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1500)
    failed: list[str] = []
    counts = ""
    if junit.exists():
        suite = ET.parse(junit).getroot().find("testsuite")
        counts = ", ".join(f"{k} {suite.get(k)}" for k in ("tests", "failures", "errors", "skipped"))
        for case in suite.iter("testcase"):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}: {(problem.get('message') or '')[:300]}")
    print(f"{framework} suite: {counts}")
    tail = "\n".join(proc.stdout.splitlines()[-40:] + proc.stderr.splitlines()[-20:])
    assert proc.returncode == 0, f"{framework} suite ({counts}) exited {proc.returncode}:\n" + \
        ("\n".join(failed) or tail)
    assert "tests 0" not in counts, "the suite collected nothing"
