"""OpenVINO backend: ONNX -> ``openvino.convert_model`` -> IR (``model.xml`` + ``model.bin``), fp32, with fp16
weights (``compress_to_fp16``) or int8 (NNCF post-training quantization on ``--calibration``); dynamic ONNX axes
stay dynamic (``?``) in the IR. The hop runs the saved IR on OpenVINO's CPU plugin with the inference precision
hint set to f32, so that a CPU with bf16 units does not silently compute an fp32 model in bf16; since an IR cannot
carry that hint, it also runs the IR compiled with no config and reports how far a default compile's numbers are.

Module imports stay light: ``openvino`` is imported only to build, check, run or inspect.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from onnxbridge.options import CALIBRATION
from onnxbridge.registry import Plugin

PLUGIN = Plugin("openvino", "onnxbridge.backends.openvino", requires=("openvino",), extra="openvino", priority=40,
                description="OpenVINO IR (.xml + .bin) via openvino.convert_model; run on OpenVINO's CPU plugin",
                options=(CALIBRATION,),  # --calibration reaches build() loaded, as context.calibration
                node_kind="ONNX node")

NAME = "openvino"
SUFFIXES = (".xml",)
TARGETS = ()  # an IR is compiled for a device when loaded
MAX_OPSET = None
PRECISIONS = ("fp32", "fp16", "int8")  # int8: NNCF post-training quantization on the calibration batches


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32",
          context=None):
    """Write ``output`` (.xml) and its weights (.bin beside it) atomically; what the IR holds (a ``BuildResult``)."""
    from onnxbridge.backends.openvino.convert import build as build_ir
    from onnxbridge.plugins import BuildContext

    context = context or BuildContext()
    return build_ir(Path(onnx_path), Path(output), target=target, precision=precision,
                    calibration=context.calibration)


def companions(output: Path) -> list[Path]:
    """The weights file written beside ``output``: removed with it when a run fails, counted in its size."""
    return [Path(output).with_suffix(".bin")]


def check(onnx_path: Path, context=None) -> list[str]:
    """Every op OpenVINO's ONNX frontend cannot convert, naming its nodes, found by converting in memory."""
    from onnxbridge.backends.openvino.convert import blockers

    return blockers(Path(onnx_path))


def runner(path: Path, *, onnx_path: Path | None = None) -> Callable[[Mapping], list]:
    """Runs the IR on OpenVINO's CPU plugin (inference precision f32); ``HopSkipped`` where it cannot."""
    from onnxbridge.backends.openvino.run import Runner

    return Runner(Path(path))


def inspect(path: str | Path) -> dict:
    """The OpenVINO version that wrote the IR, what onnxbridge built it as, I/O with partial shapes, op histogram."""
    from onnxbridge.backends.openvino.ir import inspect as inspect_ir

    return inspect_ir(Path(path))


# the hop's candidate side for localization (``probe(artifact, onnx_path, checkpoints) -> Sides``). Imported here, not
# in a function: importing the submodule ``probe`` later would replace a function of that name on this package
from onnxbridge.backends.openvino.probe import probe  # noqa: E402
