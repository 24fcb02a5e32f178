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

from onnxbridge.legalize import apply
from onnxbridge.legalize.rules import CUMSUM, GELU, IDENTITY, ISNAN, QNN_RULES, TRILU
from tests.conftest import check_report

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
    pytest.importorskip("onnxruntime_qnn")
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
def test_torch_block_converts_to_dlc_and_passes(cli, tmp_path, opset, fired):
    pytest.importorskip("onnxruntime_qnn")
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


def test_legalizable_onnx_converts_to_dlc_and_check_passes(cli, tmp_path):
    """An ONNX model with every rule's op (CumSum exclusive and reverse too) converts and passes the hop; check
    lists nothing for them, and names a lone Erf it cannot fix."""
    pytest.importorskip("onnxruntime_qnn")
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
