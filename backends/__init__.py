"""Backends: targets a converted ONNX model is turned into, imported only when used.

A backend module defines ``SUFFIXES``, ``inspect(path) -> dict`` and ``runner(path) -> callable(feeds) ->
outputs``; a backend other than onnx also ``build(onnx_path, output, *, target, precision) -> dict`` (facts for the
report). Whether one is usable is the registry's business (``BACKENDS.status``, from package metadata).
"""
from __future__ import annotations

from onnxbridge.registry import Plugin, Registry

BACKENDS = Registry("backend", [
    Plugin("onnx", "onnxbridge.backends.onnx_target", requires=("onnx", "onnxruntime"),
           description="ONNX file, run with onnxruntime (the reference runtime)"),
    Plugin("coreml", "onnxbridge.backends.coreml", requires=("coremltools",), extra="coreml",
           description="Core ML .mlpackage (ML program) via our ONNX -> MIL lowering; checked on the host"),
])


def for_file(path) -> str | None:
    """The backend whose artifacts end like ``path`` (for inspect/validate), or None."""
    import importlib
    from pathlib import Path

    name = Path(path).name.lower()
    for backend in BACKENDS.names():
        module = importlib.import_module(BACKENDS.plugin(backend).module)
        if name.endswith(tuple(module.SUFFIXES)):
            return backend
    return None
