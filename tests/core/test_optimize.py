"""Graph optimization (``--optimize``): the example models keep their numbers, names and dynamic batch; what was
removed is recorded; external weights stay external; non-standard domains and unknown levels are refused."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.errors import BadInputError, UnsupportedError
from onnxbridge.optimize import STANDARD_DOMAINS, optimize_model
from tests.helpers.extras import requires


def _run(model: onnx.ModelProto | str, feeds: dict) -> list[np.ndarray]:
    src = model if isinstance(model, str) else model.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # compare the graphs as written
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _export(module, args, exporter: str) -> onnx.ModelProto:
    import torch

    f = io.BytesIO()
    if exporter == "dynamo":
        batch = torch.export.Dim("batch", min=1, max=64)
        onnx_program = torch.onnx.export(module, args, dynamo=True, opset_version=18, input_names=["x"],
                                         output_names=["y"], dynamic_shapes=({0: batch},))
        return onnx_program.model_proto
    torch.onnx.export(module, args, f, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return onnx.load_from_string(f.getvalue())


def _dims(values) -> dict[str, list]:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


@pytest.mark.parametrize("name,exporter", [("cnn", "torchscript"), ("lstm", "torchscript"),
                                           ("transformer", "torchscript"), ("transformer", "dynamo")])
@pytest.mark.fast_cases("lstm-torchscript")
def test_example_model_keeps_outputs_names_and_dynamic_batch(models, name, exporter):
    module, (x,) = getattr(models, name)()
    raw = _export(module, (x,), exporter)
    optimized, record = optimize_model(raw)

    onnx.checker.check_model(optimized, full_check=True)
    assert [i.name for i in optimized.graph.input] == ["x"] and [o.name for o in optimized.graph.output] == ["y"]
    assert _dims(optimized.graph.input) == _dims(raw.graph.input)
    assert _dims(optimized.graph.output) == _dims(raw.graph.output)
    assert _dims(optimized.graph.input)["x"][0] == "batch"
    assert list(optimized.opset_import) == list(raw.opset_import) or \
        {o.domain: o.version for o in optimized.opset_import}.items() <= {o.domain: o.version for o in raw.opset_import}.items()
    assert all(n.domain in STANDARD_DOMAINS for n in optimized.graph.node)
    assert record["before"] == len(raw.graph.node) and record["after"] == len(optimized.graph.node)
    assert record["after"] <= record["before"] and record["library"].startswith("onnxscript ")

    rng = np.random.default_rng(1)
    for batch in (x.shape[0], x.shape[0] + 3):  # the sample's batch, then another: the batch axis stayed dynamic
        feeds = {"x": rng.standard_normal((batch, *x.shape[1:])).astype(np.float32)}
        want, got = _run(raw, feeds), _run(optimized, feeds)
        assert got[0].shape == want[0].shape and got[0].shape[0] == batch
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_torchscript_transformer_loses_its_shape_arithmetic(models):
    """The TorchScript export computes Reshape shapes from Shape -> Gather -> Concat at run time; the optimizer
    proves them from symbolic shapes, and the record says so."""
    module, args = models.transformer()
    raw = _export(module, args, "torchscript")
    optimized, record = optimize_model(raw)
    counts = {op: sum(n.op_type == op for n in optimized.graph.node) for op in ("Shape", "Concat", "Constant")}
    assert record["removed"]["Constant"] > 0 and record["reshape_shapes_materialized"] > 0
    assert counts["Constant"] == 0 and counts["Shape"] < sum(n.op_type == "Shape" for n in raw.graph.node)


def _identity_constant_graph() -> onnx.ModelProto:
    """y = Identity(x) + Constant(c); z = Reshape(y, concat(shape(y)[0:2], [2, 3])): one Identity, one Constant
    and one Reshape shape computed at run time over two dynamic axes."""
    c = numpy_helper.from_array(np.arange(6, dtype=np.float32), "c")
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Constant", [], ["cv"], value=c),
        helper.make_node("Add", ["xi", "cv"], ["y"]),
        helper.make_node("Shape", ["y"], ["s"], start=0, end=2),
        helper.make_node("Concat", ["s", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["y", "shape"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 6])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", "seq", 2, 3])],
        [numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "tail")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_identity_and_constant_removal_is_recorded():
    raw = _identity_constant_graph()
    optimized, record = optimize_model(raw)
    assert record["removed"] == {"Concat": 1, "Constant": 1, "Identity": 1, "Shape": 1}
    assert record["reshape_shapes_materialized"] == 1 and record["added"] == {}
    assert [n.op_type for n in optimized.graph.node] == ["Add", "Reshape"]
    for batch, seq in ((1, 4), (5, 2)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, 6)).astype(np.float32)
        np.testing.assert_array_equal(_run(optimized, {"x": x})[0], _run(raw, {"x": x})[0])


def test_basic_level_folds_without_rewriting_shapes():
    optimized, record = optimize_model(_identity_constant_graph(), level="basic")
    assert record["level"] == "basic" and record["reshape_shapes_materialized"] == 0
    assert {"Identity", "Constant"} <= set(record["removed"])
    assert "Shape" in {n.op_type for n in optimized.graph.node}


def test_external_weights_stay_external(tmp_path):
    """A model whose weights live in a side file is optimized from the reference: a weight too big to fold
    (over 8192 elements) still points at the same file, and the result runs the same from there."""
    w = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["wi"]), helper.make_node("MatMul", ["x", "wi"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "raw.onnx", save_as_external_data=True, location="raw.data", size_threshold=0)
    loaded = onnx.load(tmp_path / "raw.onnx", load_external_data=False)

    optimized, record = optimize_model(loaded, base_dir=tmp_path)
    (weight,) = optimized.graph.initializer
    assert weight.data_location == TensorProto.EXTERNAL and not weight.raw_data
    assert {e.key: e.value for e in weight.external_data}["location"] == "raw.data"
    assert record["removed"] == {"Identity": 1}
    (tmp_path / "opt.onnx").write_bytes(optimized.SerializeToString())
    x = np.ones((3, 128), np.float32)
    np.testing.assert_allclose(_run(str(tmp_path / "opt.onnx"), {"x": x})[0], x @ w, rtol=1e-5)


def test_refuses_unknown_level_and_foreign_domains():
    with pytest.raises(BadInputError, match="level 'fast'"):
        optimize_model(_identity_constant_graph(), level="fast")
    graph = helper.make_graph([helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedError, match="com.microsoft"):
        optimize_model(model)


@pytest.mark.parametrize("tail", ["Erf", "Tanh"])
def test_gelu_half_moves_onto_x_bit_identically_and_onnxruntime_fuses_it(tmp_path, tail):
    """The dynamo exporter writes GELU as x * (0.5 * (1 + t)); the optimizer writes (x * 0.5) * (1 + t), the same
    bits, which onnxruntime fuses into one kernel at load."""
    if tail == "Erf":
        head = [helper.make_node("Div", ["x", "sqrt2"], ["u"]), helper.make_node("Erf", ["u"], ["t"])]
    else:
        head = [helper.make_node("Pow", ["x", "three"], ["p"]), helper.make_node("Mul", ["c", "p"], ["cp"]),
                helper.make_node("Add", ["x", "cp"], ["i"]), helper.make_node("Mul", ["k", "i"], ["u"]),
                helper.make_node("Tanh", ["u"], ["t"])]
    nodes = [*head, helper.make_node("Add", ["t", "one"], ["a"]), helper.make_node("Mul", ["half", "a"], ["h"]),
             helper.make_node("Mul", ["x", "h"], ["g"]), helper.make_node("Neg", ["g"], ["y"])]  # a fused
    # kernel's output may not be a graph output
    consts = {"sqrt2": 2 ** 0.5, "three": 3.0, "c": 0.044715, "k": 0.7978846, "one": 1.0, "half": 0.5}
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
                              [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()])
    raw = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    optimized, record = optimize_model(raw)
    assert record["gelu_half_moved"] == 1
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32) * 4
    np.testing.assert_array_equal(_run(optimized, {"x": x})[0], _run(raw, {"x": x})[0])

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(optimized.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert tail not in {n.op_type for n in onnx.load(tmp_path / "fused.onnx").graph.node}


def test_big_external_weights_are_never_read(tmp_path):
    """Weights over the folding limit are referenced, not read: a model whose weight file does not exist is
    optimized all the same (how a model over 2 GB goes through without a second copy of its weights)."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], vals=[])
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "absent.data"), ("offset", "0"), ("length", str(256 * 256 * 4))):
        w.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["wi"]), helper.make_node("MatMul", ["x", "wi"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    optimized, record = optimize_model(model, base_dir=tmp_path)
    (weight,) = optimized.graph.initializer
    assert weight.data_location == TensorProto.EXTERNAL
    assert {e.key: e.value for e in weight.external_data}["location"] == "absent.data"
    assert [n.op_type for n in optimized.graph.node] == ["MatMul"] and record["removed"] == {"Identity": 1}


def test_rewrites_of_one_tensor_keep_each_their_own_initializer():
    """Two Flattens of one tensor (BART's padding mask, flattened by its encoder and its decoder): onnxscript turns
    each into a Reshape whose shape initializer is named after the input, and its rewriter then drops the first of
    the two same-named initializers from the graph. Each Reshape keeps its own shape here, in a valid graph."""
    nodes = [helper.make_node("Flatten", ["x"], ["f1"], axis=1), helper.make_node("Flatten", ["x"], ["f2"], axis=2),
             helper.make_node("Neg", ["f1"], ["y1"]), helper.make_node("Neg", ["f2"], ["y2"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [2, 12]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [6, 4])])
    raw = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    optimized, record = optimize_model(raw)
    onnx.checker.check_model(optimized, full_check=True)
    assert record["removed"] == {"Flatten": 2} and record["added"] == {"Reshape": 2}
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    for got, want in zip(_run(optimized, {"x": x}), _run(raw, {"x": x})):
        np.testing.assert_array_equal(got, want)


# --optimize in convert: its own hop, the record in the report -----------------------------------------------------
@pytest.mark.parametrize("name", ["cnn", "lstm", "transformer"])
@pytest.mark.fast_cases("lstm")
@requires("torch")
def test_convert_optimize_is_a_hop_of_its_own(cli, tmp_path, name):
    import json

    res = cli("convert", f"examples/models.py:{name}", "-o", tmp_path / "m.onnx", "--opset", "17",
              "--dynamic", "x:0:batch", "--optimize", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["status"] == "passed"
    assert [h["to"] for h in rep["hops"]][-1] == "onnx@17:optimized"
    record = rep["artifact"]["optimization"]
    assert record["level"] == "default" and record["after"] <= record["before"]
    written = onnx.load(tmp_path / "m.onnx")
    assert len(written.graph.node) == record["after"]  # the record describes the written graph
    assert written.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.slow
@requires("torch")
def test_an_optimizer_that_changes_numbers_is_blamed(tmp_path, monkeypatch):
    """A (planted) optimizer bug: the first hop fails on the written graph, and the optimizer's own hop says it
    introduced the difference."""
    import onnxbridge
    import onnxbridge.optimize as optimize

    real = optimize.optimize_model

    def broken(model, **kwargs):
        out, record = real(model, **kwargs)
        y = out.graph.output[0].name  # scaled by 1.1 (the weights are external here: the output is what's at hand)
        last = next(n for n in out.graph.node if y in n.output)
        last.output[list(last.output).index(y)] = "pre_planted"
        out.graph.initializer.append(numpy_helper.from_array(np.array(1.1, np.float32), "planted"))
        out.graph.node.append(helper.make_node("Mul", ["pre_planted", "planted"], [y]))
        return out, record

    monkeypatch.setattr(optimize, "optimize_model", broken)
    result = onnxbridge.convert("examples/models.py:cnn", output=tmp_path / "m.onnx", opset=17, optimize="basic")
    rep = result.report
    assert rep["status"] == "failed" and rep["introduced_by"] == "onnx@17 -> onnx@17:optimized"
    assert rep["hops"][0]["status"] == "failed" and rep["hops"][-1]["status"] == "failed"


@pytest.mark.slow
@requires("torch")
def test_optimize_without_validation_and_bad_levels(cli, tmp_path):
    import onnxbridge

    result = onnxbridge.convert("examples/models.py:cnn", output=tmp_path / "m.onnx", opset=17, optimize=True,
                                validate=False)
    assert result.report["hops"] == [] and result.report["artifact"]["optimization"]["level"] == "default"
    with pytest.raises(BadInputError, match="optimize"):
        onnxbridge.convert("examples/models.py:cnn", output=tmp_path / "n.onnx", optimize="fast")
    res = cli("convert", "examples/models.py:cnn", "-o", tmp_path / "n.onnx", "--optimize=fast")
    assert res.exit_code == 2 and not (tmp_path / "n.onnx").exists()
