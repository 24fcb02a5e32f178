"""TensorRT backend: ONNX -> preflight (opset ceiling, constant folding, int64, fp16/int8 in the graph) ->
OnnxParser -> optimization profiles -> serialized engine (``.engine``/``.plan``) plus a sidecar of build facts.

Works with NVIDIA's ``tensorrt`` or ``tensorrt_rtx`` (``flavours``: whichever is installed, or ``--flavour``), with
TensorRT 10 vs 11 told apart by feature detection. TensorRT-RTX builds engines without a GPU; running one needs a
CUDA device, so without one the TensorRT hop is reported as skipped ("no CUDA device"), never passed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from onnxbridge.options import CALIBRATION, Option
from onnxbridge.registry import Plugin

PLUGIN = Plugin("tensorrt", "onnxbridge.backends.tensorrt", any_of=("tensorrt-rtx-cu12", "tensorrt"), extra="tensorrt",
                priority=30,
                description="TensorRT / TensorRT-RTX .engine with optimization profiles; run where a CUDA GPU is",
                node_kind="ONNX node", gpus=1,
                options=(Option("shapes", "Optimization profile of an input, e.g. "
                                          "x:1x3x224x224/8x3x224x224/32x3x224x224 (default: min 1, opt and max from "
                                          "the sample).",
                                multiple=True, metavar="NAME:MIN/OPT/MAX"),
                         Option("workspace", "Workspace limit in MB.", kind="int", metavar="MB"),
                         Option("timing_cache", "Timing cache: loaded if present, saved after the build.", kind="file"),
                         CALIBRATION,
                         Option("flavour", "TensorRT or TensorRT-RTX (default: what is installed).", kind="choice",
                                choices=("tensorrt", "tensorrt-rtx"))))

NAME = "tensorrt"
SUFFIXES = (".engine", ".plan")
PRECISIONS = ("fp32", "fp16", "int8")
TARGETS = ()  # an engine is built for the GPU it runs on
MAX_OPSET = None  # the flavour's parser ceiling; the preflight adapts down to it


def companions(output: Path) -> list[Path]:
    """The JSON sidecar written beside the engine: what built it, its I/O and profiles."""
    from onnxbridge.backends.tensorrt.artifact import sidecar_path

    return [sidecar_path(output)]


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None,
          shapes: list[str] | tuple = (), workspace: int | None = None, timing_cache: str | None = None,
          flavour: str | None = None):
    """Build ``output`` from the ONNX model at ``onnx_path``; what was built (a ``BuildResult``)."""
    from onnxbridge.backends.tensorrt import engine, flavours, preflight
    from onnxbridge.backends.tensorrt.profiles import parse_shapes
    from onnxbridge.errors import BadInputError
    from onnxbridge.plugins import BuildContext
    from onnxbridge.scratch import workdir

    context = context or BuildContext()
    if target is not None:
        raise BadInputError("--target does not apply to --to tensorrt (an engine is built for the GPU it runs on)")
    if precision not in ("fp32", "fp16", "int8"):
        raise BadInputError(f"--precision {precision} is not fp32, fp16 or int8")
    calibration = context.calibration
    if precision == "int8" and not calibration:
        raise BadInputError("--precision int8 for TensorRT needs --calibration DATA (.npz or a folder of .npy, one "
                            "array per input): int8 scales come from calibration batches")
    if calibration and precision != "int8":
        raise BadInputError("--calibration applies to --precision int8 only")
    given = parse_shapes(list(shapes or ()))
    chosen = flavours.load(flavour)
    with workdir("onnxbridge-trt-") as scratch:
        prepared, prep, warnings = preflight.prepare(Path(onnx_path), scratch, chosen, precision, calibration)
        built = engine.build(chosen, prepared, Path(output), precision=precision, profiles_given=given,
                             context=context, workspace=workspace, timing_cache=timing_cache, prep=prep)
    built.warnings = warnings + built.warnings
    return built


def check(onnx_path: Path, context=None) -> list[str]:
    """Every blocker for TensorRT without building: opset ceiling, ops the parser does not support
    (``supports_operator``), then a dry parse naming each rejected node."""
    from onnxbridge.backends.tensorrt.checks import blockers

    return blockers(Path(onnx_path), context)


def runner(path: Path, *, onnx_path: Path | None = None) -> Callable[[Mapping], list]:
    """Runs the engine on a CUDA device; raises ``HopSkipped`` ("no CUDA device", ...) where it cannot."""
    from onnxbridge.backends.tensorrt.run import Runner

    return Runner(Path(path))


def inspect(path: str | Path) -> dict:
    """Flavour and version that built the engine, I/O, profiles; the layer list when the runtime can open it."""
    from onnxbridge.backends.tensorrt.artifact import inspect as inspect_engine

    return inspect_engine(path)


# the hop's candidate side for localization (``probe(artifact, onnx_path, checkpoints) -> Sides``). Imported here, not
# in a function: importing the submodule ``probe`` later would replace a function of that name on this package
from onnxbridge.backends.tensorrt.probe import probe  # noqa: E402
