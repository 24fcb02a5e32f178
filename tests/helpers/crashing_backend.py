"""A backend for tests/core/test_worker.py whose native code crashes where a test plants it (not a test module)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

NAME = "crashy"
SUFFIXES = (".crash",)
PRECISIONS = ("fp32",)


def build(onnx_path: Path, output: Path, *, target=None, precision="fp32", context=None):
    """Writes the artifact, then crashes where ``CRASH_AT`` (an environment variable) says: ``build`` here,
    ``session`` when the hop's runner is made, ``run`` on its first call."""
    from onnxbridge.atomic import atomic_write_bytes
    from onnxbridge.plugins import BuildResult
    from onnxbridge.worker import RunnerSpec

    atomic_write_bytes(output, Path(onnx_path).read_bytes())
    if os.environ.get("CRASH_AT") == "build":
        os.kill(os.getpid(), signal.SIGSEGV)
    return BuildResult(runner=RunnerSpec("tests.helpers.crashing_backend:Runner", {"path": str(output)},
                                         library="libcrashy 1.0"))


class Runner:
    def __init__(self, path: str):
        from onnxbridge.runtime import Session

        if os.environ.get("CRASH_AT") == "session":
            os.kill(os.getpid(), signal.SIGABRT)
        self.session = Session(path)

    def __call__(self, feeds):
        if os.environ.get("CRASH_AT") == "run":
            os.kill(os.getpid(), signal.SIGSEGV)
        return self.session(feeds)


def runner(path, *, onnx_path=None):
    return Runner(str(path))


def inspect(path) -> dict:
    return {"path": str(path), "format": NAME, "inputs": [], "outputs": []}


def check(onnx_path, context=None) -> list[str]:
    if os.environ.get("CRASH_AT") == "check":
        os.abort()
    return []
