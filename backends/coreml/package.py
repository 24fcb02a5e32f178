"""ONNX -> ``.mlpackage``: legalize, build the MIL program, let coremltools convert it (its graph passes, int8
weight quantization) and place the package atomically; the facts for the report."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.atomic import placing
from onnxbridge.backends.coreml.ctimport import import_ct
from onnxbridge.backends.coreml.legalize import legalize
from onnxbridge.backends.coreml.lower import TARGETS, _mil_name
from onnxbridge.backends.coreml.onnx_file import read_onnx
from onnxbridge.backends.coreml.precision import (APPLIED, INT8_WEIGHT_THRESHOLD, applied_precision, check_precision,
                                                  pass_pipeline)
from onnxbridge.backends.coreml.program import program, rejection
from onnxbridge.errors import BadInputError, UnsupportedError
from onnxbridge.plugins import BuildResult, native_writes

if TYPE_CHECKING:
    import onnx


def build(onnx_path: Path, output: Path, *, target: str = "iOS16", precision: str = "fp32", dynamic=(),
          sample_shapes: dict | None = None, input_shapes: dict | None = None) -> BuildResult:
    """Convert, save ``output`` (.mlpackage) atomically, and return what was built. ``dynamic``: the
    ``DynamicAxis`` list (ranges for flexible dims); ``sample_shapes``: their default sizes. ``precision``: see
    ``APPLIED``; the result says what the saved program holds (``compute_precision``, ``BuildResult.precision``),
    not what was asked."""
    ct = import_ct()
    if target not in TARGETS:
        raise BadInputError(f"unknown Core ML target '{target}'; known: {', '.join(TARGETS)}")
    check_precision(precision, target)
    compute_name, _ = APPLIED[precision]
    model, fired = legalize(read_onnx(Path(onnx_path)), input_shapes)
    notes = ["legalized for Core ML: " + ", ".join(fired)] if fired else []
    scalar_outputs: list[str] = []
    prog = program(model, target, dynamic, sample_shapes, notes, input_shapes, fp16=compute_name == "fp16",
                   scalar_outputs=scalar_outputs)
    compute = ct.precision.FLOAT16 if compute_name == "fp16" else ct.precision.FLOAT32
    from onnxbridge.quiet import native_output_silenced, quiet

    caught: list[str] = []
    with _temporaries() as temp:
        try:
            with native_writes(temp, f"scratch files in '{temp.parent}'", hint=SCRATCH_HINT), \
                    quiet(caught, ("coremltools",)), native_output_silenced(), \
                    contextlib.redirect_stderr(io.StringIO()), _validated_once(prog):  # its progress bars: stderr
                mlmodel = ct.convert(prog, source="milinternal", convert_to="mlprogram", compute_precision=compute,
                                     minimum_deployment_target=getattr(ct.target, target), skip_model_load=True,
                                     pass_pipeline=pass_pipeline(ct, precision))
        except BadInputError:
            raise
        except Exception as exc:  # e.g. a check that fires only in coremltools' passes
            reason = rejection(exc, target)
            raise UnsupportedError(reason if "needs --target" in reason else "coremltools rejects the lowered "
                                   f"program: {' '.join(str(exc).split())[:300]}") from None
        return _save(mlmodel, model, output, scalar_outputs, notes, caught, target, precision, compute_name)


SCRATCH_HINT = "free space there, or point TMPDIR at a folder with more room"


@contextlib.contextmanager
def _temporaries():
    """A scratch folder (``scratch.workdir``) that holds every temporary file coremltools writes while it converts
    and saves (its weights, spec and package): removed after, and where a full disk is looked for when its native
    file writer fails."""
    import tempfile

    from onnxbridge.scratch import workdir

    with workdir() as folder:
        saved, tempfile.tempdir = tempfile.tempdir, str(folder)
        try:
            yield folder
        finally:
            tempfile.tempdir = saved


def _save(mlmodel, model: "onnx.ModelProto", output: Path, scalar_outputs: list[str], notes: list[str],
          caught: list[str], target: str, precision: str, compute_name: str) -> BuildResult:
    """Place the package at ``output`` atomically; what was built."""
    _mark_scalar_outputs(mlmodel, scalar_outputs)
    with placing(output) as staged, native_writes(staged.parent, f"'{output}'"):  # not shutil's list of copies
        mlmodel.save(str(staged))
    spec = mlmodel.get_spec()
    names = [v.name for v in [*model.graph.input, *model.graph.output]]
    renamed = {n: _mil_name(n) for n in names if _mil_name(n) != n}  # MIL names are identifiers
    flexible = {}
    for d in spec.description.input:
        ranges = d.type.multiArrayType.shapeRange.sizeRanges
        if any(r.lowerBound != r.upperBound for r in ranges):
            flexible[d.name] = [[r.lowerBound, r.upperBound] for r in ranges]
    main = mlmodel._mil_program.functions["main"]
    applied = applied_precision(main, compute_name)
    if precision == "int8" and not applied["quantized_weights"]:
        caught.append(f"--precision int8: no weight has more than {INT8_WEIGHT_THRESHOLD} elements, so none was "
                      f"quantized; the weights are {applied['weights']}")
    return BuildResult({"target": target, "compute_precision": compute_name, "spec_version": spec.specificationVersion,
                        "renamed": renamed, "flexible_inputs": flexible,
                        "ops": sorted({op.op_type for op in main.operations})},
                       notes=notes, warnings=caught, precision=applied)


# user-defined metadata of a package: the outputs that are rank 0 in ONNX (comma-separated MIL names; Core ML's are
# [1]), so the runners give them back as rank 0
SCALAR_OUTPUTS = "onnxbridge.rank0_outputs"


def _mark_scalar_outputs(mlmodel, names: list[str]) -> None:
    """Record ``names`` (rank 0 in ONNX, [1] in Core ML) in the model's metadata and output descriptions."""
    if names:
        mlmodel.user_defined_metadata[SCALAR_OUTPUTS] = ",".join(names)
    for name in names:
        mlmodel.output_description[name] = "rank 0 (a scalar) in the ONNX model; shape [1] here"


@contextlib.contextmanager
def _validated_once(prog):
    """coremltools validates the whole program after each of its ~100 graph passes, about half of the
    conversion time: validate it once, when the pipeline is done, instead (a broken pass still fails the build)."""
    prog.validate = lambda *args, **kwargs: None  # an instance attribute shadows Program.validate
    try:
        yield
    finally:
        del prog.validate
    type(prog).validate(prog)
