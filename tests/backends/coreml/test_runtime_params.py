"""Core ML lowerings whose parameters come at run time (weights, statistics, shapes, pads as graph inputs or
computed by other nodes), and pooling as onnxruntime counts its windows: each small model converted to Core ML,
its saved MIL program run by the host evaluator and compared with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.errors import UnsupportedError

from tests.helpers.extras import require

require("coremltools")

RNG = np.random.default_rng(7)
F, I64, U8 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8


def _model(nodes, inputs, outputs, consts=(), opset=19):
    """Inputs and outputs ``(name, elem_type, shape)`` (a str dim is flexible; outputs' shapes None), ``consts``
    initializers ``(name, array)``."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _convert(model: onnx.ModelProto, feeds: dict, tmp_path, **kw) -> dict:
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs=feeds, **kw).report
    coreml = rep["hops"][-1]
    assert (coreml["from"], coreml["to"]) == ("onnx", "coreml")
    assert rep["status"] == "passed", [(o["name"], o.get("max_abs"), o.get("error")) for o in coreml["outputs"]] + \
        coreml["errors"]
    return rep


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.slow
def test_pools_count_windows_as_onnxruntime(tmp_path):
    """ceil_mode drops a last window that starts past the input (MIL keeps it on unpadded dims), uint8 max pooling,
    average pooling with dilations (by taps, divided by onnxruntime's counts with and without the pads), and
    MaxPool's Indices output (row- and column-major)."""
    nodes = [helper.make_node("MaxPool", ["x"], ["ceil"], kernel_shape=[1, 2], strides=[3, 3], ceil_mode=1),
             helper.make_node("MaxPool", ["u"], ["umax"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["dil_in"], kernel_shape=[2, 3], dilations=[2, 2],
                              pads=[1, 0, 1, 2], strides=[2, 1], ceil_mode=1, count_include_pad=1),
             helper.make_node("AveragePool", ["x"], ["dil_ex"], kernel_shape=[3, 2], dilations=[1, 2],
                              pads=[1, 1, 1, 1], strides=[2, 2], ceil_mode=1),
             helper.make_node("AveragePool", ["x"], ["ceil_ex"], kernel_shape=[2, 2], pads=[0, 1, 1, 0],
                              strides=[2, 2], ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["m1", "i1"], kernel_shape=[3, 2], dilations=[1, 2], pads=[1, 0, 1, 1],
                              strides=[2, 1], ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["m2", "i2"], kernel_shape=[2, 3], auto_pad="SAME_UPPER",
                              strides=[2, 2], storage_order=1)]
    outputs = [("ceil", F, None), ("umax", U8, None), ("dil_in", F, None), ("dil_ex", F, None), ("ceil_ex", F, None),
               ("m1", F, None), ("i1", I64, None), ("m2", F, None), ("i2", I64, None)]
    model = _model(nodes, [("x", F, [1, 2, 7, 7]), ("u", U8, [1, 1, 5, 5])], outputs)
    rep = _convert(model, {"x": _x(1, 2, 7, 7), "u": RNG.integers(0, 256, (1, 1, 5, 5)).astype(np.uint8)}, tmp_path)
    shapes = {o["name"]: o["shape"] for o in rep["hops"][-1]["outputs"]}
    assert shapes["ceil"] == [1, 2, 3, 3]  # a 4th window would start at 9 > 6


def test_layer_norm_with_run_time_scale_and_statistics(tmp_path):
    """Scale and bias from graph inputs, a middle axis, and the Mean and InvStdDev outputs."""
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1, epsilon=1e-3)
    model = _model([node], [("x", F, [2, 3, 4]), ("s", F, [3, 4]), ("b", F, [4])],
                   [("y", F, None), ("mean", F, None), ("inv", F, None)])
    rep = _convert(model, {"x": _x(2, 3, 4), "s": _x(3, 4), "b": _x(4)}, tmp_path)
    assert {o["name"]: o["shape"] for o in rep["hops"][-1]["outputs"]}["inv"] == [2, 1, 1]


@pytest.mark.slow
def test_conv_and_conv_transpose_with_run_time_weights(tmp_path):
    """Conv with a run-time weight, dilations and bias; ConvTranspose with a run-time weight (as a conv over the
    spread input), with strides, groups, dilations, output_padding, output_shape and auto_pad; and a constant
    weight with output_shape."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], dilations=[2, 1], pads=[1, 0, 2, 1], strides=[1, 2]),
             helper.make_node("ConvTranspose", ["x", "tw", "tb"], ["t"], strides=[2, 3], dilations=[1, 2],
                              pads=[1, 0, 0, 2], output_padding=[1, 0], group=2),
             helper.make_node("ConvTranspose", ["x", "tw"], ["shaped"], strides=[2, 2], output_shape=[12, 11],
                              group=2),
             helper.make_node("ConvTranspose", ["x", "tw"], ["same"], strides=[2, 1], auto_pad="SAME_UPPER", group=2),
             helper.make_node("ConvTranspose", ["x", "cw"], ["const"], strides=[2, 2], output_shape=[11, 12])]
    model = _model(nodes, [("x", F, [1, 4, 5, 6]), ("w", F, [3, 4, 2, 3]), ("b", F, [3]), ("tw", F, [4, 3, 3, 2]),
                           ("tb", F, [6])], [(n, F, None) for n in ("c", "t", "shaped", "same", "const")],
                   [("cw", _x(4, 2, 2, 3))])
    feeds = {"x": _x(1, 4, 5, 6), "w": _x(3, 4, 2, 3), "b": _x(3), "tw": _x(4, 3, 3, 2), "tb": _x(6)}
    rep = _convert(model, feeds, tmp_path)
    shapes = {o["name"]: o["shape"] for o in rep["hops"][-1]["outputs"]}
    assert shapes["shaped"] == [1, 6, 12, 11] and shapes["const"] == [1, 2, 11, 12]


def test_a_run_time_transposed_weight_over_flexible_dims_is_refused(tmp_path):
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2])
    model = _model([node], [("x", F, [1, 2, "n"]), ("w", F, [2, 3, 3])], [("y", F, None)])
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    with pytest.raises(UnsupportedError, match=r"ConvTranspose.*run-time weight over flexible sizes"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs={"x": _x(1, 2, 4),
                                                                                       "w": _x(2, 3, 3)})


@pytest.mark.slow
def test_normalizations_with_run_time_statistics(tmp_path):
    """BatchNormalization with run-time statistics, in training mode (batch statistics, running outputs), and
    InstanceNormalization with a run-time scale and bias at ranks 4 and 5."""
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], epsilon=1e-2),
             helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["tr", "rm", "rv"], training_mode=1,
                              momentum=0.8),
             helper.make_node("InstanceNormalization", ["x", "s", "b"], ["in4"]),
             helper.make_node("InstanceNormalization", ["x5", "s", "b"], ["in5"], epsilon=1e-3)]
    model = _model(nodes, [("x", F, [2, 3, 4, 5]), ("x5", F, [2, 3, 2, 3, 2])] + [(n, F, [3]) for n in "sbmv"],
                   [(n, F, None) for n in ("bn", "tr", "rm", "rv", "in4", "in5")])
    feeds = {"x": _x(2, 3, 4, 5), "x5": _x(2, 3, 2, 3, 2), "s": _x(3), "b": _x(3), "m": _x(3),
             "v": np.abs(_x(3)) + 0.5}
    _convert(model, feeds, tmp_path)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.slow
def test_shapes_pads_repeats_and_bounds_from_run_time_values(precision, tmp_path):
    """Reshape to a run-time shape (0 copies, -1 infers), Pad by run-time pads (negative ones crop) with a run-time
    constant value, on int64 data (edge and constant modes) and in wrap mode (also by constant pads), Tile by
    run-time repeats, Slice with run-time starts/ends (constant axes, a negative step), Trilu with a k computed by
    other nodes. Integers stay exact in fp16 compute too."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Pad", ["x", "pads", "value"], ["p"]),
             helper.make_node("Pad", ["i", "ipads"], ["e"], mode="edge"),
             helper.make_node("Pad", ["i", "ipads", "ival"], ["c"]),
             helper.make_node("Pad", ["x", "pads"], ["w"], mode="wrap"),
             helper.make_node("Pad", ["x", "cpads"], ["cw"], mode="wrap"),
             helper.make_node("Tile", ["x", "reps"], ["t"]),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("ReduceMax", ["i"], ["kk"], keepdims=0),
             helper.make_node("Sub", ["kk", "five"], ["k"]),
             helper.make_node("Trilu", ["x", "k"], ["u"]), helper.make_node("Trilu", ["i", "k"], ["l"], upper=0)]
    inputs = [("x", F, [2, 3, 4]), ("shape", I64, [3]), ("pads", I64, [6]), ("value", F, [1]),
              ("i", I64, [3, 4]), ("ipads", I64, [4]), ("reps", I64, [3]), ("starts", I64, [2]), ("ends", I64, [2])]
    outputs = [(n, F, None) for n in ("r", "p", "t", "s", "u", "w", "cw")] + [(n, I64, None) for n in "ecl"]
    model = _model(nodes, inputs, outputs, [("axes", np.array([2, -2], np.int64)), ("steps", np.array([-1, 2],
                                                                                                   np.int64)),
                                            ("five", np.array(5, np.int64)),
                                            ("ival", np.array(-123456789, np.int64)),
                                            ("cpads", np.array([0, -1, 5, 1, 0, -2], np.int64))])
    feeds = {"x": _x(2, 3, 4), "shape": np.array([0, -1, 2], np.int64), "pads": np.array([1, 0, -1, 0, 2, 1]),
             "value": np.array([2.5], np.float32), "i": np.array([[-70000, 3, 2**31 - 1, 0], [5, -1, 6, 7],
                                                                   [1, 2, 3, 4]]),
             "ipads": np.array([1, 2, 0, 1]), "reps": np.array([1, 2, 1]), "starts": np.array([-1, -9]),
             "ends": np.array([-100, 3])}
    rep = _convert(model, feeds, tmp_path, precision=precision)
    shapes = {o["name"]: o["shape"] for o in rep["hops"][-1]["outputs"]}
    assert shapes["r"] == [2, 6, 2] and shapes["p"] == [3, 5, 4] and shapes["s"] == [2, 2, 4]
    assert shapes["w"] == [3, 5, 4] and shapes["cw"] == [3, 2, 7]



@pytest.mark.slow
def test_recurrent_ops_with_run_time_weights(tmp_path):
    """LSTM (bidirectional, run-time W/R/B and peepholes) and GRU (run-time W/R/B, linear_before_reset) unrolled
    with matmuls instead of MIL's constant-weight linear; the simple RNN (bidirectional, run-time W and B, constant
    R, clip, activations, sequence_lens)."""
    hidden, size = 3, 2
    nodes = [helper.make_node("LSTM", ["x", "lw", "lr", "lb", "", "", "", "lp"], ["ly", "lh"], hidden_size=hidden,
                              direction="bidirectional"),
             helper.make_node("GRU", ["x", "gw", "gr", "gb"], ["gy"], hidden_size=hidden, linear_before_reset=1),
             helper.make_node("RNN", ["x", "rw", "rr", "rb", "lens"], ["ry", "rh"], hidden_size=hidden, clip=1.5,
                              direction="bidirectional", activations=["Relu", "Tanh"])]
    shapes = {"x": [4, 2, size], "lw": [2, 4 * hidden, size], "lr": [2, 4 * hidden, hidden], "lb": [2, 8 * hidden],
              "lp": [2, 3 * hidden], "gw": [1, 3 * hidden, size], "gr": [1, 3 * hidden, hidden], "gb": [1, 6 * hidden],
              "rw": [2, hidden, size], "rb": [2, 2 * hidden]}
    model = _model(nodes, [(k, F, v) for k, v in shapes.items()] + [("lens", TensorProto.INT32, [2])],
                   [(n, F, None) for n in ("ly", "lh", "gy", "ry", "rh")], [("rr", _x(2, hidden, hidden))])
    _convert(model, {**{k: _x(*v) for k, v in shapes.items()}, "lens": np.array([4, 2], np.int32)}, tmp_path)
