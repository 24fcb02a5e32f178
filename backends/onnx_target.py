"""The ONNX target: the builder's output is the artifact; onnxruntime runs it."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

NAME = "onnx"
SUFFIXES = (".onnx",)


def inspect(path: str | Path) -> dict:
    from onnxbridge.inspection import summarize

    return summarize(path)


def runner(path: str | Path) -> Callable[[Mapping], list]:
    from onnxbridge import runtime

    sess = runtime.session(path)
    return lambda feeds: runtime.run(sess, feeds)
