"""Legalization rules (onnxbridge.legalize): each rule on a small ONNX model (the op gone, the rewritten model equal to
the original in onnxruntime CPU), the cases rules must leave alone, and the DLC backend applying them: a torch block
with exact GELU, isnan, triu and cumsum converted with ``--to dlc`` and passing the HTP-simulator hop."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.backends.dlc.legalize.rules import (ARGMAX_LAST, ARGMIN_LAST, AVGPOOL, BATCHNORM, CELU, CLIP,
                                                    CONVTRANSPOSE, CUMSUM, DROPOUT, END_PAD, GATHER_ELEMENTS, GELU,
                                                    GEMM, HARDMAX, HARDSWISH, IDENTITY, ISINF, ISNAN, LAYERNORM,
                                                    LPPOOL, MISH, ONE_INPUT, QNN_RULES, RMS_SCALE, SCATTER_ELEMENTS,
                                                    SELU, SHAPE, SHRINK, SIZE, SOFTPLUS, SOFTSIGN, SUM_REDUCTION, TRIG,
                                                    TRILU, XOR)
from onnxbridge.legalize import apply
from tests.conftest import check_report
from tests.helpers.extras import require, requires

SQRT2 = np.float32(math.sqrt(2))


def _model(nodes, shape, inits=(), opset=17, out_type=TensorProto.FLOAT, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(o, out_type, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8))
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _same(model: onnx.ModelProto, rules, x: np.ndarray, **tol) -> onnx.ModelProto:
    """Apply ``rules``, check the result is a valid model computing what ``model`` does, and return it."""
    out, fired = apply(model, rules)
    assert fired, "no rule fired"
    onnx.checker.check_model(out, full_check=True)
    for want, got in zip(_run(model, x), _run(out, x)):
        np.testing.assert_allclose(got, want, **tol) if tol else np.testing.assert_array_equal(got, want)
    return out


def _x(shape, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)


def _gelu_nodes(scale: str, order: str, add_first: bool) -> tuple[list, list]:
    """Exact GELU as exporters write it: x / sqrt2 or x * (1 / sqrt2); the three factors in ``order``."""
    inits = [("half", np.float32(0.5)), ("one", np.float32(1.0))]
    if scale == "div":
        nodes, inits = [helper.make_node("Div", ["x", "s"], ["d"])], inits + [("s", SQRT2)]
    else:
        nodes, inits = [helper.make_node("Mul", ["s", "x"], ["d"])], inits + [("s", np.float32(1 / SQRT2))]
    nodes += [helper.make_node("Erf", ["d"], ["e"]),
              helper.make_node("Add", ["one", "e"] if add_first else ["e", "one"], ["p"])]
    nodes += {"x*p*h": [helper.make_node("Mul", ["x", "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])],
              "h*(x*p)": [helper.make_node("Mul", ["p", "x"], ["m"]), helper.make_node("Mul", ["half", "m"], ["y"])],
              "x*(h*p)": [helper.make_node("Mul", ["half", "p"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])],
              "(x*h)*p": [helper.make_node("Mul", ["x", "half"], ["m"]), helper.make_node("Mul", ["m", "p"], ["y"])],
              }[order]
    return nodes, inits


@pytest.mark.parametrize("opset,domain", [(17, "com.microsoft"), (20, "")])
@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("order", ["x*p*h", "h*(x*p)", "x*(h*p)", "(x*h)*p"])
def test_exact_gelu_becomes_one_gelu(opset, domain, scale, order):
    nodes, inits = _gelu_nodes(scale, order, add_first=order == "x*(h*p)")
    out = _same(_model(nodes, [2, 16], inits, opset=opset), [GELU], _x((2, 16)), rtol=1e-6, atol=1e-6)
    assert [(n.domain, n.op_type) for n in out.graph.node] == [(domain, "Gelu")]
    assert not out.graph.initializer  # the pattern's constants went with it


@pytest.mark.parametrize("change", ["lone", "other-constant", "shared"])
def test_erf_not_an_exact_gelu_is_left(change, tmp_path):
    if change == "lone":
        nodes, inits = [helper.make_node("Erf", ["x"], ["y"], name="erf")], []
    else:
        nodes, inits = _gelu_nodes("div", "x*p*h", add_first=False)
        nodes[0].name = "erf_input"
        if change == "other-constant":  # 0.5 * x * (1 + erf(x / 1.41)) is not GELU
            inits[2] = ("s", np.float32(1.41))
    model = _model(nodes, [2, 16], inits, outputs=("y", "p") if change == "shared" else ("y",))
    out, fired = apply(model, QNN_RULES)
    assert fired == [] and _ops(out) == _ops(model)
    from onnxbridge.backends.dlc.prepare import prepare
    from onnxbridge.errors import UnsupportedError

    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError, match=r"\(Erf\) has no QNN op"):
        prepare(tmp_path / "m.onnx", tmp_path / "prep", {})


def test_isnan_becomes_not_equal():
    x = _x((3, 8))
    x[0, :3] = np.nan
    x[1, 0] = np.inf
    out = _same(_model([helper.make_node("IsNaN", ["x"], ["y"], name="nan")], [3, 8], out_type=TensorProto.BOOL),
                [ISNAN], x)
    assert _ops(out) == ["Equal", "Not"]


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1])
def test_static_trilu_becomes_where_by_a_mask(upper, k):
    x = _x((2, 5, 7))
    x[0, 4, 0] = np.inf  # Where keeps inf and NaN exactly where a Mul by 0 would not
    x[1, 0, 6] = np.nan
    nodes = [helper.make_node("Trilu", ["x"] + (["k"] if k is not None else []), ["y"], upper=upper)]
    model = _model(nodes, [2, 5, 7], [("k", np.int64(k))] if k is not None else [])
    out = _same(model, [TRILU], x)
    assert _ops(out) == ["Where"]


def test_trilu_of_dynamic_shape_is_left():
    out, fired = apply(_model([helper.make_node("Trilu", ["x"], ["y"])], ["N", "M"]), QNN_RULES)
    assert fired == [] and _ops(out) == ["Trilu"]


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive,reverse", [(1, 0), (0, 1), (1, 1)])
def test_cumsum_exclusive_or_reverse_becomes_matmul(axis, exclusive, reverse):
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)]
    out = _same(_model(nodes, [3, 4, 6], [("axis", np.int64(axis))]), [CUMSUM], _x((3, 4, 6)),
                rtol=1e-5, atol=1e-5)
    assert "CumSum" not in _ops(out) and "MatMul" in _ops(out)


def test_plain_cumsum_is_left():
    """The QNN EP takes a plain CumSum: nothing to rewrite."""
    model = _model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [3, 4], [("axis", np.int64(1))])
    assert apply(model, QNN_RULES)[1] == []


def _identity_outputs() -> onnx.ModelProto:
    """Two graph outputs copied by Identity from one Add: what constant folding leaves."""
    return _model([helper.make_node("Add", ["x", "w"], ["r"]), helper.make_node("Identity", ["r"], ["y"]),
                   helper.make_node("Identity", ["r"], ["z"])], [2, 4], [("w", np.ones((2, 4), np.float32))],
                  outputs=("y", "z"))


def test_identity_becomes_reshape():
    out = _same(_identity_outputs(), [IDENTITY], _x((2, 4)))
    assert _ops(out) == ["Add", "Reshape", "Reshape"]


def test_identity_outputs_convert_to_dlc(cli, tmp_path):
    require("onnxruntime_qnn")
    onnx.save(_identity_outputs(), tmp_path / "m.onnx")
    res = cli("convert", tmp_path / "m.onnx", "-o", tmp_path / "m.dlc", "--to", "dlc", "--report", tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert res.exit_code == 0 and rep["hops"][-1]["status"] == "passed", (res.output, rep["hops"][-1])
    assert any("identity-to-reshape" in n for n in rep["notes"]), rep["notes"]


BLOCK = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc2(self.act(self.fc1(x)))
        clean = torch.where(torch.isnan(x), torch.zeros_like(x), x)
        scores = (h @ h.transpose(-1, -2)).triu(1) - torch.triu(torch.full((8, 8), 1e4), 1)
        return scores.softmax(-1) @ h + 0.1 * torch.cumsum(clean, dim=-1)


def factory():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(1, 8, 16),)
'''


@pytest.mark.parametrize("opset,fired", [
    ("17", ["gelu-erf-to-gelu", "isnan-to-not-equal", "trilu-to-where-mask"]),  # TorchScript: the Erf pattern
    ("20", ["isnan-to-not-equal", "trilu-to-where-mask"]),  # dynamo exports Gelu itself
])
@pytest.mark.slow
@requires("torch")
def test_torch_block_converts_to_dlc_and_passes(cli, tmp_path, opset, fired):
    require("onnxruntime_qnn")
    (tmp_path / "block.py").write_text(BLOCK)
    res = cli("convert", f"{tmp_path / 'block.py'}:factory", "-o", tmp_path / "m.dlc", "--to", "dlc",
              "--opset", opset, "--report", tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert res.exit_code == 0, (res.output, rep["hops"][-1])
    assert [h["status"] for h in rep["hops"]] == ["passed", "passed"] and rep["hops"][-1]["to"] == "qnn-htp-simulator"
    note = next(n for n in rep["notes"] if n.startswith("legalized for the QNN execution provider"))
    assert [rule for rule in fired if rule in note] == fired, note
    ops = rep["artifact"]["backend"]["ops"]  # QNN op names: the GELU is one Neuron, the masks Eltwise_Ternary
    assert ops.get("Neuron") == 1 and ops.get("Eltwise_Ternary") == 2, ops


@pytest.mark.slow
def test_legalizable_onnx_converts_to_dlc_and_check_passes(cli, tmp_path):
    """An ONNX model with every rule's op (CumSum exclusive and reverse too) converts and passes the hop; check
    lists nothing for them, and names a lone Erf it cannot fix."""
    require("onnxruntime_qnn")
    nodes, inits = _gelu_nodes("mul", "h*(x*p)", add_first=True)
    nodes[-1].output[0] = "g"
    nodes += [helper.make_node("Trilu", ["g"], ["t"], upper=0),
              helper.make_node("CumSum", ["t", "axis"], ["c"], exclusive=1, reverse=1),
              helper.make_node("IsNaN", ["c"], ["n"]),
              helper.make_node("Where", ["n", "zero", "c"], ["y"])]
    src = tmp_path / "m.onnx"
    onnx.save(_model(nodes, [8, 8], inits + [("axis", np.int64(0)), ("zero", np.float32(0))]), src)
    assert cli("check", src, "--targets", "dlc").exit_code == 0
    res = cli("convert", src, "-o", tmp_path / "m.dlc", "--to", "dlc", "--report", tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert res.exit_code == 0 and rep["hops"][-1]["status"] == "passed", (res.output, rep["hops"][-1])
    assert sum(n.count("(node ") for n in rep["notes"] if n.startswith("legalized")) == 4, rep["notes"]
    res = cli("convert", src, "-o", tmp_path / "h.dlc", "--to", "dlc", "--precision", "fp16", "--report",
              tmp_path / "h.json")
    hop = check_report(tmp_path / "h.json")["hops"][-1]
    assert res.exit_code == 0 and hop["status"] == "passed", hop  # the rewrites also hold in an fp16 DLC
    # a saved DLC is checked again from its ONNX model: prepared, legalized and serialized the same way
    res = cli("validate", src, tmp_path / "m.dlc", "--report", tmp_path / "v.json")
    hop = check_report(tmp_path / "v.json")["hops"][-1]
    assert res.exit_code == 0 and hop["status"] == "passed" and hop["artifact_checked"] == "structure", hop
    onnx.save(_model([helper.make_node("Erf", ["x"], ["y"], name="lone_erf")], [8, 8]), src)
    res = cli("check", src, "--targets", "dlc")
    assert res.exit_code == 2 and "'lone_erf' (Erf)" in res.stdout, res.stdout


# --- rules on the node suite's cases: several inputs, several outputs ---------------------------------------------

def _io_model(nodes, inputs: dict, outputs: dict, opset: int = 17, inits=()) -> onnx.ModelProto:
    """A checked model of ``nodes``: ``inputs`` name -> (elem type, shape), ``outputs`` name -> elem type."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
                              [helper.make_tensor_value_info(k, t, None) for k, t in outputs.items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8))
    onnx.checker.check_model(model, full_check=True)
    return model


def _same_feeds(model: onnx.ModelProto, rules, feeds: dict, **tol) -> onnx.ModelProto:
    """Apply ``rules`` (one must fire); the result computes every output as ``model`` does on ``feeds``."""
    out, fired = apply(model, rules)
    assert fired, "no rule fired"
    onnx.checker.check_model(out, full_check=True)
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
           for m in (model, out)]
    for want, got in zip(*run):
        np.testing.assert_allclose(got, want, **tol) if tol else np.testing.assert_array_equal(got, want)
    return out


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("outputs", [("y", "mean", "inv"), ("y", "", "inv"), ("y",)])
def test_layernorm_with_statistics_or_runtime_scale_becomes_reductions(opset, axis, outputs):
    shape = [2, 3, 4]
    params = shape[axis:]
    nodes = [helper.make_node("LayerNormalization", ["x", "w", "b"], list(outputs), axis=axis, epsilon=1e-3)]
    model = _io_model(nodes, {"x": (TensorProto.FLOAT, shape), "w": (TensorProto.FLOAT, params),
                              "b": (TensorProto.FLOAT, params)}, {o: TensorProto.FLOAT for o in outputs if o},
                      opset=opset)
    feeds = {"x": _x(shape), "w": _x(params, 1), "b": _x(params, 2)}
    out = _same_feeds(model, [LAYERNORM], feeds, rtol=1e-5, atol=1e-5)
    assert "LayerNormalization" not in _ops(out) and _ops(out).count("ReduceMean") == 2
    assert ("Reciprocal" in _ops(out)) == ("inv" in outputs)


def test_layernorm_the_qnn_ep_takes_is_left():
    """Y only, constant scale and bias: the QNN EP's own LayerNorm."""
    nodes = [helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"])]
    model = _model(nodes, [2, 8], [("w", np.ones(8, np.float32)), ("b", np.zeros(8, np.float32))])
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("opset,mask", [(11, False), (22, False), (22, True)])
def test_inference_dropout_becomes_a_copy(opset, mask):
    outputs = {"y": TensorProto.FLOAT, **({"z": TensorProto.BOOL} if mask else {})}
    model = _io_model([helper.make_node("Dropout", ["x"], list(outputs))], {"x": (TensorProto.FLOAT, [3, 4])},
                      outputs, opset=opset)
    x = _x((3, 4))
    x[0, 0] = np.nan  # the mask is true there too
    out = _same_feeds(model, [DROPOUT], {"x": x})
    assert "Dropout" not in _ops(out) and "Reshape" in _ops(out)


def test_training_dropout_is_left():
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y"])]
    model = _model(nodes, [3, 4], [("r", np.float32(0.5)), ("t", np.bool_(True))], opset=13)
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("op", ["Mean", "Sum", "Max", "Min"])
def test_one_input_variadic_ops_become_a_copy(op):
    out = _same(_model([helper.make_node(op, ["x"], ["y"])], [3, 4]), [ONE_INPUT], _x((3, 4)))
    assert _ops(out) == ["Reshape"]
    assert apply(_model([helper.make_node(op, ["x", "x"], ["y"])], [3, 4]), QNN_RULES)[1] == []


@pytest.mark.parametrize("bounds", ["lo,hi", "lo,", ",hi", "", "hi,lo"])
def test_clip_with_runtime_bounds_becomes_max_min(bounds):
    lo, hi = (bounds.split(",") + ["", ""])[:2] if bounds else ("", "")
    inputs = {"x": (TensorProto.FLOAT, [3, 4]), **{b: (TensorProto.FLOAT, []) for b in (lo, hi) if b}}
    model = _io_model([helper.make_node("Clip", ["x", lo, hi] if hi else ["x", lo] if lo else ["x"], ["y"])],
                      inputs, {"y": TensorProto.FLOAT}, opset=13)
    feeds = {"x": _x((3, 4)), "lo": np.array(-1.0, np.float32), "hi": np.array(2.0, np.float32)}
    out = _same_feeds(model, [CLIP], {k: v for k, v in feeds.items() if k in inputs})
    assert "Clip" not in _ops(out)


def test_clip_with_constant_bounds_is_left():
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])]
    model = _model(nodes, [3, 4], [("lo", np.float32(-1)), ("hi", np.float32(1))], opset=13)
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("op,rule,attrs,extra", [
    ("Selu", SELU, {}, "Elu"), ("Selu", SELU, {"alpha": 2.0, "gamma": 3.0}, "Elu"),
    ("Celu", CELU, {}, "Elu"), ("Celu", CELU, {"alpha": 2.0}, "Elu"),
    ("Softsign", SOFTSIGN, {}, "Abs"), ("Softplus", SOFTPLUS, {}, "Log"), ("Mish", MISH, {}, "Tanh"),
    ("Shrink", SHRINK, {}, "Where"), ("Shrink", SHRINK, {"lambd": 1.5, "bias": 0.5}, "Where"),
])
def test_activations_become_qnn_ops(op, rule, attrs, extra):
    x = _x((4, 25))
    x[0, :4] = [100.0, -100.0, 0.0, 1.5]  # softplus of large |x| stays finite; Shrink at its threshold
    out = _same(_model([helper.make_node(op, ["x"], ["y"], **attrs)], [4, 25], opset=18), [rule], x,
                rtol=1e-5, atol=1e-6)
    assert op not in _ops(out) and extra in _ops(out)


@pytest.mark.parametrize("order", [0, 1])
def test_hardsigmoid_times_x_becomes_hardswish(order):
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
             helper.make_node("Mul", ["x", "h"][::1 - 2 * order], ["y"])]
    out = _same(_model(nodes, [3, 20]), [HARDSWISH], _x((3, 20)), rtol=1e-6, atol=1e-6)
    assert _ops(out) == ["HardSwish"]


def test_hardsigmoid_of_other_slope_is_left():
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"]), helper.make_node("Mul", ["x", "h"], ["y"])]
    assert apply(_model(nodes, [3, 20]), QNN_RULES)[1] == []


@pytest.mark.parametrize("op,rule", [("ArgMax", ARGMAX_LAST), ("ArgMin", ARGMIN_LAST)])
@pytest.mark.parametrize("axis,keepdims", [(0, 1), (1, 0), (-1, 1)])
def test_select_last_index_becomes_a_reversed_arg(op, rule, axis, keepdims):
    x = np.round(_x((4, 6))).astype(np.float32)  # ties: the last of them is the answer
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=1)
    out = _same(_model([node], [4, 6], opset=13, out_type=TensorProto.INT64), [rule], x)
    assert _ops(out) == ["Gather", op, "Sub"]
    assert all(a.i == 0 for n in out.graph.node for a in n.attribute if a.name == "select_last_index")


def test_xor_of_bools_becomes_and_or():
    model = _io_model([helper.make_node("Xor", ["a", "b"], ["y"])],
                      {"a": (TensorProto.BOOL, [2, 3, 4]), "b": (TensorProto.BOOL, [3, 1])}, {"y": TensorProto.BOOL})
    rng = np.random.default_rng(0)
    out = _same_feeds(model, [XOR], {"a": rng.random((2, 3, 4)) > 0.5, "b": rng.random((3, 1)) > 0.5})
    assert sorted(_ops(out)) == ["And", "And", "Not", "Or"]


@pytest.mark.parametrize("attrs", [{}, {"alpha": 0.25, "beta": 0.35, "transA": 1, "transB": 1}, {"transB": 1}])
@pytest.mark.parametrize("c_shape", [None, [1, 5], [3, 5], [1]])
def test_gemm_with_runtime_operands_becomes_matmul(attrs, c_shape):
    a_shape = [4, 3] if attrs.get("transA") else [3, 4]
    b_shape = [5, 4] if attrs.get("transB") else [4, 5]
    inputs = {"a": (TensorProto.FLOAT, a_shape), "b": (TensorProto.FLOAT, b_shape)}
    if c_shape:
        inputs["c"] = (TensorProto.FLOAT, c_shape)
    model = _io_model([helper.make_node("Gemm", list(inputs), ["y"], **attrs)], inputs, {"y": TensorProto.FLOAT})
    feeds = {k: _x(shape, i) for i, (k, (_, shape)) in enumerate(inputs.items())}
    out = _same_feeds(model, [GEMM], feeds, rtol=1e-5, atol=1e-5)
    assert "Gemm" not in _ops(out) and "MatMul" in _ops(out)
    assert ("Expand" in _ops(out)) == (c_shape in ([1, 5], [1]))


def test_a_fully_connected_gemm_is_left():
    """Constant B and C, alpha = beta = 1: the QNN EP's FullyConnected."""
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)]
    model = _model(nodes, [3, 4], [("w", np.ones((5, 4), np.float32)), ("c", np.zeros(5, np.float32))])
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"start": -2, "end": -1}, {"end": 10}, {"start": -9, "end": 2}])
def test_shape_of_a_static_tensor_becomes_a_constant(attrs):
    nodes = [helper.make_node("Shape", ["x"], ["y"], **attrs)]
    out = _same(_model(nodes, [2, 3, 4, 5], opset=15, out_type=TensorProto.INT64), [SHAPE], _x((2, 3, 4, 5)))
    assert _ops(out) == ["Constant"]


def test_size_of_a_static_tensor_becomes_a_constant():
    out = _same(_model([helper.make_node("Size", ["x"], ["y"])], [2, 3], out_type=TensorProto.INT64), [SIZE],
                _x((2, 3)))
    assert _ops(out) == ["Constant"]


def test_shape_of_a_dynamic_tensor_is_left():
    model = _model([helper.make_node("Shape", ["x"], ["y"])], ["N", 3], out_type=TensorProto.INT64)
    assert apply(model, QNN_RULES)[1] == []


def test_prepare_folds_again_what_a_static_shape_feeds(tmp_path):
    """onnxruntime inlines GroupNormalization's function after its folding: Shape nodes of static tensors are left.
    The rule makes them constants and a second folding removes the shape arithmetic behind them."""
    from onnxbridge.backends.dlc.prepare import prepare

    graph = helper.make_graph([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])],
                              [numpy_helper.from_array(np.ones(4, np.float32), "s"),
                               numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), tmp_path / "m.onnx")
    prepared = prepare(tmp_path / "m.onnx", tmp_path / "prep", {})
    ops = _ops(onnx.load(prepared.path))
    assert "Shape" not in ops and "Concat" not in ops and "ReduceMean" in ops, ops
    assert any("shape-to-constant" in n for n in prepared.notes), prepared.notes


@pytest.mark.parametrize("shape", [[2, 3], [2, 3, 4, 5]])
def test_batchnorm_with_runtime_parameters_becomes_arithmetic(shape):
    params = ["s", "bias", "mean", "var"]
    inputs = {"x": (TensorProto.FLOAT, shape), **{p: (TensorProto.FLOAT, [3]) for p in params}}
    model = _io_model([helper.make_node("BatchNormalization", ["x", *params], ["y"], epsilon=1e-2)], inputs,
                      {"y": TensorProto.FLOAT}, opset=15)
    feeds = {"x": _x(shape), **{p: _x((3,), i + 1) for i, p in enumerate(params)}}
    feeds["var"] = np.abs(feeds["var"])
    out = _same_feeds(model, [BATCHNORM], feeds, rtol=1e-5, atol=1e-5)
    assert "BatchNormalization" not in _ops(out)


def test_batchnorm_with_constant_parameters_or_training_is_left():
    consts = [(p, np.ones(3, np.float32)) for p in ("s", "bias", "mean", "var")]
    node = helper.make_node("BatchNormalization", ["x", "s", "bias", "mean", "var"], ["y"])
    assert apply(_model([node], [2, 3, 4], consts, opset=15), QNN_RULES)[1] == []
    node = helper.make_node("BatchNormalization", ["x", "s", "bias", "mean", "var"], ["y", "rm", "rv"],
                            training_mode=1)
    model = _io_model([node], {"x": (TensorProto.FLOAT, [2, 3, 4]), "s": (TensorProto.FLOAT, [3])},
                      dict.fromkeys(["y", "rm", "rv"], TensorProto.FLOAT), opset=15, inits=consts[1:])
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("constant", [False, True])
@pytest.mark.parametrize("op,rule", [("GatherElements", GATHER_ELEMENTS), ("ScatterElements", SCATTER_ELEMENTS)])
def test_elements_indices_become_nonnegative(op, rule, axis, constant):
    if op == "GatherElements":
        indices, names = np.array([[0, -1, 2], [-3, 1, -2]], np.int64), ["x", "i"]
    else:  # every target written once
        indices, names = np.array([[-1, 0, -3]], np.int64), ["x", "i", "u"]
        indices = indices if axis == 0 else indices.T
    feeds = {"x": _x((3, 3)), "i": indices, "u": _x(indices.shape, 1)}
    inputs = {k: (TensorProto.INT64 if k == "i" else TensorProto.FLOAT, list(feeds[k].shape)) for k in names
              if not (constant and k == "i")}
    model = _io_model([helper.make_node(op, names, ["y"], axis=axis)], inputs, {"y": TensorProto.FLOAT},
                      opset=16, inits=[("i", indices)] if constant else [])
    out = _same_feeds(model, [rule], {k: v for k, v in feeds.items() if k in inputs})
    assert _ops(out)[-1] == op and ("Where" in _ops(out)) != constant


def test_nonnegative_constant_indices_and_reductions_are_left():
    model = _model([helper.make_node("GatherElements", ["x", "i"], ["y"])], [3, 3],
                   [("i", np.zeros((2, 3), np.int64))])
    assert apply(model, QNN_RULES)[1] == []
    model = _io_model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], reduction="add")],
                      {"x": (TensorProto.FLOAT, [3, 3]), "i": (TensorProto.INT64, [1, 3]),
                       "u": (TensorProto.FLOAT, [1, 3])}, {"y": TensorProto.FLOAT}, opset=16)
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax_becomes_equal_argmax(axis):
    x = np.round(_x((3, 4, 5)))  # ties: Hardmax marks the first maximum only
    out = _same(_model([helper.make_node("Hardmax", ["x"], ["y"], axis=axis)], [3, 4, 5], opset=13), [HARDMAX], x)
    assert _ops(out) == ["ArgMax", "Equal", "Cast"]


def test_old_hardmax_is_left():
    """Hardmax before opset 13 flattens around its axis: not the rewrite's one-axis form."""
    assert apply(_model([helper.make_node("Hardmax", ["x"], ["y"])], [3, 4], opset=11), QNN_RULES)[1] == []


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0},
                                   {"detect_positive": 0, "detect_negative": 0}])
def test_fp16_isinf_becomes_equal(attrs):
    graph = helper.make_graph([helper.make_node("IsInf", ["x"], ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    x = np.array([-1.2, np.nan, np.inf, 2.8, -np.inf, 0.0], np.float16)
    out = _same_feeds(model, [ISINF], {"x": x})
    assert "IsInf" not in _ops(out)


def test_fp32_isinf_is_left():
    """The HTP's fp32 Equal to +-inf is false everywhere: an fp32 IsInf stays, and is refused."""
    model = _model([helper.make_node("IsInf", ["x"], ["y"])], [6], opset=20, out_type=TensorProto.BOOL)
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("op,low,high", [("Sinh", -5, 5), ("Cosh", -5, 5), ("Asin", -1, 1), ("Acos", -1, 1),
                                         ("Asinh", -50, 50), ("Acosh", 1, 50), ("Atanh", -0.99, 0.99)])
def test_trig_ops_become_identities(op, low, high):
    x = np.linspace(low, high, 41, dtype=np.float32).reshape(1, 41)
    out = _same(_model([helper.make_node(op, ["x"], ["y"])], [1, 41], opset=13), [TRIG], x, rtol=2e-5, atol=2e-6)
    assert op not in _ops(out)


def test_tan_is_left():
    assert apply(_model([helper.make_node("Tan", ["x"], ["y"])], [3, 4], opset=13), QNN_RULES)[1] == []


POOLS = [{"kernel_shape": [2, 2]}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
         {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 1, 1]},
         {"kernel_shape": [3, 2], "pads": [2, 1, 0, 0]},
         {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}, {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"},
         {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}]


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("attrs", POOLS)
def test_lppool_becomes_averagepool(p, attrs):
    model = _model([helper.make_node("LpPool", ["x"], ["y"], p=p, **attrs)], [1, 2, 5, 6], opset=18)
    out = _same(model, [LPPOOL], _x((1, 2, 5, 6)), rtol=1e-5, atol=1e-5)
    assert "LpPool" not in _ops(out) and "AveragePool" in _ops(out)


@pytest.mark.parametrize("attrs", [{"dilations": [2, 2]}, {"ceil_mode": 1}])
def test_lppool_of_dilations_or_ceil_mode_is_left(attrs):
    model = _model([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], **attrs)], [1, 2, 5, 6],
                   opset=18)
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("attrs", POOLS[1:])
def test_padded_averagepool_becomes_pad_and_pool(include, attrs):
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=include, **attrs)],
                   [1, 2, 5, 6], opset=19)
    out = _same(model, [AVGPOOL], _x((1, 2, 5, 6)), rtol=1e-5, atol=1e-6)
    assert _ops(out)[:3] == ["Pad", "Reshape", "AveragePool"] and ("Mul" in _ops(out)) != bool(include)
    assert not any(a.name in ("pads", "auto_pad") for n in out.graph.node if n.op_type == "AveragePool"
                   for a in n.attribute)


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
                                   {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 0, 0, 1]}])
def test_ceil_mode_averagepool_becomes_pad_and_pool(attrs):
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)], [1, 2, 5, 6], opset=19)
    out = _same(model, [AVGPOOL], _x((1, 2, 5, 6)), rtol=1e-5, atol=1e-6)
    assert "Mul" in _ops(out)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},  # nothing padded
    {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 0, 1], "ceil_mode": 1},  # a last window onnxruntime drops
])
def test_averagepool_the_rule_cannot_take_is_left(attrs):
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)], [1, 2, 5, 6], opset=19)
    assert apply(model, QNN_RULES)[1] == []


@pytest.mark.parametrize("attrs", [{"strides": [2, 2], "output_padding": [1, 1]},
                                   {"strides": [2, 3], "output_shape": [10, 14]},
                                   {"strides": [2, 2], "output_padding": [1, 0], "pads": [1, 0, 0, 1]}])
def test_convtranspose_with_output_padding_becomes_full_then_cropped(attrs):
    """The HTP gets output_padding / output_shape wrong: the full ConvTranspose, then Slice/Pad, then the bias."""
    w, b = _x((2, 3, 3, 3), seed=1), _x((3,), seed=2)
    model = _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], **attrs)],
                   [1, 2, 5, 6], [("w", w), ("b", b)])
    out = _same(model, [CONVTRANSPOSE], _x((1, 2, 5, 6)), rtol=1e-5, atol=1e-4)
    conv = next(n for n in out.graph.node if n.op_type == "ConvTranspose")
    assert not {a.name for a in conv.attribute} & {"output_padding", "output_shape"}
    plain = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
                   [1, 2, 5, 6], [("w", w)])
    assert apply(plain, [CONVTRANSPOSE])[1] == []


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceSumSquare", "ReduceLogSum"])
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keepdims", [([], 1), ([1], 0), ([-1, 0], 1)])
def test_sum_reductions_over_constant_axes_become_reducesum(op, opset, axes, keepdims):
    if opset >= 18:
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
        model = _model([node], [3, 4, 5], [("axes", np.array(axes, np.int64))], opset=opset)
    else:
        node = helper.make_node(op, ["x"], ["y"], keepdims=keepdims, **({"axes": axes} if axes else {}))
        model = _model([node], [3, 4, 5], opset=opset)
    out = _same(model, [SUM_REDUCTION], np.abs(_x((3, 4, 5))), rtol=1e-5, atol=1e-5)
    assert op not in _ops(out) and "ReduceSum" in _ops(out)


def test_reductions_over_runtime_axes_or_noop_are_left():
    for axes, attrs in ((None, {}), (np.zeros(0, np.int64), {"noop_with_empty_axes": 1})):
        graph = helper.make_graph([helper.make_node("ReduceL1", ["x", "axes"], ["y"], **attrs)], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])] +
                                  ([helper.make_tensor_value_info("axes", TensorProto.INT64, [1])] if axes is None
                                   else []),
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [] if axes is None else [numpy_helper.from_array(axes, "axes")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
        assert apply(model, QNN_RULES)[1] == []


def _pad(pads, value=None, opset=17, axes=None, mode="constant", shape=(2, 3, 4, 5)) -> onnx.ModelProto:
    """A Pad of ``x``: pads (and value, axes) as inputs from opset 11, attributes before."""
    if opset < 11:
        attrs = {"pads": pads, "mode": mode, **({"value": value} if value is not None else {})}
        return _model([helper.make_node("Pad", ["x"], ["y"], **attrs)], list(shape), opset=opset)
    inits = [("pads", np.array(pads, np.int64)), ("value", np.float32(value if value is not None else 0))]
    inputs = ["x", "pads", "value" if value is not None else ""]
    if axes is not None:
        inits.append(("axes", np.array(axes, np.int64)))
        inputs.append("axes")
    return _model([helper.make_node("Pad", inputs, ["y"], mode=mode)], list(shape), inits, opset=opset)


@pytest.mark.parametrize("pads,value,opset,axes", [
    ([0, 0, 0, 0, 0, 0, 0, 1], 1.0, 17, None),  # EfficientViT's F.pad(v, (0, 1), value=1)
    ([0, 0, 0, 0, 0, 0, 0, 3], None, 17, None),
    ([0, 1, 2, 0, 1, 0, -1, 2], -2.5, 17, None),  # other axes padded and cropped too
    ([0, 0, 1, 2], 1.0, 18, [1, -1]),
    ([0, 0, 0, 0, 0, 0, 1, 1], 4.0, 9, None),
])
def test_a_pad_at_the_last_axis_end_becomes_concat(pads, value, opset, axes):
    """The HTP gets the last axis padded at its end only wrong: that padding becomes a Concat of a constant block."""
    out = _same(_pad(pads, value, opset, axes), [END_PAD], _x((2, 3, 4, 5)))
    assert "Concat" in _ops(out)
    for node in out.graph.node:
        if node.op_type == "Pad":  # what is left pads the other axes only
            kept = [a.ints for a in node.attribute if a.name == "pads"] or \
                [numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == node.input[1]))]
            assert kept[0][3] == 0 and kept[0][7] == 0


@pytest.mark.parametrize("pads,mode", [([0, 0, 0, 1, 0, 0, 0, 0], "constant"), ([0, 0, 0, 1, 0, 0, 0, 2], "constant"),
                                       ([0, 0, 1, 0, 0, 0, 1, 0], "constant"), ([0, 0, 0, 0, 0, 0, 0, 1], "edge"),
                                       ([0, 0, 0, 0, 0, 0, 0, 1], "reflect")])
def test_pads_the_htp_computes_are_left(pads, mode):
    assert apply(_pad(pads, mode=mode), [END_PAD])[1] == []


def test_a_pad_of_runtime_pads_is_left():
    graph = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    assert apply(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                 [END_PAD])[1] == []


def _rms_norm(scale_first: bool = True, eps: bool = True, divide: bool = False) -> onnx.ModelProto:
    """Llama's RMSNorm as the dynamo exporter writes it: x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)) * w."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["m"], axes=[-1])]
    nodes += [helper.make_node("Add", ["eps", "m"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"])] if eps else \
        [helper.make_node("Sqrt", ["m"], ["s"])]
    nodes += [helper.make_node("Div", ["x", "s"], ["n"])] if divide else \
        [helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Mul", ["x", "r"], ["n"])]
    nodes.append(helper.make_node("Mul", ["w", "n"] if scale_first else ["n", "w"], ["y"]))
    inits = [("two", np.float32(2)), ("eps", np.float32(1e-6)), ("w", _x((8,), seed=3))]
    return _model(nodes, [1, 4, 8], inits[:1] + inits[1 if eps else 2:])


def test_an_rms_norm_scale_goes_second():
    """The HTP cannot finalize a graph whose RMS normalization is scaled as weight * normalized (Llama's)."""
    out = _same(_rms_norm(), [RMS_SCALE], _x((1, 4, 8)))
    assert list(out.graph.node[-1].input) == ["n", "w"]
    assert apply(_rms_norm(eps=False), [RMS_SCALE])[1]


@pytest.mark.parametrize("kw", [{"scale_first": False}, {"divide": True}])
def test_rms_norms_the_htp_takes_are_left(kw):
    assert apply(_rms_norm(**kw), [RMS_SCALE])[1] == []
