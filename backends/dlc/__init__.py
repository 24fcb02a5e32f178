"""SNPE / QAIRT DLC backend: the QAIRT SDK's converter when installed, else onnxruntime-qnn's QnnIr serializer on
a prepared ONNX model (static shapes, folded, opset <= 22, one QNN partition). Nothing pip-installable executes a
.dlc on x86: the hop (``qnn-htp-simulator``) runs the prepared model on onnxruntime-qnn's x86 HTP simulator, and the
.dlc is proven by structure to hold exactly that graph (``structure.compare``); an SDK-written DLC's hop is skipped.

Module imports stay light: ``inspect`` reads a DLC with our own ZIP + FlatBuffer reader and needs no Qualcomm
library; ``onnxruntime_qnn`` is imported only to build or run.
"""
from __future__ import annotations

from pathlib import Path

from onnxbridge.hints import REPLACE_OP
from onnxbridge.options import ALLOW_APPROX, CALIBRATION, Option
from onnxbridge.registry import Plugin

PLUGIN = Plugin("dlc", "onnxbridge.backends.dlc", requires=("onnxruntime-qnn",), extra="qnn", priority=20,
                toolchain="onnxbridge.backends.dlc.sdk:find",
                description="Qualcomm SNPE/QAIRT .dlc: the QAIRT SDK's tools when installed, else onnxruntime-qnn's "
                            "QnnIr serializer; checked on the HTP simulator",
                options=(CALIBRATION, Option("flavour", "The QAIRT SDK's tools or onnxruntime-qnn's QnnIr serializer "
                                                        "(default: what is installed).", kind="choice",
                                             choices=("qairt", "qnn-ir")), ALLOW_APPROX),
                node_kind="ONNX node",
                hints=((r"has no QNN op|took no node|cannot take it", REPLACE_OP),
                       (r"partition|fell out to the CPU|not the whole model",
                        "part of the graph would run on the CPU: the nodes named are the ones to replace in the source "
                        "for one QNN graph")))

NAME = "dlc"
SUFFIXES = (".dlc",)
# fp32 and fp16 DLCs (the HTP simulator computes both in fp16); int8: a QDQ model calibrated on --calibration
PRECISIONS = ("fp32", "fp16", "int8")
# the hop's name (its ``to``): what runs is the prepared ONNX on the HTP simulator, never the .dlc; runners carry it
# as ``hop_name``, and a hop that ends before a runner exists (skipped, or failed by the structure check) can use it
HOP_NAME = "qnn-htp-simulator"
TARGETS = ()  # a DLC is built for QNN/SNPE runtimes in general
MAX_OPSET = 22  # onnxruntime-qnn's ceiling: the build adapts down to it
# a DLC has static shapes: --dynamic is refused before any work unless --input-shape fixes that input's size (the
# rule `check --targets dlc` applies); an ONNX source's own dynamic dims are fixed at the sample's, with a note
KEEPS_DYNAMIC = False


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None,
          flavour: str | None = None, allow_approx=()):
    """Write ``output`` atomically; what was built (a ``BuildResult`` whose ``runner`` is a ``RunnerSpec`` of the
    HTP-simulator check of what was built, or ``HopSkipped``). ``allow_approx``: see ``onnxbridge.legalize.approx``."""
    from onnxbridge.backends.dlc.convert import build as build_dlc
    from onnxbridge.legalize.approx import approximated_file

    with approximated_file(onnx_path, allow_approx) as (path, notes):
        built = build_dlc(path, output, target=target, precision=precision, context=context, flavour=flavour)
    built.notes = notes + built.notes
    return built


def check(onnx_path: Path, context=None) -> list[str]:
    """Every blocker on the way to a DLC, without writing one: dynamic dims, opset, ops, QNN partitions. Needs a
    toolchain as a build does: onnxruntime-qnn, or the QAIRT SDK (then the partitions are not checked); without
    either, UnavailableError (exit 3) with the install hint."""
    from onnxbridge.backends.dlc import qnn, sdk
    from onnxbridge.backends.dlc.checks import blockers
    from onnxbridge.plugins import BuildContext

    if sdk.find() is None:
        qnn.qnn_module()
    context = context or BuildContext()
    return blockers(Path(onnx_path), dict(context.input_shapes or {}))


def rewrites(onnx_path: Path, context=None) -> list[str]:
    """The QNN legalization rules a build would apply (at the given input shapes), as ``"RULE (node NAME)"``."""
    from onnxbridge.backends.dlc.prepare import _fix_shapes, legalize
    from onnxbridge.onnxio import load_onnx
    from onnxbridge.plugins import BuildContext

    context = context or BuildContext()
    model = load_onnx(onnx_path)
    _fix_shapes(model, {k: list(v) for k, v in (context.input_shapes or {}).items()})
    return legalize(model)[1]


def runner(path: Path, *, onnx_path: Path | None = None):
    """The HTP-simulator runner of a saved DLC, once the DLC is proven to hold ``onnx_path``'s graph (else
    ``ArtifactMismatch``: the hop fails); ``HopSkipped`` where it cannot be checked or run here."""
    from onnxbridge.backends.dlc.convert import runner as dlc_runner

    return dlc_runner(Path(path), onnx_path=Path(onnx_path) if onnx_path is not None else None)


def inspect(path: str | Path) -> dict:
    """What ``snpe-dlc-info`` prints, in outline: header, converter, I/O, ops, layers, dtypes and our checks."""
    from onnxbridge.backends.dlc.container import read, summary

    return summary(read(path))


# the hop's candidate side for localization (``probe(artifact, onnx_path, checkpoints) -> Sides``). Imported here, not
# in a function: importing the submodule ``probe`` later would replace a function of that name on this package
from onnxbridge.backends.dlc.probe import probe  # noqa: E402
