"""Core ML backend: ONNX -> MIL -> .mlpackage, checked on the host by evaluating the saved MIL program
against onnxruntime (per op family, pitfalls included) and end to end from PyTorch."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.conftest import EXAMPLES, assert_one_line_error, check_report

pytest.importorskip("coremltools")
FACTORY = f"{EXAMPLES}:cnn"
RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    # ONNX pads are [x1_begin, x2_begin, x1_end, x2_end]; MIL wants them interleaved
    "conv_asymmetric_pads": _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[0, 1, 2, 0], strides=[2, 1])],
                                   [("x", [1, 3, 9, 8])], ["y"], [("w", _w(4, 3, 3, 3)), ("b", _w(4))]),
    "conv_groups_dilations": _model([helper.make_node("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 2],
                                                      pads=[2, 2, 2, 2])],
                                    [("x", [2, 4, 10, 10])], ["y"], [("w", _w(6, 2, 3, 3))]),
    "conv_same_upper": _model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER")],
                              [("x", [1, 2, 9, 9])], ["y"], [("w", _w(3, 2, 4, 4))]),
    "pools": _model([helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                     helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                      count_include_pad=0),
                     helper.make_node("GlobalAveragePool", ["x"], ["g"])], [("x", [1, 2, 7, 7])], ["m", "a", "g"]),
    "gemm_bn_softmax": _model([helper.make_node("Gemm", ["x", "w", "c"], ["h"], transB=1),
                               helper.make_node("Reshape", ["h", "shape"], ["r"]),
                               helper.make_node("BatchNormalization", ["r", "s", "bb", "m", "v"], ["n"]),
                               helper.make_node("Softmax", ["n"], ["y"], axis=1)],
                              [("x", [3, 5])], ["y"],
                              [("w", _w(6, 5)), ("c", _w(6)), ("shape", np.array([0, 6, 1], np.float32)),
                               ("s", _w(6)), ("bb", _w(6)), ("m", _w(6)), ("v", np.abs(_w(6)) + 0.5)]),
    "shapes": _model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),
                      helper.make_node("Concat", ["t", "t"], ["c"], axis=3),
                      helper.make_node("Flatten", ["c"], ["y"], axis=2)], [("x", [2, 3, 4, 5])], ["y"]),
    "resize_bilinear_half_pixel": _model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear")],
                                         [("x", [1, 2, 5, 6])], ["y"], [("sc", np.array([1, 1, 2, 2]))]),
    "resize_bilinear_align_corners": _model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear",
                                                              coordinate_transformation_mode="align_corners")],
                                            [("x", [1, 2, 5, 6])], ["y"], [("sc", np.array([1, 1, 3, 2]))]),
    "resize_nearest_2x": _model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                                                  coordinate_transformation_mode="asymmetric")],
                                [("x", [1, 2, 5, 6])], ["y"], [("sc", np.array([1, 1, 2, 2]))]),
    "elementwise": _model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Tanh", ["x"], ["t"]),
                           helper.make_node("Mul", ["s", "t"], ["m"]), helper.make_node("Sub", ["m", "k"], ["d"]),
                           helper.make_node("Div", ["d", "k"], ["q"]), helper.make_node("LeakyRelu", ["q"], ["y"])],
                          [("x", [2, 3, 4])], ["y"], [("k", np.array([0.5, 2.0, 3.0, 4.0]))]),
    "squeeze_reduce_clip": _model([helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
                                   helper.make_node("ReduceSum", ["u", "ax3"], ["m"], keepdims=1),
                                   helper.make_node("Squeeze", ["m", "ax0"], ["s"]),
                                   helper.make_node("Clip", ["s", "lo", "hi"], ["y"])],
                                  [("x", [2, 3, 4])], ["y"], [("ax0", np.array([0])), ("ax3", np.array([-1])),
                                                              ("lo", np.array(-0.2)), ("hi", np.array(0.3))]),
    "activations": _model([helper.make_node("HardSigmoid", ["x"], ["a"], alpha=0.3),
                           helper.make_node("HardSwish", ["x"], ["b"]), helper.make_node("Elu", ["x"], ["c"]),
                           helper.make_node("Softplus", ["x"], ["d"]), helper.make_node("PRelu", ["x", "sl"], ["e"])],
                          [("x", [2, 3, 4])], ["a", "b", "c", "d", "e"], [("sl", _w(3, 1))]),
    "layer_norm_gather_slice_pad": _model(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
         helper.make_node("Gather", ["n", "idx"], ["t"], axis=1),
         helper.make_node("Slice", ["t", "st", "en", "axs"], ["sl"]),
         helper.make_node("Pad", ["sl", "pads"], ["y"], mode="reflect")],
        [("x", [2, 5, 6])], ["y"],
        [("g", _w(6)), ("b", _w(6)), ("idx", np.array([-1, 0, 2])), ("st", np.array([1])),
         ("en", np.array([2 ** 62])), ("axs", np.array([-1])), ("pads", np.array([0, 0, 1, 0, 0, 2]))]),
    "sum_lrn_softmax11": _model([helper.make_node("Sum", ["x", "x", "k4"], ["s"]),
                                 helper.make_node("LRN", ["s"], ["l"], size=3, alpha=1e-3, beta=0.6, bias=1.5),
                                 helper.make_node("Softmax", ["l"], ["y"], axis=1)],
                                [("x", [2, 4, 3, 3])], ["y"], [("k4", _w(3))], opset=11),
}
for _name, _inputs in {"squeeze_reduce_clip": ("ax0", "ax3"), "layer_norm_gather_slice_pad": ("idx", "st", "en", "axs",
                                                                                             "pads")}.items():
    for _t in CASES[_name].graph.initializer:  # indices, axes, starts/ends and pads are int64 in ONNX
        if _t.name in _inputs:
            _t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(_t).astype(np.int64), _t.name))
# Reshape's shape must be int64
CASES["gemm_bn_softmax"].graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array([0, 6, 1], np.int64), "shape"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_families_match_onnxruntime(name, tmp_path):
    src = tmp_path / f"{name}.onnx"
    onnx.save(CASES[name], src)
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / f"{name}.mlpackage", report=tmp_path / "r.json").report
    check_report(tmp_path / "r.json")
    coreml = rep["hops"][-1]
    assert (coreml["from"], coreml["to"]) == ("onnx", "coreml")
    assert rep["status"] == "passed", [(o["name"], o.get("max_abs"), o.get("error")) for o in coreml["outputs"]] + \
        coreml["errors"]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_torch_to_coreml_in_one_command(cli, tmp_path, precision):
    import coremltools as ct

    out = tmp_path / "cnn.mlpackage"
    res = cli("convert", FACTORY, "--to", "coreml", "-o", out, "--opset", "17", "--precision", precision,
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "passed"),
                                                                      ("onnx", "coreml", "passed")]
    assert rep["artifact"]["format"] == "coreml" and rep["artifact"]["backend"]["compute_precision"] == precision
    spec = ct.models.MLModel(str(out), skip_model_load=True).get_spec()
    assert [i.name for i in spec.description.input] == ["x"]
    assert list(spec.description.input[0].type.multiArrayType.shape) == [2, 3, 32, 32]
    assert [o.name for o in spec.description.output] == ["output"]
    info = cli("inspect", out, "--json")
    assert info.exit_code == 0 and '"conv"' in info.stdout


def test_transformer_shape_chains_are_folded(models, tmp_path):
    """torch's export of an encoder block computes reshape targets with Shape/Gather/Concat chains; with static
    input shapes they fold to constants before lowering."""
    model, sample = models.transformer()
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "t.mlpackage", opset=17).report
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "passed"),
                                                                      ("onnx", "coreml", "passed")]
    assert {"layer_norm", "softmax", "matmul"} <= set(rep["artifact"]["backend"]["ops"])


def test_lstm_gate_order(models, tmp_path, monkeypatch):
    """ONNX gates are [i, o, f, c], MIL's [i, f, o, c]: the torch LSTM passes, and without the reordering the
    Core ML hop fails."""
    from onnxbridge.backends.coreml import lower

    model, sample = models.lstm()
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "l.mlpackage", opset=17).report
    assert rep["status"] == "passed" and "lstm" in rep["artifact"]["backend"]["ops"]
    monkeypatch.setattr(lower, "_ifoc", lambda w: np.asarray(w, np.float32))
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "bad.mlpackage", opset=17).report
    assert rep["status"] == "failed" and [h["status"] for h in rep["hops"]] == ["passed", "failed"]


def test_a_wrong_lowering_is_caught(tmp_path, monkeypatch):
    """Swap the pads order back to ONNX's (the classic mistake): the Core ML hop fails."""
    from onnxbridge.backends.coreml import lower

    monkeypatch.setattr(lower, "_mil_pads", lambda pads, spatial: list(pads or [0] * (2 * spatial)))
    src = tmp_path / "c.onnx"
    onnx.save(CASES["conv_asymmetric_pads"], src)
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "c.mlpackage").report
    assert rep["status"] == "failed" and rep["hops"][-1]["to"] == "coreml"


def test_bad_inputs(cli, tmp_path):
    src = tmp_path / "topk.onnx"
    onnx.save(_model([helper.make_node("Hardmax", ["x"], ["y"], name="hm")], [("x", [2, 3])], ["y"]), src)
    assert_one_line_error(cli("convert", src, "--to", "coreml", "-o", tmp_path / "a.mlpackage"), 2,
                          "node 'hm' (Hardmax)", "no Core ML lowering")
    assert_one_line_error(cli("convert", FACTORY, "--to", "coreml", "-o", tmp_path / "b.mlpackage", "--dynamic", "x:0"),
                          2, "symbolic shape")
    assert_one_line_error(cli("convert", FACTORY, "--to", "coreml", "-o", tmp_path / "c.mlpackage", "--target", "iOS9"),
                          2, "unknown Core ML target")
    assert_one_line_error(cli("convert", FACTORY, "--to", "coreml", "-o", tmp_path / "d.onnx"), 2, ".mlpackage")
    assert_one_line_error(cli("convert", FACTORY, "-o", tmp_path / "e.onnx", "--target", "iOS17"), 2, "--target")
    assert not any(p.suffix == ".mlpackage" for p in tmp_path.iterdir())


def test_importing_the_backend_keeps_tensorflow_out():
    import subprocess
    import sys

    code = ("import sys; from onnxbridge.backends.coreml.ctimport import import_ct; import_ct();"
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-500:]


LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT = sorted(p.stem for p in LIGHT_DIR.glob("light_*.onnx"))


@pytest.mark.skipif(not LIGHT, reason="this onnx wheel ships no light models")
@pytest.mark.parametrize("name", LIGHT)
def test_light_zoo_converts_and_matches(name, tmp_path):
    import coremltools as ct

    src = LIGHT_DIR / f"{name}.onnx"
    out = tmp_path / f"{name}.mlpackage"
    rep = onnxbridge.convert(src, to="coreml", output=out).report
    assert rep["status"] == "passed" and rep["hops"][-1]["to"] == "coreml", rep["hops"][-1]
    spec = ct.models.MLModel(str(out), skip_model_load=True).get_spec()
    model = onnx.load(src)
    renamed = rep["artifact"]["backend"]["renamed"]  # names that are not identifiers ('gpu_0/data_0') are reported

    def names(values):
        return [renamed.get(v.name, v.name) for v in values if v.name not in {t.name for t in model.graph.initializer}]
    assert [i.name for i in spec.description.input] == names(model.graph.input)
    assert [o.name for o in spec.description.output] == names(model.graph.output)
    assert [list(i.type.multiArrayType.shape) for i in spec.description.input] == \
        [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
         if i.name not in {t.name for t in model.graph.initializer}]
