"""--dynamic on an ONNX source: a static-batch model made dynamic, validated at a second size; graphs that bake the
size in refused by name (issue 19)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.errors import BadInputError


def _dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.fixture(scope="module")
def static_cnn(tmp_path_factory, models):
    """examples/models.py's CNN exported by torch at batch 1 without --dynamic: every axis fixed."""
    model, (x,) = models.cnn()
    path = tmp_path_factory.mktemp("cnn") / "static.onnx"
    onnxbridge.convert(model, (x[:1],), output=path).raise_for_status()
    assert _dims(onnx.load(path).graph.input[0]) == [1, 3, 32, 32]
    return path


def _save(path, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


@pytest.mark.slow
def test_static_cnn_made_dynamic_runs_at_other_batches(static_cnn, tmp_path):
    result = onnxbridge.convert(static_cnn, output=tmp_path / "dyn.onnx", dynamic=["x:0:batch"])
    rep = result.report
    assert rep["status"] == "passed", rep["hops"]
    assert [s["x"][0] for s in rep["inputs"]["samples"]] == [1, 2]
    hop = rep["hops"][0]
    assert hop["samples"] == 2 and not any("skipped" in n for n in hop["notes"])  # batch 2 really compared
    assert any("opened x:0 (was 1, now 'batch')" in n for n in rep["notes"])
    model = onnx.load(result.path)
    assert _dims(model.graph.input[0]) == ["batch", 3, 32, 32]
    assert _dims(model.graph.output[0]) == ["batch", 4, 64, 64]  # inference lost it at Resize; restored
    # the written model runs at a batch validation never used, and agrees with the static one item by item
    x = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    dyn = ort.InferenceSession(str(result.path)).run(None, {"x": x})[0]
    static = ort.InferenceSession(str(static_cnn))
    want = np.concatenate([static.run(None, {"x": x[i:i + 1]})[0] for i in range(3)])
    np.testing.assert_allclose(dyn, want, rtol=1e-5, atol=1e-5)


def test_range_is_validated_at_its_ends_and_default_label(static_cnn, tmp_path):
    rep = onnxbridge.convert(static_cnn, output=tmp_path / "r.onnx", dynamic=["x:0:batch:1..8"]).report
    assert rep["status"] == "passed" and rep["hops"][0]["samples"] == 3
    assert sorted(s["x"][0] for s in rep["inputs"]["samples"]) == [1, 2, 8]
    result = onnxbridge.convert(static_cnn, output=tmp_path / "n.onnx", dynamic=["x:-4"])  # negative axis
    assert result.report["status"] == "passed"
    assert _dims(onnx.load(result.path).graph.input[0]) == ["x_dim0", 3, 32, 32]


def test_cli_path(static_cnn, tmp_path, cli):
    res = cli("convert", static_cnn, "-o", tmp_path / "dyn.onnx", "--dynamic", "x:0:batch:1..4")
    assert res.exit_code == 0, res.output
    assert _dims(onnx.load(tmp_path / "dyn.onnx").graph.input[0])[0] == "batch"


@pytest.mark.parametrize("axis", ["4", "-5"])
def test_axis_out_of_range_is_exit_2(static_cnn, tmp_path, cli, axis):
    res = cli("convert", static_cnn, "-o", tmp_path / "o.onnx", "--dynamic", f"x:{axis}")
    assert res.exit_code == 2 and "input 'x' has rank 4" in res.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_unknown_name_is_exit_2(static_cnn, tmp_path, cli):
    res = cli("convert", static_cnn, "-o", tmp_path / "o.onnx", "--dynamic", "images:0")
    assert res.exit_code == 2 and "'images'" in res.stderr


def test_reshape_to_fixed_batch_is_refused_naming_it(tmp_path, cli):
    src = _save(tmp_path / "flat.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], [_i64("shape", [1, -1])])
    res = cli("convert", src, "-o", tmp_path / "o.onnx", "--dynamic", "x:0:batch")
    assert res.exit_code == 2
    assert "node 'flat' (Reshape) reshapes to [1, -1], fixing axis 0 (batch)" in res.stderr
    assert "make that Reshape use 0/-1" in res.stderr and not (tmp_path / "o.onnx").exists()
    with pytest.raises(BadInputError, match="'flat' \\(Reshape\\)"):
        onnxbridge.convert(src, output=tmp_path / "o.onnx", dynamic=["x:0"])
    # the same model with -1 where the batch is opens fine
    ok = _save(tmp_path / "ok.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], [_i64("shape", [-1, 12])])
    rep = onnxbridge.convert(ok, output=tmp_path / "ok-dyn.onnx", dynamic=["x:0:batch"]).report
    assert rep["status"] == "passed" and rep["hops"][0]["samples"] == 2


def test_constant_built_from_the_size_is_refused(tmp_path):
    """torch's zeros(1, 8) at a static export: a ConstantOfShape that a Concat meets with the opened axis."""
    nodes = [helper.make_node("ConstantOfShape", ["zshape"], ["z"], name="zeros"),
             helper.make_node("Concat", ["x", "z"], ["y"], axis=1, name="cat")]
    src = _save(tmp_path / "cat.onnx", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], [_i64("zshape", [1, 8])])
    with pytest.raises(BadInputError, match="'cat' \\(Concat\\) meets batch with 'z' \\(made by ConstantOfShape"):
        onnxbridge.convert(src, output=tmp_path / "o.onnx", dynamic=["x:0:batch"])


def test_flatten_at_axis_0_is_refused(tmp_path):
    src = _save(tmp_path / "f.onnx", [helper.make_node("Flatten", ["x"], ["y"], axis=0, name="fl")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])])
    with pytest.raises(BadInputError, match="'fl' \\(Flatten\\) flattens with axis=0"):
        onnxbridge.convert(src, output=tmp_path / "o.onnx", dynamic=["x:0"])


def test_size_baked_where_no_static_check_sees_it_fails_validation_honestly(tmp_path):
    """Reshape to [2, -1] at batch 1 runs at batch 2 but mixes the items: validation at the second size fails on the
    numbers (a report, not a crash)."""
    src = _save(tmp_path / "mix.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"], name="mix")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [_i64("shape", [2, -1])])
    rep = onnxbridge.convert(src, output=tmp_path / "o.onnx", dynamic=["x:0:batch"]).report
    assert rep["status"] == "failed" and not rep["hops"][0]["passed"]
    assert rep["hops"][0]["outputs"][0]["passed"] is False


def test_already_dynamic_axis_is_kept(tmp_path):
    from tests.helpers.models import tiny_onnx

    src = tiny_onnx(tmp_path / "tiny.onnx")
    result = onnxbridge.convert(src, output=tmp_path / "o.onnx", dynamic=["x:0:n:1..5"])
    assert result.report["status"] == "passed"
    assert max(s["x"][0] for s in result.report["inputs"]["samples"]) == 5


def test_output_not_following_the_axis_is_warned_not_passed_silently(tmp_path):
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="total")]
    src = _save(tmp_path / "sum.onnx", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [_i64("axes", [0])])
    rep = onnxbridge.convert(src, output=tmp_path / "o.onnx", dynamic=["x:0:batch"]).report
    assert any("'y' do not follow the opened axis" in w and "validated only at its old size" in w
               for w in rep["warnings"])


def test_tensorrt_profile_covers_the_requested_range(static_cnn):
    """The engine a dynamic TensorRT build makes gets its profile from the frontend's axes: min/max from the range,
    opt the sample's size (planning only; building needs a GPU)."""
    from onnxbridge.backends.tensorrt import profiles
    from onnxbridge.frontends import onnxfile

    from onnxbridge.plugins import BuildContext
    from onnxbridge.specs import InputSpec

    src = onnxfile.load(static_cnn, dynamic=InputSpec.parse((), ["x:-4:batch:2..8"]).dynamic)
    assert [(d.name, d.axis, d.min, d.max) for d in src.dynamic] == [("x", 0, 2, 8)]
    context = BuildContext(inputs=InputSpec().with_dynamic(src.dynamic),
                           sample_shapes={k: tuple(v.shape) for k, v in src.sample.feeds.items()})
    plan = profiles.plan([("x", [-1, 3, 32, 32])], {}, context)["x"]
    assert (plan["min"][0], plan["opt"][0], plan["max"][0]) == (1, 1, 8)


def test_output_name_is_refused_and_input_shape_may_set_the_opened_axis(static_cnn, tmp_path, cli):
    res = cli("convert", static_cnn, "-o", tmp_path / "o.onnx", "--dynamic", "output:0")
    assert res.exit_code == 2 and "names output(s) 'output' of an ONNX source" in res.stderr
    result = onnxbridge.convert(static_cnn, output=tmp_path / "b4.onnx", dynamic=["x:0:batch"],
                                input_shapes=["x:4,3,32,32"])
    assert result.report["status"] == "passed" and result.report["hops"][0]["samples"] == 2
    assert [s["x"][0] for s in result.report["inputs"]["samples"]] == [4, 5]  # 5: the last slice padded
    res = cli("convert", static_cnn, "-o", tmp_path / "o.onnx", "--input-shape", "x:4,3,32,32")
    assert res.exit_code == 2 and "does not fit" in res.stderr  # without --dynamic the batch stays fixed
