"""paddle2onnx, run in a child process (``onnxbridge.isolation``): it aborts the whole process on
unsupported operators and on an opset above what it emits, it only logs (and then trips over) errors
in its Python part, and with a save path it pip-installs onnx_graphsurgeon at run time to fold
constants; so the ONNX bytes are taken from it directly, checked, and written here."""
from __future__ import annotations

import os
import re
from pathlib import Path

from onnxbridge.errors import ExportError

MAX_OPSET = 21  # paddle2onnx 2.1 aborts above this (SIGABRT: "Due to opset version ... aborted")
MIN_OPSET = 7


def paddle2onnx_opset(opset: int | None) -> int:
    """The opset to ask paddle2onnx for: the requested one within what it emits (17 by default)."""
    return 17 if opset is None else min(max(opset, MIN_OPSET), MAX_OPSET)


def to_onnx(program: str, params: str, save_file: str, opset: int, scratch: str) -> dict:
    """Child-side: convert and write ``save_file`` (paddle2onnx's own temporary files go under ``scratch``).

    paddle2onnx raises the opset itself where an operator needs a newer one (``auto_upgrade_opset``);
    the caller reads the opset it got from the model.
    """
    import tempfile
    import warnings

    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    tempfile.tempdir = scratch
    warnings.filterwarnings("ignore")
    import paddle2onnx
    from paddle2onnx.utils import logging as p2o_logging

    logged: list[str] = []
    p2o_logging.error = lambda message="", *_, **__: logged.append(" ".join(str(message).split()))
    try:
        data = paddle2onnx.export(program, params, None, opset_version=opset, auto_upgrade_opset=True,
                                  enable_onnx_checker=True, enable_optimize=True, verbose=False)
    except Exception as exc:  # it logs the real error, then fails on the model it never made
        raise ExportError(f"paddle2onnx: {_first(logged) or paddle_message(f'{type(exc).__name__}: {exc}')}") from None
    if not data:
        raise ExportError(f"paddle2onnx returned an empty model{f': {_first(logged)}' if logged else ''}")
    Path(save_file).write_bytes(data)
    return {"bytes": len(data)}


def _first(logged: list[str]) -> str:
    return paddle_message(next((m for m in logged if m and m != "None"), ""))


def paddle_message(text: str, limit: int = 300) -> str:
    """A Paddle error as one readable line: without its "In user code" stack, hints and C++ locations."""
    text = " ".join(str(text).split())
    if "In user code:" in text:
        found = list(re.finditer(r"\b\w+Error: ", text))
        text = text[found[-1].start():] if found else text
    text = re.sub(r" ?\(at /paddle/[^)]*\)| ?\[Hint: [^\]]*\]", "", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
