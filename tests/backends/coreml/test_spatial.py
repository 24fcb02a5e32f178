"""Core ML lowerings of sampling, rearranging and scattering ops (GridSample, AffineGrid, DeformConv, Scatter*,
DepthToSpace, SpaceToDepth, LpPool, CenterCropPad, Col2Im, OneHot, EyeLike, ReverseSequence, MaxUnpool): each in a
small model converted to Core ML, its saved MIL program run by the host evaluator and compared with onnxruntime;
and the cases Core ML cannot express refused by name."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.backends.coreml.hop import passed_coreml_hop
from tests.helpers.extras import require
from onnxbridge.errors import UnsupportedError

require("coremltools")

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=20):
    """``inputs`` ``(name, elem_type, shape)``, ``outputs`` names (typed by ONNX's shape inference) or
    ``(name, elem_type, shape)``, ``inits`` ``(name, array)``."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs], [],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    model.graph.output.extend(helper.make_tensor_value_info(*o) if isinstance(o, tuple) else inferred[o]
                              for o in outputs)
    return model


def _convert(model: onnx.ModelProto, feeds: dict, tmp_path) -> set[str]:
    """Convert to Core ML, assert the Core ML hop passed against onnxruntime; the MIL ops of the program."""
    return set(passed_coreml_hop(model, tmp_path, inputs=feeds)["artifact"]["backend"]["ops"])


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.slow
def test_grid_sample_every_mode(tmp_path):
    """Bilinear and nearest, zeros/border/reflection padding, align_corners 0 and 1 (opset 16's and opset 20's
    mode names), on a grid reaching well outside [-1, 1] so every padding rule is hit, reflections included."""
    nodes, outputs = [], []
    for mode in ("linear", "nearest"):
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                out = f"{mode}_{padding}_{align}"
                nodes.append(helper.make_node("GridSample", ["x", "grid"], [out], mode=mode, padding_mode=padding,
                                              align_corners=align))
                outputs.append(out)
    model = _model(nodes, [("x", F, [2, 3, 4, 5]), ("grid", F, [2, 6, 7, 2])], outputs)
    grid = RNG.uniform(-3.1, 3.1, (2, 6, 7, 2)).astype(np.float32)
    assert "resample" in _convert(model, {"x": _x(2, 3, 4, 5), "grid": grid}, tmp_path)
    old = _model([helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bilinear", padding_mode="reflection")],
                 [("x", F, [1, 2, 3, 3]), ("grid", F, [1, 4, 4, 2])], ["y"], opset=16)
    _convert(old, {"x": _x(1, 2, 3, 3), "grid": RNG.uniform(-2, 2, (1, 4, 4, 2)).astype(np.float32)}, tmp_path)


@pytest.mark.slow
def test_affine_grid_into_grid_sample(tmp_path):
    """What torch's affine_grid + grid_sample export as: AffineGrid of a constant size (2-D and 3-D, align_corners
    0 and 1) and GridSample of its grid."""
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
             helper.make_node("AffineGrid", ["theta", "size"], ["grid_ac"], align_corners=1),
             helper.make_node("GridSample", ["x", "grid"], ["y"]),
             helper.make_node("AffineGrid", ["theta3", "size3"], ["grid3"], align_corners=1)]
    model = _model(nodes, [("x", F, [2, 3, 5, 6]), ("theta", F, [2, 2, 3]), ("theta3", F, [2, 3, 4])],
                   ["grid", "grid_ac", "y", "grid3"],
                   [("size", np.array([2, 3, 4, 7], np.int64)), ("size3", np.array([2, 1, 3, 2, 4], np.int64))])
    feeds = {"x": _x(2, 3, 5, 6), "theta": _x(2, 2, 3), "theta3": _x(2, 3, 4)}
    assert {"matmul", "resample"} <= _convert(model, feeds, tmp_path)


@pytest.mark.slow
def test_deform_conv(tmp_path):
    """DeformConv with run-time weights, offsets reaching outside the image, mask and bias; 2 groups and 2 offset
    groups, strides, dilations, pads, a rectangular kernel; and a plain one with constant weights."""
    nodes = [helper.make_node("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], group=2, offset_group=2,
                              strides=[2, 1], dilations=[1, 2], pads=[1, 0, 0, 2], kernel_shape=[3, 2]),
             helper.make_node("DeformConv", ["x", "cw", "off1"], ["y1"])]
    model = _model(nodes, [("x", F, [2, 4, 6, 5]), ("w", F, [6, 2, 3, 2]), ("off", F, [2, 24, 3, 5]),
                           ("b", F, [6]), ("mask", F, [2, 12, 3, 5]), ("off1", F, [2, 2, 6, 5])],
                   ["y", "y1"], [("cw", _x(3, 4, 1, 1))], opset=22)
    feeds = {"x": _x(2, 4, 6, 5), "w": _x(6, 2, 3, 2), "off": _x(2, 24, 3, 5) * 3, "b": _x(6),
             "mask": RNG.uniform(0, 1, (2, 12, 3, 5)).astype(np.float32), "off1": _x(2, 2, 6, 5)}
    assert {"resample", "matmul"} <= _convert(model, feeds, tmp_path)


def _scatter_nodes():
    nodes = [helper.make_node("ScatterElements", ["d", "ri", "u"], [f"e_{r}"], axis=1, reduction=r)
             for r in ("add", "mul", "max", "min")]
    nodes += [helper.make_node("ScatterElements", ["d", "ui", "u"], ["e_none"], axis=-1),
              helper.make_node("ScatterElements", ["d", "ci", "u"], ["e_const"], axis=1, reduction="add"),
              helper.make_node("ScatterElements", ["d", "si", "su"], ["e_small"], axis=1, reduction="add"),
              helper.make_node("ScatterElements", ["d", "csi", "su"], ["e_small_const"], axis=0, reduction="max")]
    nodes += [helper.make_node("ScatterND", ["n", "ni", "nu"], [f"nd_{r}"], reduction=r)
              for r in ("none", "add", "mul", "max", "min")]
    return nodes


@pytest.mark.slow
def test_scatters_with_every_reduction(tmp_path):
    """ScatterElements (run-time indices with negatives and duplicates, constant ones, every reduction; unique
    indices for the plain update; indices smaller than data off the axis) and ScatterND (rows picked by a negative
    run-time index, every reduction)."""
    model = _model(_scatter_nodes(),
                   [("d", F, [3, 5]), ("ri", I64, [3, 4]), ("ui", I64, [3, 4]), ("u", F, [3, 4]),
                    ("n", F, [4, 3, 2]), ("ni", I64, [2, 1]), ("nu", F, [2, 3, 2]), ("si", I64, [2, 3]),
                    ("su", F, [2, 3])],
                   [f"e_{r}" for r in ("add", "mul", "max", "min", "none", "const", "small", "small_const")]
                   + [f"nd_{r}" for r in ("none", "add", "mul", "max", "min")],
                   [("ci", np.array([[0, -1, 0, 2]] * 3, np.int64)), ("csi", np.array([[2, -1, 0], [0, 0, 1]]))])
    feeds = {"d": _x(3, 5), "ri": RNG.integers(-5, 5, (3, 4)), "ui": np.array([[0, -1, 2, 3]] * 3, np.int64),
             "u": _x(3, 4), "n": _x(4, 3, 2), "ni": np.array([[-1], [1]], np.int64), "nu": _x(2, 3, 2),
             "si": RNG.integers(-5, 5, (2, 3)), "su": _x(2, 3)}
    assert {"scatter_along_axis", "scatter_nd"} <= _convert(model, feeds, tmp_path)


@pytest.mark.slow
def test_rearranging_ops(tmp_path):
    """DepthToSpace in both orders, SpaceToDepth, CenterCropPad (crop, pad, odd and even differences, axes),
    ReverseSequence with run-time lengths on either axis, MaxUnpool with run-time indices (distinct flat positions
    in the whole unpooled tensor, as MaxPool gives) to the inferred shape and to a larger output_shape."""
    nodes = [helper.make_node("DepthToSpace", ["x"], ["dcr"], blocksize=2),
             helper.make_node("DepthToSpace", ["x"], ["crd"], blocksize=2, mode="CRD"),
             helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=3),
             helper.make_node("CenterCropPad", ["x", "all"], ["ccp"]),
             helper.make_node("CenterCropPad", ["x", "hw"], ["ccp_axes"], axes=[-1, 2]),
             helper.make_node("ReverseSequence", ["r", "lens"], ["rev_t"], time_axis=0, batch_axis=1),
             helper.make_node("ReverseSequence", ["r", "lens"], ["rev_b"], time_axis=1, batch_axis=0),
             helper.make_node("MaxUnpool", ["p", "where"], ["unpooled"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "where7", "out"], ["unpooled7"], kernel_shape=[2, 2],
                              strides=[2, 2])]
    model = _model(nodes, [("x", F, [2, 8, 6, 9]), ("r", F, [4, 4, 3]), ("lens", I64, [4]), ("p", F, [2, 8, 3, 4]),
                           ("where", I64, [2, 8, 3, 4]), ("where7", I64, [2, 8, 3, 4])],
                   ["dcr", "crd", "s2d", "ccp", "ccp_axes", "rev_t", "rev_b", "unpooled", ("unpooled7", F, [2, 8, 7, 9])],
                   [("all", np.array([1, 11, 3, 10], np.int64)), ("hw", np.array([8, 4], np.int64)),
                    ("out", np.array([2, 8, 7, 9], np.int64))])
    feeds = {"x": _x(2, 8, 6, 9), "r": _x(4, 4, 3), "lens": np.array([4, 0, 1, 3], np.int64), "p": _x(2, 8, 3, 4),
             "where": RNG.choice(2 * 8 * 6 * 8, (2, 8, 3, 4), replace=False),
             "where7": RNG.choice(2 * 8 * 7 * 9, (2, 8, 3, 4), replace=False)}
    ops = _convert(model, feeds, tmp_path)
    assert {"depth_to_space", "pixel_shuffle", "space_to_depth", "reverse_sequence", "scatter_nd"} <= ops


@pytest.mark.slow
def test_lp_pool(tmp_path):
    """p = 1, 2 and 3 with pads, strides, dilations, auto_pad, ceil_mode, in 1-D and 2-D."""
    nodes = [helper.make_node("LpPool", ["x"], ["p1"], kernel_shape=[2, 3], p=1, pads=[1, 0, 0, 2]),
             helper.make_node("LpPool", ["x"], ["p2"], kernel_shape=[3, 2], strides=[2, 1], dilations=[1, 2]),
             helper.make_node("LpPool", ["x"], ["p3"], kernel_shape=[2, 2], p=3, auto_pad="SAME_LOWER"),
             helper.make_node("LpPool", ["s"], ["p1d"], kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER"),
             helper.make_node("LpPool", ["x"], ["ceil"], kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 0, 1],
                              ceil_mode=1, p=1)]
    model = _model(nodes, [("x", F, [1, 3, 7, 8]), ("s", F, [2, 3, 9])], ["p1", "p2", "p3", "p1d", "ceil"], opset=18)
    assert "conv" in _convert(model, {"x": _x(1, 3, 7, 8), "s": _x(2, 3, 9)}, tmp_path)


@pytest.mark.slow
def test_col2im(tmp_path):
    """Col2Im of constant sizes: plain 2-D blocks, strided/dilated/padded blocks leaving uncovered rows, 1-D."""
    nodes = [helper.make_node("Col2Im", ["a", "img", "blk"], ["plain"]),
             helper.make_node("Col2Im", ["b", "img2", "blk2"], ["strided"], strides=[2, 2], dilations=[1, 2],
                              pads=[1, 0, 0, 1]),
             helper.make_node("Col2Im", ["c", "img1", "blk1"], ["one_d"], strides=[3])]
    model = _model(nodes, [("a", F, [2, 8, 16]), ("b", F, [1, 6, 6]), ("c", F, [1, 4, 3])],
                   ["plain", "strided", "one_d"],
                   [("img", np.array([5, 5])), ("blk", np.array([2, 2])), ("img2", np.array([6, 7])),
                    ("blk2", np.array([2, 3])), ("img1", np.array([9])), ("blk1", np.array([2]))])
    feeds = {"a": _x(2, 8, 16), "b": _x(1, 6, 6), "c": _x(1, 4, 3)}
    assert "conv_transpose" in _convert(model, feeds, tmp_path)


@pytest.mark.slow
def test_one_hot_and_eye_like(tmp_path):
    """OneHot with a constant depth, run-time indices (negative and out of range) and run-time values, on the
    first, a middle and the last axis; EyeLike on and off the diagonal, as another dtype."""
    nodes = [helper.make_node("OneHot", ["i", "depth", "v"], ["oh_last"]),
             helper.make_node("OneHot", ["i", "depth", "v"], ["oh_first"], axis=0),
             helper.make_node("OneHot", ["i", "depth", "cv"], ["oh_mid"], axis=-2),
             helper.make_node("EyeLike", ["m"], ["eye"]),
             helper.make_node("EyeLike", ["m"], ["eye_up"], k=2, dtype=TensorProto.INT32),
             helper.make_node("EyeLike", ["m"], ["eye_down"], k=-1)]
    model = _model(nodes, [("i", I64, [2, 3]), ("v", F, [2]), ("m", F, [3, 5])],
                   ["oh_last", "oh_first", "oh_mid", "eye", "eye_up", "eye_down"],
                   [("depth", np.array(5, np.int64)), ("cv", np.array([-2, 7], np.int64))], opset=11)
    feeds = {"i": np.array([[0, -1, 4], [7, -5, 2]], np.int64), "v": np.array([0.5, 3.0], np.float32),
             "m": _x(3, 5)}
    assert "fill_like" in _convert(model, feeds, tmp_path)


REFUSED = {
    "cubic": (helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic"), [1, 1, 3, 3], [1, 2, 2, 2],
              "mode=cubic"),
    "volumetric": (helper.make_node("GridSample", ["x", "g"], ["y"]), [1, 1, 3, 3, 3], [1, 2, 2, 2, 3],
                   "3-D sampling"),
    "run-time depth": (helper.make_node("OneHot", ["g", "x", "v"], ["y"]), [1], [2, 2], "depth must be a constant"),
    "run-time shape": (helper.make_node("CenterCropPad", ["x", "g"], ["y"]), [4, 4], [2],
                       "shape must be a constant"),
    "run-time size": (helper.make_node("AffineGrid", ["x", "g"], ["y"]), [1, 2, 3], [4], "size must be a constant"),
}
OUT_RANK = {"OneHot": lambda x, g: len(g) + 1, "AffineGrid": lambda x, g: g[0]}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_core_ml_cannot_express_is_refused(case, tmp_path):
    """Cubic and 3-D sampling, and output sizes set by run-time values, are refused naming the node."""
    node, x_shape, g_shape, why = REFUSED[case]
    g_type = I64 if node.op_type in ("CenterCropPad", "AffineGrid") else F
    rank = OUT_RANK.get(node.op_type, lambda x, g: len(x))(x_shape, g_shape)
    inputs = [("x", F, x_shape), ("g", g_type, g_shape)] + [("v", F, [2])] * ("v" in node.input)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info("y", F, ["n"] * rank)])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9), src)
    with pytest.raises(UnsupportedError, match=f"\\({node.op_type}\\).*{why}"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage")


def test_channel_shuffle_runs_as_an_interleaved_concat(tmp_path):
    """ShuffleNet's channel shuffle after a concat, which coremltools fuses into one interleaved concat; the host
    evaluator runs it (it skipped such packages before)."""
    nodes = [helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
             helper.make_node("Reshape", ["ab", "split"], ["groups"]),
             helper.make_node("Transpose", ["groups"], ["swapped"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["swapped", "joined"], ["y"])]
    model = _model(nodes, [("a", F, [1, 3, 4, 5]), ("b", F, [1, 3, 4, 5])], ["y"],
                   [("split", np.array([1, 2, 3, 4, 5], np.int64)), ("joined", np.array([1, 6, 4, 5], np.int64))])
    passed_coreml_hop(model, tmp_path, inputs={"a": _x(1, 3, 4, 5), "b": _x(1, 3, 4, 5)})
    from onnxbridge.backends.coreml.runners import Runner

    ops = [op for op in Runner(tmp_path / "m.mlpackage").function.operations if op.op_type != "const"]
    assert [op.op_type for op in ops] == ["concat"] and ops[0].interleave.val


def test_interleaved_concat_kernel():
    from onnxbridge.backends.coreml.evaluate import KERNELS

    a, b = np.arange(6).reshape(3, 2), np.arange(6, 12).reshape(3, 2)
    y = KERNELS["concat"](values=[a, b], axis=0, interleave=True)
    np.testing.assert_array_equal(y, [[0, 1], [6, 7], [2, 3], [8, 9], [4, 5], [10, 11]])  # MIL's own example
    np.testing.assert_array_equal(KERNELS["concat"](values=[a, b], axis=-1, interleave=True),
                                  [[0, 6, 1, 7], [2, 8, 3, 9], [4, 10, 5, 11]])
