"""SNPE / QAIRT DLC backend: the QAIRT SDK's converter when installed, else onnxruntime-qnn's QnnIr serializer on
a prepared ONNX model (static shapes, folded, opset <= 22, one QNN partition); checked on the x86 HTP simulator.

Module imports stay light: ``inspect`` reads a DLC with our own ZIP + FlatBuffer reader and needs no Qualcomm
library; ``onnxruntime_qnn`` is imported only to build or run.
"""
from __future__ import annotations

from pathlib import Path

NAME = "dlc"
SUFFIXES = (".dlc",)
OPTIONS = ("calibration", "flavour")  # --calibration reaches build() loaded, as context.calibration


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None,
          flavour: str | None = None) -> dict:
    """Write ``output`` atomically; facts for the report (``runner``: the HTP-simulator check of what was built)."""
    from onnxbridge.backends.dlc.convert import build as build_dlc

    return build_dlc(onnx_path, output, target=target, precision=precision, context=context, flavour=flavour)


def check(onnx_path: Path, context=None) -> list[str]:
    """Every blocker on the way to a DLC, without writing one: dynamic dims, opset, ops, QNN partitions."""
    from onnxbridge.backends.dlc.checks import blockers

    return blockers(Path(onnx_path), dict(getattr(context, "input_shapes", None) or {}))


def runner(path: Path, *, onnx_path: Path | None = None):
    from onnxbridge.backends.dlc.convert import runner as dlc_runner

    return dlc_runner(Path(path), onnx_path=onnx_path)


def inspect(path: str | Path) -> dict:
    """What ``snpe-dlc-info`` prints, in outline: header, converter, I/O, ops, layers, dtypes and our checks."""
    from onnxbridge.backends.dlc.container import read, summary

    return summary(read(path))
