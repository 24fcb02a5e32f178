"""ONNX -> MIL program -> ``.mlpackage`` (written atomically), and the host-side runner for validation."""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import numpy as np

from onnxbridge.backends.coreml.ctimport import import_ct
from onnxbridge.backends.coreml.lower import OPS, Ctx, _mil_name
from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    import onnx

TARGETS = ("iOS15", "iOS16", "iOS17", "iOS18")
# ops lowered only when their values are known before run time (folded); otherwise refused when reached
FOLDED_ONLY = ("Constant", "Shape", "ConstantOfShape", "Range", "Mod", "Equal", "Where", "Expand", "Size",
               "NonZero")


def blockers(model: "onnx.ModelProto") -> list[str]:
    """Every node the lowering table has no entry for (empty: all can be tried)."""
    return [f"node '{n.name}' ({n.op_type}): no Core ML lowering" for n in model.graph.node
            if n.op_type not in OPS and n.op_type not in FOLDED_ONLY]


def fold(node: "onnx.NodeProto", values: dict, opset: int) -> list[np.ndarray] | None:
    """The node's outputs when they are known before run time: a Constant, a Shape of a static shape, or any
    op whose inputs are all constants (evaluated with onnx's reference evaluator), else None."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    if node.op_type == "Constant":
        return [numpy_helper.to_array(node.attribute[0].t)]
    inputs = [values.get(name) for name in node.input if name]
    if node.op_type == "Shape" and inputs and not isinstance(inputs[0], np.ndarray):
        shape = list(inputs[0].shape)
        if not all(isinstance(d, int) for d in shape):
            return None
        return [np.array(shape, np.int64)[_shape_slice(node, len(shape))]]
    if not inputs or not all(isinstance(v, np.ndarray) for v in inputs) or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    names = [n for n in node.input if n]
    graph = onnx.helper.make_graph([node], "fold", [onnx.helper.make_tensor_value_info(
        n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in zip(names, inputs)],
        [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        return list(ReferenceEvaluator(model).run(None, dict(zip(names, inputs))))
    except Exception:  # leave it to the lowering, which says why it cannot
        return None


def _shape_slice(node: "onnx.NodeProto", rank: int) -> slice:
    attrs = {a.name: a.i for a in node.attribute}
    return slice(attrs.get("start", 0), attrs.get("end", rank))


def program(model: "onnx.ModelProto", target: str):
    """The MIL program of ``model`` (static input shapes, float inputs)."""
    import onnx
    from onnx import numpy_helper

    from onnxbridge.adapters import default_opset

    ct = import_ct()
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program, types

    problems = blockers(model)
    if problems:
        raise UnsupportedError(f"{len(problems)} node(s) cannot be lowered to Core ML; first: {problems[0]}")
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    specs = {}
    for vi in g.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if any(d is None or d <= 0 for d in dims):
            raise UnsupportedError(f"input '{vi.name}' has a symbolic shape {dims}; Core ML flexible shapes are not "
                                   "built yet: convert without --dynamic (or fix it with --input-shape)")
        if tt.elem_type != onnx.TensorProto.FLOAT:
            raise UnsupportedError(f"input '{vi.name}' is {onnx.TensorProto.DataType.Name(tt.elem_type)}; only float "
                                   "inputs are lowered so far")
        specs[_mil_name(vi.name)] = mb.TensorSpec(shape=tuple(dims), dtype=types.fp32)
    with Function(specs, opset_version=getattr(ct.target, target)) as func:
        ctx = Ctx(mb, default_opset(model))
        ctx.values.update(inits)
        ctx.values.update({vi.name: func.inputs[_mil_name(vi.name)] for vi in g.input if vi.name not in inits})
        for node in g.node:
            ctx.node = node
            folded = fold(node, ctx.values, ctx.opset)
            if folded is not None:
                ctx.values.update(zip(node.output, folded))
                continue
            if node.op_type not in OPS:
                ctx.refuse("its value depends on run-time data and it has no Core ML lowering")
            try:
                ctx.values[node.output[0]] = OPS[node.op_type](ctx)
            except UnsupportedError:
                raise
            except Exception as exc:
                ctx.refuse(f"Core ML rejects the lowering: {' '.join(str(exc).split())[:300]}")
        outputs = []
        for vi in g.output:
            value = ctx.values[vi.name]
            if isinstance(value, np.ndarray):
                raise UnsupportedError(f"output '{vi.name}' is a constant; Core ML programs need computed outputs")
            if value.name != _mil_name(vi.name):
                value = mb.identity(x=value, name=_mil_name(vi.name))
            outputs.append(value)
        func.set_outputs(outputs)
    prog = Program()
    prog.add_function("main", func)
    return prog


def build(onnx_path: Path, output: Path, *, target: str = "iOS16", precision: str = "fp32") -> dict:
    """Convert, save ``output`` (.mlpackage) atomically, and return facts for the report."""
    import onnx

    ct = import_ct()
    if target not in TARGETS:
        raise BadInputError(f"unknown Core ML target '{target}'; known: {', '.join(TARGETS)}")
    model = onnx.load(str(onnx_path))
    prog = program(model, target)
    compute = ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32
    from onnxbridge.quiet import native_output_silenced, quiet

    caught: list[str] = []
    with quiet(caught, ("coremltools",)), native_output_silenced(), \
            contextlib.redirect_stderr(io.StringIO()):  # its progress bars go to stderr
        mlmodel = ct.convert(prog, source="milinternal", convert_to="mlprogram", compute_precision=compute,
                             minimum_deployment_target=getattr(ct.target, target), skip_model_load=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        mlmodel.save(str(staging / output.name))
        if output.exists():
            shutil.rmtree(output)
        os.replace(staging / output.name, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    spec = mlmodel.get_spec()
    names = [v.name for v in [*model.graph.input, *model.graph.output]]
    renamed = {n: _mil_name(n) for n in names if _mil_name(n) != n}  # MIL names are identifiers
    return {"target": target, "compute_precision": precision, "spec_version": spec.specificationVersion,
            "renamed": renamed,
            "ops": sorted({op.op_type for op in mlmodel._mil_program.functions["main"].operations}),
            "warnings": caught}


class Runner:
    """Evaluates the saved package's MIL program with the numpy kernels in ``evaluate``."""

    def __init__(self, path: Path):
        ct = import_ct()
        from coremltools.converters.mil.frontend.milproto.load import load

        mlmodel = ct.models.MLModel(str(path), skip_model_load=True)
        spec = mlmodel.get_spec()
        prog = load(spec, specification_version=spec.specificationVersion, file_weights_dir=mlmodel.weights_dir)
        self.function = prog.functions["main"]
        self.spec_version = spec.specificationVersion
        self.inputs = [d.name for d in spec.description.input]
        self.outputs = [d.name for d in spec.description.output]

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        from onnxbridge.backends.coreml.evaluate import run

        named = {_mil_name(k): np.asarray(v) for k, v in feeds.items()}
        result = run(self.function, {n: named[n] for n in self.inputs})
        return [np.asarray(result[n], np.float32) if np.asarray(result[n]).dtype == np.float16 else result[n]
                for n in self.outputs]
