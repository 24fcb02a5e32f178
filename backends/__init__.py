"""Backends: targets a converted ONNX model is turned into, imported only when used.

A backend module defines:

- ``SUFFIXES``: how its artifacts end (``inspect`` and ``validate`` pick the backend by suffix);
- ``inspect(path) -> dict``: what the artifact holds, read without running it;
- ``runner(path, *, onnx_path=None) -> callable(feeds) -> outputs``: runs a saved artifact on this host, or raises
  ``HopSkipped`` saying why it cannot (no GPU, no simulator): that hop is reported as skipped, never passed.

A backend other than onnx also defines:

- ``OPTIONS``: the build options it takes beyond ``target``/``precision`` (the spine refuses the others);
- ``build(onnx_path, output, *, target, precision, context, **options) -> dict``: writes ``output`` atomically and
  returns facts for the report; ``"warnings"`` and ``"notes"`` lists are moved to the report's, and a ``"runner"``
  (popped before the report) runs what was just built for the backend hop when ``runner(output)`` could not (e.g.
  the prepared model behind a DLC), or is the ``HopSkipped`` saying why that hop cannot run here. ``context`` is a ``BuildContext``;
- ``check(model, context) -> list[str]``: every blocker, without building (``onnxbridge check --targets``).

Whether one is usable is the registry's business (``BACKENDS.status``, from package metadata).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from onnxbridge.registry import Plugin, Registry

BACKENDS = Registry("backend", [
    Plugin("onnx", "onnxbridge.backends.onnx_target", requires=("onnx", "onnxruntime"),
           description="ONNX file, run with onnxruntime (the reference runtime)"),
    Plugin("coreml", "onnxbridge.backends.coreml", requires=("coremltools",), extra="coreml",
           description="Core ML .mlpackage (ML program) via our ONNX -> MIL lowering; checked on the host"),
    Plugin("dlc", "onnxbridge.backends.dlc", requires=("onnxruntime-qnn",), extra="qnn",
           toolchain="onnxbridge.backends.dlc.sdk:find",
           description="Qualcomm SNPE/QAIRT .dlc: the QAIRT SDK's tools when installed, else onnxruntime-qnn's "
                       "QnnIr serializer; checked on the HTP simulator"),
    Plugin("tensorrt", "onnxbridge.backends.tensorrt", any_of=("tensorrt-rtx-cu12", "tensorrt"), extra="tensorrt",
           description="TensorRT / TensorRT-RTX .engine with optimization profiles; run where a CUDA GPU is"),
])


@dataclass
class BuildContext:
    """What the spine knows that a backend build may need besides its own options.

    ``sample_shapes``: the shapes of the validation sample, by input name (TensorRT's default opt/max);
    ``dynamic``: the axes asked to be dynamic, with ``min``/``max`` when given; ``input_shapes``: shapes the user
    fixed with ``--input-shape`` (a DLC needs static shapes); ``calibration``: name -> array batches for int8;
    ``workdir``: scratch space that lives until validation is over; ``progress``: a ``Progress``.
    """

    target: str | None = None
    sample_shapes: dict[str, tuple] = field(default_factory=dict)
    dynamic: list = field(default_factory=list)
    input_shapes: dict[str, tuple] = field(default_factory=dict)
    calibration: dict | None = None
    workdir: Path | None = None
    progress: object | None = None


def for_file(path) -> str | None:
    """The backend whose artifacts end like ``path`` (for inspect/validate), or None."""
    name = Path(path).name.lower()
    for backend in BACKENDS.names():
        if name.endswith(tuple(module_of(backend).SUFFIXES)):
            return backend
    return None


def module_of(backend: str):
    """The backend's module, imported even when its toolchain is missing (module imports are light; ``inspect`` of
    a DLC needs none, and the others raise ``UnavailableError`` themselves)."""
    import importlib

    return importlib.import_module(BACKENDS.plugin(backend).module)
