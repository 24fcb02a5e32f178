"""QNN rules for normalizations and reductions the QNN execution provider does not take: LayerNormalization,
BatchNormalization with run-time parameters, ReduceL1/SumSquare/LogSum; and the constant scale of an RMS
normalization put second (the HTP's graph preparation fails on it first)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import (FLOATS, Nodes, base_name, float_attr, float_input, int_attr, is_used,
                                        scalar_equals, single)


def layernorm_condition(graph: Graph, match: Match) -> bool:
    """Float32 x of known rank (stash_type changes nothing then), and Mean or InvStdDev used or a run-time scale or
    bias: the QNN EP takes only the Y output with constant scale and bias."""
    node, x = match.nodes[0], match.inputs["in0"]
    t = graph.types.get(x)
    if graph.elem_type(x) != TensorProto.FLOAT or t is None or not t.HasField("shape") or not t.shape.dim:
        return False
    params = [match.inputs[k] for k in ("in1", "in2") if match.inputs.get(k)]
    return any(is_used(graph, o) for o in node.output[1:]) or any(graph.value(p) is None for p in params)


def layernorm_replacement(graph: Graph, match: Match) -> list:
    """mean = ReduceMean(x), d = x - mean, std = sqrt(ReduceMean(d * d) + eps); Y = d / std * scale + bias,
    Mean = mean, InvStdDev = 1 / std (reduced over the axes from ``axis`` on, dims kept)."""
    node, x = match.nodes[0], match.inputs["in0"]
    rank = len(graph.types[x].shape.dim)
    axis = int_attr(node, "axis", -1) % rank
    outs = [*node.output, "", ""][:3]
    e = Nodes(graph, base_name(match, "layernorm"))
    axes = list(range(axis, rank))
    mean = e.reduce("ReduceMean", x, axes, outs[1] if is_used(graph, outs[1]) else "")
    d = e("Sub", [x, mean])
    var = e.reduce("ReduceMean", e("Mul", [d, d]), axes)
    std = e("Sqrt", [e("Add", [var, e.scalar("epsilon", float_attr(node, "epsilon", 1e-5), x)])])
    if is_used(graph, outs[2]):
        e("Reciprocal", [std], outs[2])
    bias = match.inputs.get("in2", "")
    scaled = e("Mul", [e("Div", [d, std]), match.inputs["in1"]], "" if bias else outs[0])
    if bias:
        e("Add", [scaled, bias], outs[0])
    return e.nodes


def batchnorm_condition(graph: Graph, match: Match) -> bool:
    """Inference (training_mode 0, only Y used) on a float x of static rank >= 2, some parameter not a constant:
    the QNN EP takes BatchNormalization with constant parameters only."""
    node, x = match.nodes[0], match.inputs["in0"]
    t = graph.types.get(x)
    if int_attr(node, "training_mode", 0) or any(is_used(graph, o) for o in node.output[1:]) or \
            graph.elem_type(x) not in FLOATS or t is None or not t.HasField("shape") or len(t.shape.dim) < 2:
        return False
    return len(match.inputs) == 5 and any(graph.value(match.inputs[f"in{i}"]) is None for i in range(1, 5))


def batchnorm_replacement(graph: Graph, match: Match) -> list:
    """(x - mean) / sqrt(var + epsilon) * scale + B, the [C] parameters reshaped to [C, 1, ...] against axis 1."""
    node, x = match.nodes[0], match.inputs["in0"]
    rank = len(graph.types[x].shape.dim)
    e = Nodes(graph, base_name(match, "batchnorm"))
    shape = e.const("param_shape", np.array([-1] + [1] * (rank - 2), np.int64))
    scale, bias, mean, var = (e("Reshape", [match.inputs[f"in{i}"], shape]) for i in range(1, 5))
    std = e("Sqrt", [e("Add", [var, e.scalar("epsilon", float_attr(node, "epsilon", 1e-5), x)])])
    normalized = e("Div", [e("Sub", [x, mean]), std])
    e("Add", [e("Mul", [normalized, scale]), bias], node.output[0])
    return e.nodes


# no ReduceLogSumExp: its overflow-safe form m + log(sum(exp(x - m))) is NaN where the maximum m is infinite
SUM_REDUCTIONS = ("ReduceL1", "ReduceSumSquare", "ReduceLogSum")


def _reduce_axes(graph: Graph, match: Match) -> list[int] | None:
    """The axes a reduction reduces (all for none or empty ones), or None where they are not constant or
    noop_with_empty_axes makes empty ones a copy."""
    node, shape = match.nodes[0], graph.shape(match.inputs["in0"])
    if shape is None:
        return None
    if graph.opset >= 18:
        name = match.inputs.get("in1", "")
        value = graph.value(name) if name else np.zeros(0, np.int64)
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    else:
        axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), [])
    if axes is None or (not axes and int_attr(node, "noop_with_empty_axes", 0)):
        return None
    if any(not -len(shape) <= a < len(shape) for a in axes):
        return None
    return sorted({a % len(shape) for a in axes}) if axes else list(range(len(shape)))


def sum_reduction_pattern(graph: Graph, node) -> Match | None:
    return single(node.op_type)(graph, node) if node.op_type in SUM_REDUCTIONS else None


def sum_reduction_condition(graph: Graph, match: Match) -> bool:
    return float_input(graph, match) and _reduce_axes(graph, match) is not None


def sum_reduction_replacement(graph: Graph, match: Match) -> list:
    """ReduceSum of |x| (L1), x * x (SumSquare), or x (LogSum, then Log)."""
    node, x = match.nodes[0], match.inputs["in0"]
    axes, keep, out = _reduce_axes(graph, match), int_attr(node, "keepdims", 1), node.output[0]
    e = Nodes(graph, base_name(match, node.op_type.lower()))
    inner = {"ReduceL1": lambda: e("Abs", [x]), "ReduceSumSquare": lambda: e("Mul", [x, x])}.get(node.op_type)
    summed = e.reduce("ReduceSum", inner() if inner else x, axes, "" if node.op_type == "ReduceLogSum" else out,
                      keepdims=keep)
    if node.op_type == "ReduceLogSum":
        e("Log", [summed], out)
    return e.nodes


def _rms_normalized(graph: Graph, name: str) -> bool:
    """Whether ``name`` is x * r (either order), r = Reciprocal(Sqrt(m)) or Reciprocal(Sqrt(m + eps)), m a
    ReduceMean of Pow(x, 2): the root-mean-square normalization the HTP fuses."""
    node = graph.produced_by(name, "Mul", single_use=False)
    if node is None:
        return False
    for x, r in (node.input, node.input[::-1]):
        recip = graph.produced_by(r, "Reciprocal", single_use=False)
        sqrt = recip and graph.produced_by(recip.input[0], "Sqrt", single_use=False)
        mean = sqrt and graph.producer.get(sqrt.input[0])
        if mean is not None and mean.op_type == "Add" and len(mean.input) == 2:
            mean = next((graph.producer.get(i) for i in mean.input if graph.value(i) is None), None)
        if mean is None or mean.op_type != "ReduceMean" or mean.domain not in ("", "ai.onnx"):
            continue
        power = graph.produced_by(mean.input[0], "Pow", single_use=False)
        if power is not None and power.input[0] == x and scalar_equals(graph, power.input[1], 2.0):
            return True
    return False


def rms_scale_pattern(graph: Graph, node) -> Match | None:
    """Mul(s, y): a constant scale s first, y an RMS normalization (``_rms_normalized``)."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    s, y = node.input
    if not _rms_normalized(graph, y) or graph.value(s) is None:
        return None
    return Match([node], {"in0": s, "in1": y}, list(node.output))


def rms_scale_condition(graph: Graph, match: Match) -> bool:
    """Always: onnxruntime-qnn 2.7's HTP fails to finalize the graph (QNN_COMMON_ERROR_MEM_ALLOC, measured on
    Llama, Qwen2 and Mistral's RMSNorm, weight * normalized) and takes the same Mul with the scale second."""
    return True


def rms_scale_replacement(graph: Graph, match: Match) -> list:
    """Mul(y, s): the same product (multiplication commutes exactly)."""
    node = match.nodes[0]
    return [helper.make_node("Mul", [match.inputs["in1"], match.inputs["in0"]], list(node.output),
                             name=graph.fresh(base_name(match, "rms_scale")))]


LAYERNORM = Rule("layernorm-to-reductions", single("LayerNormalization"), layernorm_condition, layernorm_replacement)


BATCHNORM = Rule("batchnorm-to-arithmetic", single("BatchNormalization"), batchnorm_condition,
                 batchnorm_replacement)


RMS_SCALE = Rule("rms-scale-operand-second", rms_scale_pattern, rms_scale_condition, rms_scale_replacement)


SUM_REDUCTION = Rule("reduction-to-reducesum", sum_reduction_pattern, sum_reduction_condition,
                     sum_reduction_replacement)
