"""The ONNX target: the builder's output is the artifact; onnxruntime runs it."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from onnxbridge.registry import Plugin

PLUGIN = Plugin("onnx", "onnxbridge.backends.onnx_target", requires=("onnx", "onnxruntime"), priority=0,
                description="ONNX file, run with onnxruntime (the reference runtime)")

NAME = "onnx"
SUFFIXES = (".onnx",)
PRECISIONS = ("fp32", "fp16")  # int8 ONNX is not made here: quantize it, then `validate --precision int8`


def inspect(path: str | Path) -> dict:
    from onnxbridge.inspection import summarize

    return summarize(path)


def runner(path: str | Path, *, onnx_path: str | Path | None = None) -> Callable[[Mapping], list]:
    """An onnxruntime session on the file (fp16 graphs run node by node: see ``runtime.Session``)."""
    from onnxbridge.runtime import Session

    return Session(str(path))
