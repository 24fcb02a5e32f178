"""Core ML backend: ONNX -> MIL (our own lowering table) -> ``.mlpackage`` with coremltools, validated on the
host by evaluating the saved MIL program with numpy (Core ML itself runs only on macOS)."""
from __future__ import annotations

from pathlib import Path

from onnxbridge.hints import REPLACE_OP
from onnxbridge.options import ALLOW_APPROX
from onnxbridge.registry import Plugin

PLUGIN = Plugin("coreml", "onnxbridge.backends.coreml", requires=("coremltools",), extra="coreml", priority=10,
                description="Core ML .mlpackage (ML program) via our ONNX -> MIL lowering; checked on the host",
                options=(ALLOW_APPROX,), node_kind="MIL op",
                hints=((r"rank (\d+); Core ML allows rank <= 5|rank-?[6-9]",
                        "Core ML tensors have rank <= 5: reshape in the source so no intermediate tensor has more "
                        "dims"),
                       (r"is UINT(32|64)",
                        "Core ML inputs are float or int32: give the model int32 (or float) inputs in the source"),
                       (r"has no Core ML equivalent|is not lowered|only .* are lowered",
                        "this form of the op has no equivalent on this backend: use the form the message names, or "
                        "the op's default attributes, in the source"),
                       (r"no Core ML lowering", REPLACE_OP)))

NAME = "coreml"
SUFFIXES = (".mlpackage",)
# what ``--precision`` really applies (precision.APPLIED): fp32 and fp16 compute with weights of that type; int8 stores
# weights as int8 (per output channel, symmetric; dequantized at load by constexpr ops, so iOS16+) and computes in fp16
PRECISIONS = ("fp32", "fp16", "int8")
TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18")  # MIL opset versions; builds default to iOS16
MAX_OPSET = None


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None,
          allow_approx=()):
    from onnxbridge.backends.coreml.ctimport import import_ct
    from onnxbridge.backends.coreml.package import build as build_package
    from onnxbridge.legalize.approx import approximated_file
    from onnxbridge.plugins import BuildContext

    import_ct()
    context = context or BuildContext()
    with approximated_file(onnx_path, allow_approx) as (path, notes):
        built = build_package(path, output, target=target or "iOS16", precision=precision,
                              dynamic=context.dynamic or (),
                              sample_shapes=context.sample_shapes or {},
                              input_shapes=context.input_shapes or {})
    built.notes = notes + built.notes
    return built


def check(onnx_path: Path, context=None) -> list[str]:
    """Everything a build for ``context.target`` (default iOS16, as ``build``) would refuse, without converting: ops
    with no lowering, unsupported attributes, rank > 5 (after the Core ML legalization rules), ops newer than the
    target (naming the one that works), unsupported input dtypes. Each names node, op and reason."""
    from onnxbridge.backends.coreml.ctimport import import_ct
    from onnxbridge.backends.coreml.legalize import legalize
    from onnxbridge.backends.coreml.onnx_file import read_onnx
    from onnxbridge.backends.coreml.program import check as check_model
    from onnxbridge.plugins import BuildContext

    import_ct()
    context = context or BuildContext()
    target = context.target or "iOS16"
    input_shapes = context.input_shapes or {}
    model, _ = legalize(read_onnx(Path(onnx_path)), input_shapes)
    return check_model(model, target, input_shapes=input_shapes)


def runner(path: Path, *, onnx_path: Path | None = None):
    """Core ML's own ``predict`` on macOS; elsewhere (Core ML runs only there) our numpy evaluation of the saved MIL
    program. ``ONNXBRIDGE_COREML_HOST=1`` forces the host evaluator on macOS too."""
    import os
    import platform

    from onnxbridge.backends.coreml.ctimport import import_ct
    from onnxbridge.backends.coreml.runners import PredictRunner, Runner

    import_ct()
    if platform.system() == "Darwin" and os.environ.get("ONNXBRIDGE_COREML_HOST") != "1":
        return PredictRunner(path)
    return Runner(path)


def inspect(path: str | Path) -> dict:
    """Inputs, outputs (flexible dims as ``shape_range``), spec version, MIL ops and ``weights`` (rows of
    dtype, tensors, elements: int8 ones are quantized; see ``precision.weight_table``) of a saved package, read
    without loading it into Core ML."""
    from onnxbridge.backends.coreml.ctimport import import_ct
    from onnxbridge.backends.coreml.precision import weight_table
    from onnxbridge.backends.coreml.runners import Runner

    import_ct()
    runner = Runner(Path(path))
    ops: dict[str, int] = {}
    for op in runner.function.operations:
        ops[op.op_type] = ops.get(op.op_type, 0) + 1
    return {"path": str(path), "format": "coreml", "spec_version": runner.spec_version,
            "inputs": [_feature(d, runner.function.inputs.get(d.name)) for d in runner.description.input],
            "outputs": [_feature(d, next((v for v in runner.function.outputs if v.name == d.name), None))
                        for d in runner.description.output], "ops": ops,
            "weights": weight_table(runner.function)}


def _feature(desc, var) -> dict:
    """A model input/output from its spec description (the MIL var's shape when the spec records none)."""
    from coremltools.proto import FeatureTypes_pb2

    array = desc.type.multiArrayType
    shape = [int(d) for d in array.shape] or ([d if isinstance(d, int) else None for d in var.shape]
                                              if var is not None else [])  # None: a flexible dim
    entry = {"name": desc.name, "shape": shape,
             "dtype": FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(array.dataType).lower()}
    ranges = [[int(r.lowerBound), int(r.upperBound)] for r in array.shapeRange.sizeRanges]
    if any(lo != hi for lo, hi in ranges):
        entry["shape_range"] = ranges
    return entry


def rewrites(onnx_path: Path, context=None) -> list[str]:
    """The Core ML legalization rules a build would apply, as ``"RULE (node NAME)"``."""
    from onnxbridge.backends.coreml.ctimport import import_ct
    from onnxbridge.backends.coreml.legalize import legalize
    from onnxbridge.backends.coreml.onnx_file import read_onnx
    from onnxbridge.plugins import BuildContext

    import_ct()
    context = context or BuildContext()
    return legalize(read_onnx(Path(onnx_path)), context.input_shapes or {})[1]


# the hop's candidate side for localization (``probe(artifact, onnx_path, checkpoints) -> Sides``). Imported here, not
# in a function: importing the submodule ``probe`` later would replace a function of that name on this package
from onnxbridge.backends.coreml.probe import probe  # noqa: E402
