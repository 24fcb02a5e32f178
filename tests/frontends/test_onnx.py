"""ONNX as the source: re-targeting opsets through the builder, guarded adapters, inputs never modified."""
from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge import adapters
from onnxbridge.errors import UnsupportedError
from tests.conftest import check_report
from tests.helpers.models import tiny_onnx


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("target", [15, 18, 21])
def test_retarget_opset_keeps_numbers(tmp_path, target):
    src = tiny_onnx(tmp_path / "tiny.onnx", opset=17)
    digest = _digest(src)
    result = onnxbridge.convert(src, output=tmp_path / "out.onnx", opset=target, report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["hops"][0]["from"] == "onnx"
    assert rep["hops"][0]["outputs"][0]["max_abs"] == 0.0
    model = onnx.load(result.path)
    assert model.opset_import[0].version == target
    assert model.ir_version == onnx.helper.find_min_ir_version_for(list(model.opset_import), True)
    assert _digest(src) == digest  # the source is never modified
    assert [n.name for n in model.graph.node] == ["mm", "relu"]  # names kept


def test_unreachable_opset_is_a_clear_error_and_writes_nothing(tmp_path, cli):
    graph = helper.make_graph([helper.make_node("Range", ["s", "l", "d"], ["y"], name="rng")], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in "sld"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    src = tmp_path / "range.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6), src)
    res = cli("convert", src, "-o", tmp_path / "o.onnx", "--opset", "10")
    assert res.exit_code == 2 and "node 'rng' (Range): Range first appears in opset 11" in res.stderr
    assert "keep opset >= 11" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["range.onnx"]


@pytest.mark.parametrize("target", [7, 13])
def test_retarget_down(tmp_path, target):
    src = tiny_onnx(tmp_path / "tiny.onnx", opset=17)
    result = onnxbridge.convert(src, output=tmp_path / "out.onnx", opset=target)
    assert result.report["status"] == "passed"
    assert onnx.load(result.path).opset_import[0].version == target


def test_unnamed_nodes_get_stable_names(tmp_path):
    path = tiny_onnx(tmp_path / "t.onnx")
    model = onnx.load(path)
    for node in model.graph.node:
        node.name = ""
    onnx.save(model, path)
    out = onnxbridge.convert(path, output=tmp_path / "o.onnx").path
    assert [n.name for n in onnx.load(out).graph.node] == ["MatMul_0", "Relu_1"]


def test_model_proto_source_is_not_modified():
    model = onnx.load_from_string(onnx.helper.make_model(
        helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=7).SerializeToString())
    before = model.SerializeToString()
    result = onnxbridge.convert(model, opset=17)
    assert model.SerializeToString() == before
    assert result.model.opset_import[0].version == 17 and result.report["status"] == "passed"


def _softmax_model(axis: int, opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=axis, name="sm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_downgrade_over_any_axis_keeps_numbers(tmp_path, axis):
    """onnx.version_converter turns Softmax-13 over axis 1 into a wrong Softmax-12 (max diff 0.76)."""
    path = tmp_path / "sm.onnx"
    onnx.save(_softmax_model(axis=axis), path)
    result = onnxbridge.convert(path, output=tmp_path / "sm11.onnx", opset=11)
    assert result.report["status"] == "passed"
    assert result.report["hops"][0]["outputs"][0]["max_abs"] < 1e-6


def test_blocking_feature_names_the_node_and_the_opset():
    model = _softmax_model(axis=-1, opset=13)
    model.graph.node.insert(0, helper.make_node("ArgMax", ["x"], ["a"], name="am", select_last_index=1))
    model.graph.output.append(helper.make_tensor_value_info("a", TensorProto.INT64, None))
    with pytest.raises(UnsupportedError, match=r"'am' \(ArgMax\).*select_last_index") as info:
        adapters.adapt(model, 11)
    assert info.value.hint == "keep opset >= 12"
    assert len(adapters.check(model, 11)) == 1 and adapters.check(model, 13) == []


def test_resize_10_upgrade_keeps_asymmetric_coordinates(tmp_path):
    scales = numpy_helper.from_array(np.array([1, 1, 1.7, 1.3], np.float32), "scales")
    graph = helper.make_graph([helper.make_node("Resize", ["x", "scales"], ["y"], mode="nearest", name="up")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scales])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)], ir_version=5), tmp_path / "r.onnx")
    result = onnxbridge.convert(tmp_path / "r.onnx", output=tmp_path / "r13.onnx", opset=13)
    assert result.report["status"] == "passed"  # onnx.version_converter's output differs by 0.89 here


def test_local_functions_survive_adaptation():
    fn = helper.make_function("local", "SqPlusOne", ["a"], ["b"], [
        helper.make_node("Mul", ["a", "a"], ["sq"]),
        helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1.0, np.float32))),
        helper.make_node("Add", ["sq", "one"], ["b"])], [helper.make_opsetid("", 15)])
    graph = helper.make_graph([helper.make_node("SqPlusOne", ["x"], ["y"], domain="local", name="f")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, functions=[fn], ir_version=8,
                              opset_imports=[helper.make_opsetid("", 15), helper.make_opsetid("local", 1)])
    result = onnxbridge.convert(model, opset=18)
    assert result.report["status"] == "passed"
    assert result.model.opset_import[0].version == 18


def test_opset_outside_what_onnx_knows():
    with pytest.raises(UnsupportedError, match="outside"):
        adapters.adapt(_softmax_model(-1), 99)


def test_adapt_command(tmp_path, cli):
    src = tmp_path / "sm.onnx"
    onnx.save(_softmax_model(axis=1), src)
    res = cli("adapt", src, "-o", tmp_path / "sm7.onnx", "--opset", "7", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == 7
    assert [n.op_type for n in onnx.load(tmp_path / "sm7.onnx").graph.node] == ["Transpose", "Softmax", "Transpose"]
    assert cli("-q", "adapt", src, "--opset", "11", "--check").exit_code == 0
    blocked = _softmax_model(axis=-1, opset=13)
    blocked.graph.node.insert(0, helper.make_node("ArgMax", ["x"], ["a"], name="am", select_last_index=1))
    blocked.graph.output.append(helper.make_tensor_value_info("a", TensorProto.INT64, None))
    onnx.save(blocked, tmp_path / "b.onnx")
    res = cli("adapt", tmp_path / "b.onnx", "--opset", "11", "--check", "--report", tmp_path / "check.json")
    assert res.exit_code == 2 and "'am' (ArgMax)" in res.stdout
    rep = check_report(tmp_path / "check.json")
    assert rep["status"] == "blocked" and rep["tool"]["command"] == "check"
    assert len(rep["blockers"]) == 1 and "'am' (ArgMax)" in rep["blockers"][0]
    res = cli("adapt", tmp_path / "b.onnx", "-o", tmp_path / "b11.onnx", "--opset", "11",
              "--report", tmp_path / "b.json")
    assert res.exit_code == 2 and "select_last_index" in res.stderr
    rep = check_report(tmp_path / "b.json")
    assert rep["status"] == "blocked" and "'am' (ArgMax)" in rep["blockers"][0]
    assert not (tmp_path / "b11.onnx").exists()
