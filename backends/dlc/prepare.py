"""The ONNX model a DLC is made from: static input shapes, constants folded, default opset 7 to 22, legalized by
the QNN rules (folded again where a rule leaves constants to fold), and only ops onnxruntime's QNN execution
provider can take."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    import onnx

MAX_OPSET = 22  # the newest ONNX opset QAIRT's converters take ("supports upto ONNX Opset 22")
MIN_OPSET = 7  # onnxruntime-qnn takes no node of a model below it (a bool Not at opset 1 or 6, measured)
# QNN tensors have uint32 dims and sizes: past them onnxruntime-qnn aborts the process
MAX_ELEMENTS = 2**32 - 1
MAX_REFOLDS = 3  # rounds of legalizing and folding again (one is enough for the node suite's inlined functions)
# ONNX ops with an op builder in onnxruntime's QNN execution provider (onnxruntime/core/providers/qnn/builder/
# op_builder_factory.cc); whether one node is taken also depends on its attributes and dtypes, which the
# partition check after the dump catches.
QNN_OPS = frozenset({
    "Abs", "Add", "And", "ArgMax", "ArgMin", "Asin", "Atan", "AveragePool", "BatchNormalization", "Cast", "Ceil",
    "Clip", "Concat", "Conv", "ConvTranspose", "Cos", "CumSum", "DepthToSpace", "DequantizeLinear", "Div", "Einsum",
    "Elu", "Equal", "Exp", "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm",
    "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample", "HardSigmoid", "HardSwish",
    "InstanceNormalization", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax",
    "LpNormalization", "LRN", "LSTM", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mod", "Mul", "Neg", "Not", "Or",
    "Pad", "Pow", "PRelu", "QuantizeLinear", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin",
    "ReduceProd", "ReduceSum", "Relu", "Reshape", "Resize", "RMSNormalization", "Round", "ScatterElements",
    "ScatterND", "Sigmoid", "Sign", "Sin", "Slice", "Softmax", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub",
    "Sum", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Unsqueeze", "Upsample", "Where",
})
# ops of other domains the QNN EP takes (com.microsoft::Gelu: what the exact-GELU legalization rule emits)
QNN_CUSTOM_OPS = frozenset({("com.microsoft", "FusedMatMul"), ("com.microsoft", "Gelu")})
# ops that constant folding or onnxruntime's basic graph optimizations remove when their inputs are known
FOLDED_AWAY = frozenset({"Constant", "Identity", "Dropout", "Shape", "Size", "ConstantOfShape", "Range"})


@dataclass
class Prepared:
    """The prepared model (``path``) and what preparing it did."""

    path: Path
    opset: int
    input_shapes: dict[str, list[int]]
    fixed: dict[str, list[int]] = field(default_factory=dict)  # inputs whose dims --input-shape fixed
    notes: list[str] = field(default_factory=list)


def input_dims(value) -> list:
    t = value.type.tensor_type
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]


def graph_inputs(model: "onnx.ModelProto") -> list:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def shape_blockers(model: "onnx.ModelProto", input_shapes: dict) -> list[str]:
    """Inputs whose shapes stay dynamic, or that ``input_shapes`` names wrongly."""
    inputs = {i.name: input_dims(i) for i in graph_inputs(model)}
    out = [f"--input-shape names '{n}', which is not an input (inputs: {', '.join(inputs)})"
           for n in input_shapes if n not in inputs]
    for name, dims in inputs.items():
        given = input_shapes.get(name)
        if given is not None:
            if len(given) != len(dims):
                out.append(f"--input-shape {name} has {len(given)} dims, the input has {len(dims)}")
            elif any(not isinstance(g, int) or g < 0 for g in given):
                out.append(f"--input-shape {name}:{','.join(map(str, given))} is not static (non-negative ints)")
            else:
                clash = [i for i, (d, g) in enumerate(zip(dims, given)) if isinstance(d, int) and d > 0 and d != g]
                if clash:
                    out.append(f"--input-shape {name}:{','.join(map(str, given))} differs from the model's fixed "
                               f"dims {dims} at axis {clash[0]}")
                out += _too_big(f"input '{name}'", given)
        elif any(not isinstance(d, int) or d < 0 for d in dims):
            example = ",".join(str(d) if isinstance(d, int) and d > 0 else "N" for d in dims)
            out.append(f"input '{name}' has dynamic dims {dims}: a DLC needs static shapes "
                       f"(give --input-shape {name}:{example})")
        else:
            out += _too_big(f"input '{name}'", dims)
    return out


def _too_big(what: str, dims: list[int]) -> list[str]:
    """A blocker when a tensor of static ``dims`` holds more elements than QNN can address."""
    if math.prod(dims) <= MAX_ELEMENTS:
        return []
    return [f"{what} {dims} holds more than {MAX_ELEMENTS} elements: QNN tensors cannot"]


def size_blockers(model: "onnx.ModelProto") -> list[str]:
    """Tensors of the (folded) model whose static shapes, as ONNX shape inference finds them, QNN cannot hold."""
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - the shapes the model declares are checked still
        pass
    g = model.graph
    shapes = {v.name: input_dims(v) for v in [*g.input, *g.value_info, *g.output]}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    return [b for name, dims in shapes.items() if all(isinstance(d, int) and d > 0 for d in dims)
            for b in _too_big(f"tensor '{name}'", dims)]


def dtype_blockers(model: "onnx.ModelProto") -> list[str]:
    """Tensors whose element type ONNX does not define (onnx's own helpers, and QNN, fail on them)."""
    from onnx import TensorProto

    from onnxbridge.modelwalk import iter_tensors

    g = model.graph
    typed = [(v.name, v.type.tensor_type.elem_type) for v in [*g.input, *g.output, *g.value_info]
             if v.type.HasField("tensor_type")] + [(t.name, t.data_type) for t in iter_tensors(model)]
    known = set(TensorProto.DataType.values())
    return [f"tensor '{name}' has element type {t}, which ONNX does not define" for name, t in typed
            if t not in known]


def op_blockers(model: "onnx.ModelProto", *, folded: bool) -> list[str]:
    """Nodes whose op onnxruntime's QNN EP has no builder for (before folding, ops folding removes are let be)."""
    out = []
    for i, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            if (node.domain, node.op_type) not in QNN_CUSTOM_OPS:
                out.append(f"node '{node.name or f'#{i}'}' ({node.domain}::{node.op_type}) is a custom op the QNN "
                           "execution provider cannot take")
        elif node.op_type not in QNN_OPS and (folded or node.op_type not in FOLDED_AWAY):
            out.append(f"node '{node.name or f'#{i}'}' ({node.op_type}) has no QNN op: the QNN execution provider "
                       "cannot take it")
        elif _crashes_qnn(node):
            out.append(f"node '{node.name or f'#{i}'}' ({node.op_type}) pads one side more than the other without "
                       "counting the padding (count_include_pad=0): onnxruntime-qnn's HTP crashes on it")
    return out


def _crashes_qnn(node: "onnx.NodeProto") -> bool:
    """An AveragePool onnxruntime-qnn 2.7's HTP simulator crashes on (SIGSEGV, measured): asymmetric padding
    (explicit, or auto_pad SAME_*) with count_include_pad=0."""
    if node.op_type != "AveragePool":
        return False
    attrs = {a.name: a for a in node.attribute}
    if "count_include_pad" in attrs and attrs["count_include_pad"].i:
        return False
    if "auto_pad" in attrs and attrs["auto_pad"].s in (b"SAME_UPPER", b"SAME_LOWER"):
        return True
    pads = list(attrs["pads"].ints) if "pads" in attrs else []
    return pads[:len(pads) // 2] != pads[len(pads) // 2:]


def target_opset(have: int) -> int:
    """The default opset a model at ``have`` is prepared at: ``have`` moved into [MIN_OPSET, MAX_OPSET]."""
    return min(max(have, MIN_OPSET), MAX_OPSET)


def opset_blockers(model: "onnx.ModelProto") -> list[str]:
    from onnxbridge.adapters import check, default_opset

    have = default_opset(model)
    want = target_opset(have)
    if have == want:
        return []
    return [f"opset {have} -> {want}: {b}" for b in check(model, want)]


def _fix_shapes(model: "onnx.ModelProto", input_shapes: dict) -> dict[str, list[int]]:
    fixed = {}
    for value in graph_inputs(model):
        given = input_shapes.get(value.name)
        if given is None:
            continue
        if [int(g) for g in given] != input_dims(value):
            fixed[value.name] = [int(g) for g in given]
        for dim, size in zip(value.type.tensor_type.shape.dim, given):
            dim.Clear()
            dim.dim_value = int(size)
    if fixed:  # value_info may still name the old symbols; shape inference redoes it from the inputs
        del model.graph.value_info[:]
        for out in model.graph.output:
            if out.type.tensor_type.HasField("shape"):
                out.type.tensor_type.ClearField("shape")
    return fixed


def empty(dims: list) -> bool:
    """Whether an input of ``dims`` holds no element (a zero dim): its value is known, and QNN has no such tensor."""
    return 0 in dims


def _empty_inputs_to_constants(model: "onnx.ModelProto") -> list[str]:
    """Make every input holding no element an empty initializer of its type; their names."""
    import numpy as np
    from onnx import helper, numpy_helper

    names = []
    for value in graph_inputs(model):
        dims = input_dims(value)
        if empty(dims):
            dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
            model.graph.initializer.append(numpy_helper.from_array(np.zeros(dims, dtype), value.name))
            names.append(value.name)
    kept = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return names


def _fold(src: Path, dest: Path) -> None:
    """Constant folding (``runtime.fold_constants``), a model onnxruntime cannot load being bad input here."""
    from onnxbridge.runtime import fold_constants

    try:
        fold_constants(src, dest)
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise BadInputError(f"onnxruntime cannot load the model at the static shapes: {text}") from None


def legalize(model: "onnx.ModelProto") -> tuple["onnx.ModelProto", list[str]]:
    """``model`` with the QNN execution provider's legalization rules applied, and which fired on which node."""
    from onnxbridge.backends.dlc.legalize.rules import QNN_RULES
    from onnxbridge.legalize import apply

    return apply(model, QNN_RULES)


def _legalize_and_refold(model: "onnx.ModelProto", folder: Path) -> tuple["onnx.ModelProto", list[str]]:
    """``legalize``; after rules whose constants folding takes further (``REFOLD``: a static Shape is a constant,
    so the shape arithmetic behind it folds away), fold again and legalize again, up to ``MAX_REFOLDS`` times."""
    import onnx

    from onnxbridge.backends.dlc.legalize.rules import REFOLD
    from onnxbridge.builder import name_nodes

    done: list[str] = []
    for _ in range(MAX_REFOLDS):
        model, fired = legalize(model)
        done += fired
        if not any(f.split(" ", 1)[0] in REFOLD for f in fired):
            break
        onnx.save(model, folder / "legalized.onnx")
        _fold(folder / "legalized.onnx", folder / "refolded.onnx")
        model = onnx.load(folder / "refolded.onnx")
        name_nodes(model.graph)
    return model, done


def prepare(onnx_path: Path, folder: Path, input_shapes: dict, *, check_ops: bool = True) -> Prepared:
    """Write the prepared model into ``folder``; raise with every blocker named when it cannot be
    (``check_ops``: legalize for the QNN execution provider, then refuse ops it has no builder for)."""
    import onnx

    from onnxbridge.adapters import adapt, default_opset
    from onnxbridge.builder import name_nodes, set_ir_version
    from onnxbridge.onnxio import load_onnx

    model = load_onnx(onnx_path, load_external_data=True)
    problems = dtype_blockers(model) + shape_blockers(model, input_shapes)
    if problems:
        raise BadInputError("; ".join(problems))
    notes = []
    fixed = _fix_shapes(model, input_shapes)
    if fixed:
        notes.append("input shapes fixed: " + ", ".join(f"{k}={v}" for k, v in fixed.items()))
    emptied = _empty_inputs_to_constants(model)
    if emptied:
        notes.append(f"input(s) {', '.join(emptied)} hold no element: made empty constants (QNN has no zero-size "
                     "tensors, and their value is known)")
    have = default_opset(model)
    if have != target_opset(have):
        model = adapt(model, target_opset(have))  # raises UnsupportedError naming the first blocker
        notes.append(f"opset {have} adapted to {target_opset(have)} (QAIRT takes up to opset {MAX_OPSET}, the QNN "
                     f"execution provider no node below opset {MIN_OPSET})")
    name_nodes(model.graph)
    set_ir_version(model)
    folder.mkdir(parents=True, exist_ok=True)
    static = folder / "static.onnx"
    onnx.save(model, static)
    prepared = folder / "prepared.onnx"
    _fold(static, prepared)
    model = onnx.load(prepared)
    name_nodes(model.graph)
    if check_ops:
        model, fired = _legalize_and_refold(model, folder)
        if fired:
            notes.append("legalized for the QNN execution provider: " + ", ".join(fired))
    blocked = size_blockers(model) + (op_blockers(model, folded=True) if check_ops else [])
    if blocked:
        raise UnsupportedError("; ".join(blocked), hint="replace those ops, or cut the graph before them")
    onnx.save(model, prepared)
    shapes = {i.name: input_dims(i) for i in graph_inputs(model)}
    return Prepared(prepared, default_opset(model), shapes, fixed, notes)
