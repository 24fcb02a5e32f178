"""QNN rules for elementwise ops the QNN execution provider refuses or its HTP computes wrongly: exact GELU, IsNaN,
IsInf (fp16), activations (Selu, Celu, Softsign, Softplus, Mish, Shrink, HardSigmoid x x), Xor, and the hyperbolic
and inverse trigonometric functions by their identities."""
from __future__ import annotations

import math

from onnx import TensorProto, helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import FLOATS, Nodes, base_name, float_attr, float_input, int_attr, other_input, single
from onnxbridge.legalize.gelu import GELU_TYPES, gelu_pattern


def gelu_condition(graph: Graph, match: Match) -> bool:
    """A float type Gelu takes, and a rank of at least 1 (a [1]-shaped constant would broadcast a scalar x)."""
    x = graph.types.get(match.inputs["x"])
    return x is not None and x.elem_type in GELU_TYPES and x.HasField("shape") and len(x.shape.dim) >= 1


def gelu_replacement(graph: Graph, match: Match) -> list:
    """ONNX ``Gelu`` from opset 20, else ``com.microsoft::Gelu`` (the same exact erf GELU; both on the QNN EP)."""
    name = graph.fresh(match.nodes[-1].name or "gelu")
    if graph.opset >= 20:
        return [helper.make_node("Gelu", [match.inputs["x"]], match.outputs, name=name)]
    graph.use_opset("com.microsoft", 1)
    return [helper.make_node("Gelu", [match.inputs["x"]], match.outputs, name=name, domain="com.microsoft")]


def isnan_condition(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["in0"]) in FLOATS


def isnan_replacement(graph: Graph, match: Match) -> list:
    x, base = match.inputs["in0"], match.nodes[0].name or "isnan"
    same = graph.fresh(f"{base}_equal")
    return [helper.make_node("Equal", [x, x], [same], name=same),
            helper.make_node("Not", [same], match.outputs, name=graph.fresh(f"{base}_not"))]


GELU = Rule("gelu-erf-to-gelu", gelu_pattern, gelu_condition, gelu_replacement)


ISNAN = Rule("isnan-to-not-equal", single("IsNaN"), isnan_condition, isnan_replacement)


def selu_replacement(graph: Graph, match: Match) -> list:
    """gamma * Elu(x, alpha)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "selu"))
    elu = e("Elu", [x], alpha=float_attr(node, "alpha", 1.67326319217681884765625))
    e("Mul", [elu, e.scalar("gamma", float_attr(node, "gamma", 1.05070102214813232421875), x)], node.output[0])
    return e.nodes


def celu_replacement(graph: Graph, match: Match) -> list:
    """alpha * Elu(x / alpha)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "celu"))
    alpha = e.scalar("alpha", float_attr(node, "alpha", 1.0), x)
    e("Mul", [e("Elu", [e("Div", [x, alpha])], alpha=1.0), alpha], node.output[0])
    return e.nodes


def softsign_replacement(graph: Graph, match: Match) -> list:
    """x / (1 + |x|)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "softsign"))
    e("Div", [x, e("Add", [e("Abs", [x]), e.scalar("one", 1.0, x)])], node.output[0])
    return e.nodes


def _softplus(e: Nodes, x: str, out: str = "") -> str:
    """max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|."""
    tail = e("Log", [e("Add", [e("Exp", [e("Neg", [e("Abs", [x])])]), e.scalar("one", 1.0, x)])])
    return e("Add", [e("Relu", [x]), tail], out)


def softplus_replacement(graph: Graph, match: Match) -> list:
    e = Nodes(graph, base_name(match, "softplus"))
    _softplus(e, match.inputs["in0"], match.nodes[0].output[0])
    return e.nodes


def mish_replacement(graph: Graph, match: Match) -> list:
    """x * tanh(softplus(x))."""
    x = match.inputs["in0"]
    e = Nodes(graph, base_name(match, "mish"))
    e("Mul", [x, e("Tanh", [_softplus(e, x)])], match.nodes[0].output[0])
    return e.nodes


def shrink_replacement(graph: Graph, match: Match) -> list:
    """Where(x < -lambd, x + bias, Where(x > lambd, x - bias, 0))."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "shrink"))
    lambd, bias = float_attr(node, "lambd", 0.5), e.scalar("bias", float_attr(node, "bias", 0.0), x)
    above = e("Where", [e("Greater", [x, e.scalar("lambd", lambd, x)]), e("Sub", [x, bias]),
                        e.scalar("zero", 0.0, x)])
    e("Where", [e("Less", [x, e.scalar("minus_lambd", -lambd, x)]), e("Add", [x, bias]), above], node.output[0])
    return e.nodes


def hardswish_pattern(graph: Graph, node) -> Match | None:
    """Mul(x, HardSigmoid(x)) in either order, the HardSigmoid used only there (what onnxruntime's folding inlines
    HardSwish into)."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    for name in node.input:
        hs = graph.produced_by(name, "HardSigmoid")
        if hs is not None and other_input(node, name) == hs.input[0]:
            return Match([hs, node], {"x": hs.input[0]}, [node.output[0]])
    return None


def hardswish_condition(graph: Graph, match: Match) -> bool:
    """HardSigmoid's alpha 1/6 and beta 1/2: the product is HardSwish exactly."""
    hs = match.nodes[0]
    return math.isclose(float_attr(hs, "alpha", 0.2), 1 / 6, rel_tol=1e-6) and \
        float_attr(hs, "beta", 0.5) == 0.5 and graph.elem_type(match.inputs["x"]) in FLOATS


def hardswish_replacement(graph: Graph, match: Match) -> list:
    """One HardSwish: onnxruntime-qnn 2.7 computes HardSigmoid(x) * x wrongly on the HTP simulator (errors of 2.5
    on test_hardswish, measured; each op alone is right), while a HardSwish node is right."""
    name = graph.fresh(base_name(match, "hardswish"))
    return [helper.make_node("HardSwish", [match.inputs["x"]], match.outputs, name=name)]


def xor_condition(graph: Graph, match: Match) -> bool:
    return graph.elem_type(match.inputs["in0"]) == TensorProto.BOOL


def xor_replacement(graph: Graph, match: Match) -> list:
    """(a or b) and not (a and b), broadcast as Xor is (the QNN EP leaves a NotEqual of bools to the CPU)."""
    a, b = match.inputs["in0"], match.inputs["in1"]
    e = Nodes(graph, base_name(match, "xor"))
    e("And", [e("Or", [a, b]), e("Not", [e("And", [a, b])])], match.nodes[0].output[0])
    return e.nodes


def isinf_condition(graph: Graph, match: Match) -> bool:
    """fp16 x only: on an fp32 model the HTP's Equal to +-inf is false everywhere (measured, onnxruntime-qnn 2.7:
    test_isinf), while at fp16 it is right."""
    return graph.elem_type(match.inputs["in0"]) == TensorProto.FLOAT16


def isinf_replacement(graph: Graph, match: Match) -> list:
    """Equal(x, inf), Equal(x, -inf), or both Or'ed, as detect_positive / detect_negative ask (neither: their And,
    false everywhere)."""
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "isinf"))
    pos = int_attr(node, "detect_positive", 1)
    neg = int_attr(node, "detect_negative", 1)
    if pos != neg:
        e("Equal", [x, e.scalar("inf", math.inf if pos else -math.inf, x)], node.output[0])
        return e.nodes
    both = [e("Equal", [x, e.scalar("inf", math.inf, x)]), e("Equal", [x, e.scalar("minus_inf", -math.inf, x)])]
    e("Or" if pos else "And", both, node.output[0])
    return e.nodes


def _identity(e: Nodes, op_type: str, x: str, out: str) -> None:
    """``op_type``(x) by its textbook identity, written to ``out``."""
    one = e.scalar("one", 1.0, x)
    if op_type in ("Sinh", "Cosh"):  # (e^x -+ e^-x) / 2
        both = [e("Exp", [x]), e("Exp", [e("Neg", [x])])]
        e("Mul", [e("Sub" if op_type == "Sinh" else "Add", both), e.scalar("half", 0.5, x)], out)
    elif op_type == "Asin":  # atan(x / sqrt(1 - x^2)): +-inf at x = +-1, whose atan is +-pi / 2
        root = e("Sqrt", [e("Mul", [e("Sub", [one, x]), e("Add", [one, x])])])
        e("Atan", [e("Div", [x, root])], out)
    elif op_type == "Acos":  # 2 atan(sqrt((1 - x) / (1 + x))): inf at x = -1, whose atan is pi / 2
        root = e("Sqrt", [e("Div", [e("Sub", [one, x]), e("Add", [one, x])])])
        e("Mul", [e("Atan", [root]), e.scalar("two", 2.0, x)], out)
    elif op_type == "Asinh":  # sign(x) log(|x| + sqrt(x^2 + 1)): no cancellation for negative x
        a = e("Abs", [x])
        root = e("Sqrt", [e("Add", [e("Mul", [a, a]), one])])
        e("Mul", [e("Sign", [x]), e("Log", [e("Add", [a, root])])], out)
    elif op_type == "Acosh":  # log(x + sqrt((x - 1)(x + 1)))
        root = e("Sqrt", [e("Mul", [e("Sub", [x, one]), e("Add", [x, one])])])
        e("Log", [e("Add", [x, root])], out)
    else:  # Atanh: log((1 + x) / (1 - x)) / 2
        ratio = e("Div", [e("Add", [one, x]), e("Sub", [one, x])])
        e("Mul", [e("Log", [ratio]), e.scalar("half", 0.5, x)], out)


def identity_op_replacement(graph: Graph, match: Match) -> list:
    node = match.nodes[0]
    e = Nodes(graph, base_name(match, node.op_type.lower()))
    _identity(e, node.op_type, match.inputs["in0"], node.output[0])
    return e.nodes


# no Tan: sin / cos in the HTP's fp16 misses tan near its poles by far more than the fp16 tolerance (measured)
IDENTITY_OPS = ("Sinh", "Cosh", "Asin", "Acos", "Asinh", "Acosh", "Atanh")


def identity_op_pattern(graph: Graph, node) -> Match | None:
    return single(node.op_type)(graph, node) if node.op_type in IDENTITY_OPS else None


SELU = Rule("selu-to-elu", single("Selu"), float_input, selu_replacement)


CELU = Rule("celu-to-elu", single("Celu"), float_input, celu_replacement)


SOFTSIGN = Rule("softsign-to-div", single("Softsign"), float_input, softsign_replacement)


SOFTPLUS = Rule("softplus-to-exp-log", single("Softplus"), float_input, softplus_replacement)


MISH = Rule("mish-to-tanh-softplus", single("Mish"), float_input, mish_replacement)


SHRINK = Rule("shrink-to-where", single("Shrink"), float_input, shrink_replacement)


HARDSWISH = Rule("hardsigmoid-mul-to-hardswish", hardswish_pattern, hardswish_condition, hardswish_replacement)


TRIG = Rule("trig-to-identities", identity_op_pattern, float_input, identity_op_replacement)


XOR = Rule("xor-to-and-or", single("Xor"), xor_condition, xor_replacement)


ISINF = Rule("isinf-to-equal", single("IsInf"), isinf_condition, isinf_replacement)
