"""The ONNX target: the artifact is the ONNX model the spine wrote (placed at the output, not converted);
onnxruntime runs it."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from onnxbridge.registry import Plugin

PLUGIN = Plugin("onnx", "onnxbridge.backends.onnx_target", requires=("onnx", "onnxruntime"), priority=0,
                description="ONNX file, run with onnxruntime (the reference runtime)")

NAME = "onnx"
SUFFIXES = (".onnx",)
PRECISIONS = ("fp32", "fp16")
ONNX_PRECISIONS = ("fp16",)  # applied to the ONNX model itself (fp16 weights and compute, fp32 at the edges)
PRECISION_HINTS = {"int8": "quantize the model (e.g. onnxruntime.quantization) and check it with `onnxbridge validate "
                           "--precision int8`, or convert to a backend that quantizes (--to dlc/tensorrt/openvino "
                           "with --calibration)"}
TARGETS = ()
MAX_OPSET = None
# the artifact is the ONNX model the spine writes: written at the output (which must end with .onnx: an ONNX file
# is never written under another format's name), returned in memory when there is no output (Python API); ``build``
# only completes it
ONNX_ARTIFACT = True


def companions(output: Path) -> list[Path]:
    """The external-data file a large model's weights go to (``save_onnx``)."""
    return [Path(f"{output}.data")]


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None):
    """The artifact is the written model: the spine writes it at ``output`` (``ONNX_ARTIFACT``); written elsewhere,
    it is saved there (weights streamed, external data named after ``output``). The graph is the one the first hop
    ran, so ``same_graph``."""
    from onnxbridge.onnxio import load_onnx, save_onnx
    from onnxbridge.plugins import BuildResult

    onnx_path, output = Path(onnx_path), Path(output)
    if onnx_path.resolve() != output.resolve():
        save_onnx(load_onnx(onnx_path), output, base_dir=onnx_path.parent)
    edges = "as exported (fp16: fp32 at the edges, Casts inside)" if precision == "fp16" else "as exported"
    return BuildResult(precision={"weights": precision, "compute": precision, "inputs_outputs": edges},
                       same_graph=True)


def check(onnx_path: Path, context=None) -> list[str]:
    """Nothing blocks ONNX output once the model is written (the opset is the adapters' check, ``--opset``)."""
    return []


def inspect(path: str | Path) -> dict:
    from onnxbridge.inspection import summarize

    return summarize(path)


def runner(path: str | Path, *, onnx_path: str | Path | None = None) -> Callable[[Mapping], list]:
    """An onnxruntime session on the file (fp16 graphs run node by node: see ``runtime.Session``)."""
    from onnxbridge.runtime import Session

    return Session(str(path))
