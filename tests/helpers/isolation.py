"""Tests that need a process of their own, the one way this suite isolates them: a group is a folder of ordinary
tests that the main run does not collect; ``run_group`` runs it in a child pytest with the parent's marker
expression (``-m "not slow"`` runs the group's fast tests) and reads the child's JUnit XML back.

TensorFlow and Paddle cannot share a process (importing paddle after tensorflow segfaults), and JAX's XLA threads and
memory are kept apart. A child that crashes fails its group's test with the output it left (pytest's faulthandler
names the test it was in).
"""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GROUP_ENV = "ONNXBRIDGE_TEST_FRAMEWORK"  # set in a child: the group it runs
GROUPS = {"tensorflow": ROOT / "tests" / "frontends" / "tensorflow",
          "paddle": ROOT / "tests" / "frontends" / "paddle",
          "jax": ROOT / "tests" / "frontends" / "jax"}
TIMEOUT_S = 1500


def _named_on_command_line(config, folder: Path) -> bool:
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path == folder or folder in path.parents:
            return True
    return False


def ignored(path: Path, config) -> bool | None:
    """For ``pytest_ignore_collect``: a group's files are collected only in its own process, that is when
    ``GROUP_ENV`` names it, or when only that group's folder is named on the command line."""
    path = Path(path).resolve()
    for name, folder in GROUPS.items():
        if path == folder or folder in path.parents:
            chosen = os.environ.get(GROUP_ENV)
            if chosen is not None:
                return None if chosen == name else True
            named = [n for n, f in GROUPS.items() if _named_on_command_line(config, f)]
            return None if named == [name] else True
    return None


@dataclass
class Outcome:
    """A child run: its exit code, the JUnit counts, each failed test with its message, and its output's tail."""

    returncode: int
    counts: dict = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    tail: str = ""

    def summary(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.counts.items())


def run_group(name: str, workdir: Path, markexpr: str = "") -> Outcome:
    """Run group ``name``'s tests in a child pytest (``-m markexpr`` when given); JUnit XML goes to ``workdir``."""
    junit = workdir / f"{name}.xml"
    marks = ["-m", markexpr] if markexpr else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                           *marks, str(GROUPS[name])], cwd=ROOT, env={**os.environ, GROUP_ENV: name},
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    outcome = Outcome(proc.returncode, tail="\n".join(proc.stdout.splitlines()[-40:] + proc.stderr.splitlines()[-20:]))
    if junit.exists():
        suite = ET.parse(junit).getroot().find("testsuite")
        outcome.counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
        for case in suite.iter("testcase"):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                outcome.failed.append(f"{case.get('classname')}::{case.get('name')}: "
                                      f"{(problem.get('message') or '')[:300]}")
    return outcome
