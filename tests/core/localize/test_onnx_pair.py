"""ONNX -> ONNX localization on prefix models: a planted weight, an adapter bug, 2,000 nodes, fp16, no bug."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.localize.onnx_probe import (OnnxProbe, localize_onnx_pair, match_tensors, onnx_checkpoints,
                                            prefix_model)
from onnxbridge.specs import Sample
from onnxbridge.validation import Tolerance

FP32 = Tolerance.for_precision("fp32")


def matmul_chain(blocks: int, *, scale: dict[int, float] | None = None, d: int = 16, opset: int = 17):
    """x -> [MatMul(w_i) -> Add(b_i) -> Relu] x blocks; ``scale``: block -> factor on its weight."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(blocks):
        w = (rng.standard_normal((d, d)) * 1.3 / np.sqrt(d)).astype(np.float32) * (scale or {}).get(i, 1.0)
        b = (rng.standard_normal(d) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        y = "y" if i == blocks - 1 else f"relu{i}"
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"], name=f"block{i}/matmul"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"block{i}/add"),
                  helper.make_node("Relu", [f"add{i}"], [y], name=f"block{i}/relu")]
        x = y
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def samples(shape=(4, 16), k: int = 3) -> list[Sample]:
    return [Sample({"x": np.random.default_rng(s).standard_normal(shape).astype(np.float32)}) for s in range(k)]


def test_a_scaled_weight_names_its_matmul():
    ref, cand = matmul_chain(24), matmul_chain(24, scale={9: 1.05})
    out = localize_onnx_pair(ref, cand, samples(), FP32)
    first = out["first_divergent"]
    assert (first["node"], first["op"], first["output"], first["inputs_ok"]) == ("block9/matmul", "MatMul", "mm9",
                                                                                 True)
    assert first["error"]["max_rel"] == pytest.approx(0.05, rel=0.01)
    assert out["runs"] <= 5 and "72 by name" in out["method"]
    passed = {t["output"]: t["passed"] for t in out["trace"]}
    assert passed["relu8"] is True and passed["mm9"] is False


def test_external_data_model_from_its_path(tmp_path):
    ref, cand = matmul_chain(6, d=64), matmul_chain(6, d=64, scale={4: 1.05})
    for name, m in (("ref", ref), ("cand", cand)):
        onnx.save_model(m, tmp_path / f"{name}.onnx", save_as_external_data=True, location=f"{name}.data",
                        size_threshold=0)
    out = localize_onnx_pair(tmp_path / "ref.onnx", tmp_path / "cand.onnx", samples((2, 64), 1), FP32)
    assert out["first_divergent"]["node"] == "block4/matmul"


def test_prefix_keeps_only_what_the_asked_tensors_need():
    model = matmul_chain(5)
    prefix = prefix_model(model, ["add2"])
    assert [n.name for n in prefix.graph.node] == [f"block{i}/{op}" for i in range(3)
                                                   for op in ("matmul", "add", "relu")][:-1]
    assert {t.name for t in prefix.graph.initializer} == {"w0", "b0", "w1", "b1", "w2", "b2"}
    probe = OnnxProbe(model)
    got = probe.tensors(["add2", "mm0"], samples()[0].feeds)
    assert set(got) == {"add2", "mm0"} and probe.runs == 1
    assert probe.estimate_bytes(["add2"], samples()[0].feeds) == {"add2": 4 * 16 * 4}


def test_match_tensors_by_position_where_names_changed():
    ref = matmul_chain(4)
    cand = onnx.ModelProto()
    cand.CopyFrom(ref)
    for node in cand.graph.node:
        node.input[:] = [f"renamed_{n}" if not n.startswith(("w", "b", "x")) else n for n in node.input]
        node.output[:] = [n if n == "y" else f"renamed_{n}" for n in node.output]
    extra = helper.make_node("Identity", ["renamed_mm1"], ["inserted"], name="inserted")  # an adapter's extra node
    cand.graph.node.insert(4, extra)
    mapping = match_tensors(ref, cand)
    assert mapping["mm1"] == "renamed_mm1" and mapping["relu2"] == "renamed_relu2" and mapping["y"] == "y"
    assert "inserted" not in mapping.values()
    assert [cp.tensor for cp in onnx_checkpoints(ref)][:3] == ["mm0", "add0", "relu0"]


def softmax_model():
    """MatMul -> Softmax(axis=1) on [2, 3, 4] -> Add, at opset 13."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="proj"),
             helper.make_node("Softmax", ["mm"], ["probs"], axis=1, name="attn_softmax"),
             helper.make_node("Add", ["probs", "b"], ["y"], name="out_add")]
    graph = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_planted_adapter_bug_names_the_adapted_node(monkeypatch):
    from onnxbridge.adapters import adapt
    from onnxbridge.adapters.registry import DOWN, load_rules
    from onnxbridge.adapters.rules import softmax

    load_rules()
    model = softmax_model()
    feeds = samples((2, 3, 4), 2)
    right = adapt(model, 12)
    assert localize_onnx_pair(model, right, feeds, FP32)["first_divergent"] is None

    def wrong(node, rw):  # the real rule, but the core Softmax flattens the last two axes
        nodes = softmax.transpose_op_transpose(node, rw)
        for n in nodes or ():
            if n.op_type == "Softmax":
                for a in n.attribute:
                    if a.name == "axis":
                        a.i -= 1
        return nodes

    monkeypatch.setitem(DOWN._fns, ("Softmax", 13), wrong)
    broken = adapt(model, 12)
    out = localize_onnx_pair(model, broken, feeds, FP32)
    first = out["first_divergent"]
    assert (first["node"], first["op"], first["output"], first["inputs_ok"]) == ("attn_softmax", "Softmax", "probs",
                                                                                 True)
    assert first["source"].startswith("attn_softmax_back")  # the adapted node that makes it: its last Transpose


def long_chain(blocks: int, *, bump: int | None = None):
    """x -> [Mul(c_i) -> Add(d_i) -> Neg] x blocks: errors neither grow nor fade; ``bump``: block whose d is off."""
    rng = np.random.default_rng(2)
    shape = (8, 32)
    nodes, inits, x = [], [], "x"
    for i in range(blocks):
        c = (1 + rng.standard_normal(shape[1]) * 1e-3).astype(np.float32)
        d = (rng.standard_normal(shape[1]) * 1e-2).astype(np.float32) + (0.5 if i == bump else 0)
        inits += [numpy_helper.from_array(c, f"c{i}"), numpy_helper.from_array(d.astype(np.float32), f"d{i}")]
        y = "y" if i == blocks - 1 else f"neg{i}"
        nodes += [helper.make_node("Mul", [x, f"c{i}"], [f"mul{i}"], name=f"mul_{i}"),
                  helper.make_node("Add", [f"mul{i}", f"d{i}"], [f"add{i}"], name=f"add_{i}"),
                  helper.make_node("Neg", [f"add{i}"], [y], name=f"neg_{i}")]
        x = y
    graph = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow
def test_two_thousand_nodes_localize_within_twelve_runs():
    ref, cand = long_chain(667), long_chain(667, bump=400)
    assert len(ref.graph.node) == 2001
    out = localize_onnx_pair(ref, cand, samples((8, 32), 2), FP32)
    assert out["first_divergent"]["node"] == "add_400"
    assert out["runs"] <= 12
    assert len(out["trace"]) <= 4 * 12


def test_fp16_overflow_in_one_block_is_found():
    """Block 5 leaves fp16's range (block 6 brings it back in fp32): the fp16 model is inf from block 5's MatMul."""
    from onnxbridge.precision import to_fp16

    ref = matmul_chain(12, scale={5: 3e4, 6: 1 / 3e4})
    cand = to_fp16(ref)
    feeds = samples((4, 16), 2)
    reference = OnnxProbe(ref)
    assert np.abs(reference.tensors(["mm5"], feeds[0].feeds)["mm5"]).max() > 65504  # the planted overflow
    assert OnnxProbe(cand).fp16
    out = localize_onnx_pair(ref, cand, feeds, Tolerance.for_precision("fp16"))
    first = out["first_divergent"]
    assert (first["node"], first["output"], first["inputs_ok"]) == ("block5/matmul", "mm5", True)
    assert "inf" in first["error"]["reason"]
    passed = {t["output"]: t["passed"] for t in out["trace"]}
    assert all(t["passed"] for t in out["trace"] if t["index"] < 15)
    assert passed["y"] is False  # fp16 honestly: onnxruntime alone computes blocks 5-11 in fp32 and y agrees


def test_no_divergence_gives_none():
    out = localize_onnx_pair(matmul_chain(8), matmul_chain(8), samples(), FP32)
    assert out["first_divergent"] is None and "no checkpoint is out of tolerance" in out["method"]
    assert out["runs"] == 1 and all(t["passed"] for t in out["trace"])
