"""paddle2onnx, run in a child process (``onnxbridge.isolation``): it aborts the whole process on
an opset it cannot reach, and with a save path it pip-installs onnx_graphsurgeon at run time to fold
constants, so the ONNX bytes are taken from it directly and written here."""
from __future__ import annotations

import os
from pathlib import Path

MAX_OPSET = 21  # paddle2onnx 2.1 aborts above this (SIGABRT: "Due to opset version ... aborted")
MIN_OPSET = 7


def paddle2onnx_opset(opset: int | None, notes: list[str]) -> int:
    if opset is None:
        return 17
    use = min(max(opset, MIN_OPSET), MAX_OPSET)
    if use != opset:
        notes.append(f"paddle2onnx exported at opset {use} (it emits up to {MAX_OPSET}); adapted to {opset}")
    return use


def to_onnx(program: str, params: str, save_file: str, opset: int, scratch: str) -> dict:
    """Child-side: convert and write ``save_file`` (paddle2onnx's own temporary files go under ``scratch``)."""
    import tempfile
    import warnings

    os.environ.setdefault("GLOG_minloglevel", "2")
    tempfile.tempdir = scratch
    warnings.filterwarnings("ignore")
    import paddle2onnx

    data = paddle2onnx.export(program, params, None, opset_version=opset, auto_upgrade_opset=False,
                              enable_onnx_checker=True, enable_optimize=True, verbose=False)
    if not data:
        raise RuntimeError("paddle2onnx returned an empty model")
    Path(save_file).write_bytes(data)
    return {"bytes": len(data)}
