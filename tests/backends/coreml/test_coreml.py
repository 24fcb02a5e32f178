"""Core ML backend: ONNX -> MIL -> .mlpackage, checked on the host by evaluating the saved MIL program
against onnxruntime (per op family, pitfalls included) and end to end from PyTorch."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.conftest import EXAMPLES, assert_one_line_error, check_report
from tests.helpers.extras import require, requires

require("coremltools")
FACTORY = f"{EXAMPLES}:cnn"
RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=17, typed=()):
    """Inputs ``(name, shape[, elem_type])``, outputs ``name`` or ``(name, elem_type)``; ``inits`` are made
    float32, ``typed`` initializers keep their dtype."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else TensorProto.FLOAT, i[1])
                     for i in inputs],
        [helper.make_tensor_value_info(*((o, TensorProto.FLOAT) if isinstance(o, str) else o), None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits]
        + [numpy_helper.from_array(np.asarray(v), k) for k, v in typed])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8 if opset < 19 else 9)


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
    # ONNX's defaults (half_pixel, round_prefer_floor): a 3x integer upscale is MIL's nearest upsample
    "resize_nearest_half_pixel_3x": _model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
                                           [("x", [1, 2, 4, 5])], ["y"], [("sc", np.array([1, 1, 3, 2]))]),
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
    # ConvTranspose: groups, interleaved pads, output_padding beyond the end pad (zero rows, then the bias)
    "conv_transpose": _model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 2],
                                               pads=[1, 0, 0, 1], output_padding=[1, 1]),
                              helper.make_node("ConvTranspose", ["x", "w"], ["z"], strides=[2, 1], dilations=[1, 2],
                                               pads=[0, 1, 2, 1], output_padding=[1, 0], group=2)],
                             [("x", [1, 4, 5, 6])], ["y", "z"], [("w", _w(4, 3, 3, 2)), ("b", _w(6))]),
    "instance_norm_ranks": _model([helper.make_node("InstanceNormalization", [x, "s", "b"], [x + "y"], epsilon=1e-3)
                                   for x in ("x3", "x4", "x5")],
                                  [("x3", [2, 3, 7]), ("x4", [2, 3, 4, 5]), ("x5", [1, 3, 2, 3, 4])],
                                  ["x3y", "x4y", "x5y"], [("s", _w(3)), ("b", _w(3))]),
    "split_sizes_and_num_outputs": _model([helper.make_node("Split", ["x", "sz"], ["a", "b", "c"], axis=1),
                                           helper.make_node("Relu", ["b"], ["rb"]),
                                           helper.make_node("Split", ["x"], ["d", "e", "f"], axis=-1, num_outputs=3)],
                                          [("x", [2, 6, 7])], ["a", "rb", "c", "d", "e", "f"], opset=18,
                                          typed=[("sz", np.array([2, 3, 1], np.int64))]),
    # Expand, Where, comparisons and logic computed at run time (not folded); bool outputs come back as 0/1
    "expand_where_compare_logic": _model(
        [helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("Expand", ["k", "shape"], ["big"]),
         helper.make_node("Where", ["pos", "x", "big"], ["w"]), helper.make_node("Tile", ["w", "reps"], ["y"]),
         helper.make_node("LessOrEqual", ["x", "k"], ["le"]), helper.make_node("Equal", ["x", "x"], ["eq"]),
         helper.make_node("GreaterOrEqual", ["x", "k"], ["ge"]), helper.make_node("Less", ["x", "zero"], ["lt"]),
         helper.make_node("Not", ["le"], ["nle"]), helper.make_node("And", ["nle", "eq"], ["a"]),
         helper.make_node("Or", ["a", "lt"], ["o"]), helper.make_node("Xor", ["o", "ge"], ["logic"])],
        [("x", [2, 3, 4])], ["y", ("logic", TensorProto.BOOL)], [("zero", np.array(0.0)), ("k", _w(1, 4))],
        typed=[("shape", np.array([3, 1], np.int64)), ("reps", np.array([1, 2, 1], np.int64))]),
    "reductions_opset18": _model([helper.make_node("Abs", ["x"], ["pos"])] + [
        helper.make_node(op, ["pos" if op == "ReduceLogSum" else "x", "ax"], [op], keepdims=k) for op, k in (
            ("ReduceL1", 1), ("ReduceL2", 0), ("ReduceLogSum", 1), ("ReduceLogSumExp", 0), ("ReduceSumSquare", 1))],
        [("x", [2, 3, 4])], ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"],
        opset=18, typed=[("ax", np.array([-1, 1], np.int64))]),
    "argmax_argmin": _model([helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
                             helper.make_node("ArgMin", ["x"], ["b"], axis=-1)],
                            [("x", [2, 5, 3])], [("a", TensorProto.INT64), ("b", TensorProto.INT64)]),
    # opset 18 Pad with axes (pads given for those axes only), and negative pads that crop
    "pad18_axes_and_crop": _model([helper.make_node("Pad", ["x", "p1", "", "ax"], ["a"], mode="edge"),
                                   helper.make_node("Pad", ["x", "p2", "cv"], ["b"])],
                                  [("x", [2, 3, 5, 6])], ["a", "b"], [("cv", np.array(0.5))], opset=18,
                                  typed=[("p1", np.array([1, 2, 0, 3], np.int64)), ("ax", np.array([-1, 2], np.int64)),
                                         ("p2", np.array([0, -1, 2, 0, 0, 1, -2, -3], np.int64))]),
    "gelu_opset20": _model([helper.make_node("Gelu", ["x"], ["a"]),
                            helper.make_node("Gelu", ["x"], ["b"], approximate="tanh")],
                           [("x", [2, 3, 4])], ["a", "b"], opset=20),
    # gate order z, r, h; linear_before_reset 0 and 1 differ once the recurrent h bias is non-zero
    "gru_linear_before_reset": _model(
        [helper.make_node("GRU", ["x", "W", "R", "B"], ["y0", "h0"], hidden_size=5),
         helper.make_node("GRU", ["x", "W", "R", "B", "", "init"], ["y1", "h1"], hidden_size=5,
                          linear_before_reset=1)],
        [("x", [4, 2, 3]), ("init", [1, 2, 5])], ["y0", "h0", "y1", "h1"],
        [("W", _w(1, 15, 3)), ("R", _w(1, 15, 5)), ("B", _w(1, 30))]),
    "gru_reverse_lstm_bidirectional": _model(
        [helper.make_node("GRU", ["x", "W", "R", "B"], ["gy", "gh"], hidden_size=5, direction="reverse"),
         helper.make_node("LSTM", ["x", "LW", "LR", "LB", "", "h0", "c0"], ["ly", "lh", "lc"], hidden_size=4,
                          direction="bidirectional")],
        [("x", [4, 2, 3]), ("h0", [2, 2, 4]), ("c0", [2, 2, 4])], ["gy", "gh", "ly", "lh", "lc"],
        [("W", _w(1, 15, 3)), ("R", _w(1, 15, 5)), ("B", _w(1, 30)), ("LW", _w(2, 16, 3)), ("LR", _w(2, 16, 4)),
         ("LB", _w(2, 32))]),
    "einsum_patterns": _model([helper.make_node("Einsum", ["a", "b"], ["mm"], equation="bij,bjk->bik"),
                               helper.make_node("Einsum", ["a", "c"], ["mt"], equation="bij,bkj->bik"),
                               helper.make_node("Einsum", ["p", "q"], ["mil"], equation="nchw,nwhu->nchu")],
                              [("a", [2, 3, 4]), ("b", [2, 4, 5]), ("c", [2, 6, 4]), ("p", [2, 3, 4, 5]),
                               ("q", [2, 5, 4, 6])], ["mm", "mt", "mil"]),
    # int64 ids at run time, shifted to include negative indices (ONNX: from the end; iOS 17: out of bounds)
    "gather_int64_runtime_negative_ids": _model(
        [helper.make_node("Sub", ["ids", "five"], ["shifted"]),
         helper.make_node("Gather", ["table", "shifted"], ["y"])],
        [("ids", [2, 5], TensorProto.INT64)], ["y"], [("table", _w(12, 4))],
        typed=[("five", np.array(5, np.int64))]),
    # BOOL inputs are int32 in Core ML (cast to bool inside), FLOAT16 ones fp32 (cast to fp16 inside)
    "bool_and_fp16_inputs": _model([helper.make_node("Where", ["c", "x", "y"], ["w"]),
                                    helper.make_node("Cast", ["h"], ["hf"], to=1),
                                    helper.make_node("Add", ["w", "hf"], ["o"])],
                                   [("c", [2, 3], TensorProto.BOOL), ("x", [2, 3]), ("y", [2, 3]),
                                    ("h", [2, 3], TensorProto.FLOAT16)], ["o"]),
    # a flexible batch N: Shape chains fold to sizes holding N, computed at run time where they are needed;
    # validated at the sample's N and at N + 1
    "flexible_shape_chain": _model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"]),
         helper.make_node("Unsqueeze", ["n", "zero1"], ["nu"]),
         helper.make_node("Concat", ["nu", "tail"], ["shp"], axis=0), helper.make_node("Reshape", ["x", "shp"], ["r"]),
         helper.make_node("Concat", ["nu", "minus1"], ["shp2"], axis=0),
         helper.make_node("Reshape", ["x", "shp2"], ["r2"]),
         helper.make_node("Mul", ["n", "six"], ["n6"]), helper.make_node("Div", ["n6", "two"], ["n3"]),
         helper.make_node("Unsqueeze", ["n3", "zero1"], ["n3u"]),
         helper.make_node("Concat", ["n3u", "minus1"], ["shp3"], axis=0),
         helper.make_node("Reshape", ["x", "shp3"], ["r3"]),
         helper.make_node("Concat", ["nu", "five"], ["zs"], axis=0),
         helper.make_node("ConstantOfShape", ["zs"], ["z"], value=numpy_helper.from_array(np.array([1.5], np.float32))),
         helper.make_node("Concat", ["nu", "three"], ["es"], axis=0),
         helper.make_node("Expand", ["b", "es"], ["e"]),
         helper.make_node("Range", ["zero", "n6", "two"], ["ints"]),
         helper.make_node("Cast", ["ints"], ["steps"], to=1),
         helper.make_node("Add", ["steps", "b"], ["y"])],
        [("x", ["N", 4, 6])], ["r", "r2", "r3", "z", "e", "y"], [("b", _w(1, 1))],
        typed=[("zero", np.array(0, np.int64)), ("zero1", np.array([0], np.int64)),
               ("tail", np.array([2, 12], np.int64)), ("minus1", np.array([-1], np.int64)),
               ("six", np.array(6, np.int64)), ("two", np.array(2, np.int64)), ("five", np.array([5], np.int64)),
               ("three", np.array([3], np.int64))]),
}
I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
CASES.update({
    # torch's x.flip(-1) / x[::-1] (starts -1, ends INT64_MIN, step -1), strided backwards slices (ends below -n
    # mean "through index 0"), and a mix of forward and backward axes in one Slice
    "slice_negative_steps": _model(
        [helper.make_node("Slice", ["x", "m1", "imin", "ax2", "m1"], ["flip"]),
         helper.make_node("Slice", ["x", "st", "en", "ax12", "sp"], ["mixed"]),
         helper.make_node("Slice", ["x", "st2", "en2", "ax0", "m2"], ["back2"])],
        [("x", [3, 5, 7])], ["flip", "mixed", "back2"],
        typed=[("m1", np.array([-1], np.int64)), ("imin", np.array([I64_MIN], np.int64)),
               ("ax2", np.array([2], np.int64)), ("st", np.array([I64_MAX, 1], np.int64)),
               ("en", np.array([0, -10], np.int64)), ("ax12", np.array([1, -1], np.int64)),
               ("sp", np.array([-2, -3], np.int64)), ("st2", np.array([2], np.int64)),
               ("en2", np.array([-4], np.int64)), ("ax0", np.array([0], np.int64)), ("m2", np.array([-2], np.int64))]),
    # a flexible dim reversed whole (x[::-1], x[::-2]): reverse, then a forward slice to its run-time end
    "slice_negative_steps_flexible": _model(
        [helper.make_node("Slice", ["x", "m1", "imin", "ax0", "m1"], ["flip"]),
         helper.make_node("Slice", ["x", "imax", "imin", "ax0", "m2"], ["every2"])],
        [("x", ["N", 4])], ["flip", "every2"],
        typed=[("m1", np.array([-1], np.int64)), ("imin", np.array([I64_MIN], np.int64)),
               ("imax", np.array([I64_MAX], np.int64)), ("ax0", np.array([0], np.int64)),
               ("m2", np.array([-2], np.int64))]),
    # integer Div truncates toward zero (onnxruntime), Mod fmod=0 takes the divisor's sign, fmod=1 the dividend's;
    # operands of both signs, divisors never 0
    "int_div_and_mod_at_run_time": _model(
        [helper.make_node("Sub", ["a", "five"], ["sa"]), helper.make_node("Add", ["b", "one"], ["b1"]),
         helper.make_node("Mul", ["b1", "signs"], ["sb"]), helper.make_node("Div", ["sa", "sb"], ["div"]),
         helper.make_node("Mod", ["sa", "sb"], ["mod"]), helper.make_node("Mod", ["sa", "sb"], ["fmod"], fmod=1),
         helper.make_node("Mod", ["x", "k"], ["xfmod"], fmod=1)],
        [("a", [2, 6], TensorProto.INT64), ("b", [2, 6], TensorProto.INT64), ("x", [2, 6])],
        [("div", TensorProto.INT64), ("mod", TensorProto.INT64), ("fmod", TensorProto.INT64), "xfmod"],
        [("k", np.array([0.7, -1.3, 2.0, -0.4, 1.1, -2.5]))],
        typed=[("five", np.array(5, np.int64)), ("one", np.array(1, np.int64)),
               ("signs", np.array([1, -1, 1, -1, -1, 1], np.int64))]),
    # non-integer nearest: one gather per axis with ONNX's source indices, for every nearest_mode
    "resize_nearest_non_integer_modes": _model(
        [helper.make_node("Resize", ["x", "", "sc"], [f"y_{m}_{c}"], mode="nearest", nearest_mode=m,
                          coordinate_transformation_mode=c) for m, c in (
            ("round_prefer_floor", "half_pixel"), ("round_prefer_ceil", "align_corners"), ("floor", "asymmetric"),
            ("ceil", "tf_half_pixel_for_nn"), ("round_prefer_floor", "pytorch_half_pixel"))]
        + [helper.make_node("Resize", ["x", "", "", "sz"], ["y_sizes_axes"], mode="nearest", axes=[3, 1])],
        [("x", [1, 3, 5, 7])], ["y_round_prefer_floor_half_pixel", "y_round_prefer_ceil_align_corners",
                                "y_floor_asymmetric", "y_ceil_tf_half_pixel_for_nn",
                                "y_round_prefer_floor_pytorch_half_pixel", "y_sizes_axes"],
        [("sc", np.array([1, 1, 1.5, 0.6]))], opset=19, typed=[("sz", np.array([11, 2], np.int64))]),
    # linear where MIL's bilinear ops sample differently (coordinate modes, a leading axis, pytorch_half_pixel to
    # size 1): constant interpolation matrices
    "resize_linear_by_matrices": _model(
        [helper.make_node("Resize", ["x", "", "sc"], ["a"], mode="linear",
                          coordinate_transformation_mode="half_pixel_symmetric"),
         helper.make_node("Resize", ["x", "", "sc"], ["b"], mode="linear",
                          coordinate_transformation_mode="tf_half_pixel_for_nn"),
         helper.make_node("Resize", ["x", "", "sc2"], ["c"], mode="linear"),
         helper.make_node("Resize", ["x", "", "", "sz"], ["d"], mode="linear",
                          coordinate_transformation_mode="pytorch_half_pixel")],
        [("x", [1, 3, 5, 7])], ["a", "b", "c", "d"], [("sc", np.array([1, 1, 1.5, 0.6])),
                                                       ("sc2", np.array([1, 2, 1, 1]))], opset=19,
        typed=[("sz", np.array([1, 3, 1, 4], np.int64))]),
    # Resize-10 (no nearest_mode): floor when growing, ceil when shrinking
    "resize10_nearest": _model([helper.make_node("Resize", ["x", "sc"], ["y"], mode="nearest")],
                               [("x", [1, 2, 5, 7])], ["y"], [("sc", np.array([1, 1, 0.6, 2.5]))], opset=10),
    # cubic: constant interpolation matrices per axis (coefficient a, exclude_outside, coordinate modes, sizes)
    "resize_cubic": _model(
        [helper.make_node("Resize", ["x", "", "sc"], ["a"], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1),
         helper.make_node("Resize", ["x", "", "", "sz"], ["b"], mode="cubic",
                          coordinate_transformation_mode="align_corners"),
         helper.make_node("Resize", ["x", "", "sc"], ["c"], mode="cubic", coordinate_transformation_mode="asymmetric")],
        [("x", [1, 2, 5, 7])], ["a", "b", "c"], [("sc", np.array([1, 1, 1.5, 2.0]))], opset=13,
        typed=[("sz", np.array([1, 2, 9, 4], np.int64))]),
    # linear to sizes: resize_bilinear with the sampling mode of each coordinate mode
    "resize_linear_sizes": _model(
        [helper.make_node("Resize", ["x", "", "", "sz"], [c], mode="linear", coordinate_transformation_mode=c)
         for c in ("half_pixel", "align_corners", "asymmetric")],
        [("x", [1, 2, 5, 7])], ["half_pixel", "align_corners", "asymmetric"], opset=13,
        typed=[("sz", np.array([1, 2, 9, 4], np.int64))]),
    # LSTM unrolled with ONNX's equations: clip, activations with alphas/betas (consumed in order by the ones
    # that take them), peepholes [i, o, f], input_forget
    "lstm_clip_activations_peepholes": _model(
        [helper.make_node("LSTM", ["x", "W2", "R2", "B2"], ["y", "yh", "yc"], hidden_size=4, clip=0.5,
                          direction="bidirectional", activations=["HardSigmoid", "Affine", "ScaledTanh", "Sigmoid",
                                                                  "LeakyRelu", "Softsign"],
                          activation_alpha=[0.3, 0.9, 0.8, 0.2], activation_beta=[0.4, 0.1, 1.2]),
         helper.make_node("LSTM", ["x", "W1", "R1", "B1", "", "", "", "P"], ["py", "ph", "pc"], hidden_size=4,
                          input_forget=1, activations=["Sigmoid", "Elu", "ThresholdedRelu"],
                          activation_alpha=[0.7, 0.1])],
        [("x", [5, 3, 3])], ["y", "yh", "yc", "py", "ph", "pc"],
        [("W2", _w(2, 16, 3)), ("R2", _w(2, 16, 4)), ("B2", _w(2, 32)), ("W1", _w(1, 16, 3)), ("R1", _w(1, 16, 4)),
         ("B1", _w(1, 32)), ("P", _w(1, 12))]),
    "gru_clip_activations": _model(
        [helper.make_node("GRU", ["x", "W", "R", "B", "", "h0"], ["y", "yh"], hidden_size=4, clip=0.6,
                          direction="bidirectional", linear_before_reset=1, activation_alpha=[0.3],
                          activation_beta=[0.6], activations=["HardSigmoid", "Softsign", "Sigmoid", "Softplus"])],
        [("x", [4, 2, 3]), ("h0", [2, 2, 4])], ["y", "yh"],
        [("W", _w(2, 12, 3)), ("R", _w(2, 12, 4)), ("B", _w(2, 24))]),
    # sequence_lens: constant (some equal to the sequence, some shorter) and at run time (1..5 from int inputs);
    # past a row's length Y is 0 and the state is held, so the reverse direction starts at the row's own end
    "rnn_sequence_lens": _model(
        [helper.make_node("Mod", ["lens", "five"], ["m5"]), helper.make_node("Add", ["m5", "one"], ["l1"]),
         helper.make_node("LSTM", ["x", "W", "R", "B", "l1", "h0"], ["y", "yh", "yc"], hidden_size=4,
                          direction="bidirectional"),
         helper.make_node("GRU", ["x", "GW", "GR", "", "l1"], ["gy", "gh"], hidden_size=4, direction="reverse"),
         helper.make_node("LSTM", ["x", "W", "R", "B", "fixed"], ["cy"], hidden_size=4, direction="bidirectional"),
         helper.make_node("LSTM", ["x", "W", "R", "B", "full"], ["fy"], hidden_size=4, direction="bidirectional")],
        [("x", [5, 3, 3]), ("lens", [3], TensorProto.INT32), ("h0", [2, 3, 4])],
        ["y", "yh", "yc", "gy", "gh", "cy", "fy"],
        [("W", _w(2, 16, 3)), ("R", _w(2, 16, 4)), ("B", _w(2, 32)), ("GW", _w(1, 12, 3)), ("GR", _w(1, 12, 4))],
        typed=[("five", np.array(5, np.int32)), ("one", np.array(1, np.int32)),
               ("fixed", np.array([5, 2, 3], np.int32)), ("full", np.array([5, 5, 5], np.int32))]),
    # MaxPool with dilations, or ceil_mode with asymmetric pads: one strided slice per kernel tap, then maximum
    # (the last ceil_mode window must start inside the input or its begin padding: f has one output, not two)
    "max_pool_dilations_and_ceil": _model(
        [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[3, 2], dilations=[2, 3], strides=[2, 1],
                          pads=[2, 1, 1, 1]),
         helper.make_node("MaxPool", ["x"], ["b"], kernel_shape=[2, 3], dilations=[2, 2], strides=[2, 2], ceil_mode=1,
                          pads=[1, 1, 1, 1]),
         helper.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], dilations=[2, 2], auto_pad="VALID",
                          strides=[2, 2]),
         helper.make_node("MaxPool", ["x1"], ["e"], kernel_shape=[3], dilations=[2], strides=[2], ceil_mode=1),
         helper.make_node("MaxPool", ["x2"], ["f"], kernel_shape=[2, 2], dilations=[3, 3], strides=[4, 4], ceil_mode=1,
                          pads=[0, 0, 1, 1]),
         helper.make_node("MaxPool", ["x"], ["g"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
                          pads=[0, 1, 1, 0])],
        [("x", [1, 2, 9, 10]), ("x1", [2, 3, 10]), ("x2", [1, 2, 4, 4])], ["a", "b", "c", "e", "f", "g"]),
})
for _name, _inputs in {"squeeze_reduce_clip": ("ax0", "ax3"), "layer_norm_gather_slice_pad": ("idx", "st", "en", "axs",
                                                                                             "pads")}.items():
    for _t in CASES[_name].graph.initializer:  # indices, axes, starts/ends and pads are int64 in ONNX
        if _t.name in _inputs:
            _t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(_t).astype(np.int64), _t.name))
# Reshape's shape must be int64
CASES["gemm_bn_softmax"].graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array([0, 6, 1], np.int64), "shape"))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.fast_cases("conv_transpose")
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
@pytest.mark.fast_cases("fp16")
@requires("torch")
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


@pytest.mark.slow
def test_transformer_shape_chains_are_folded(models, tmp_path):
    """torch's export of an encoder block computes reshape targets with Shape/Gather/Concat chains; with static
    input shapes they fold to constants before lowering."""
    model, sample = models.transformer()
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "t.mlpackage", opset=17).report
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "passed"),
                                                                      ("onnx", "coreml", "passed")]
    assert {"layer_norm", "softmax", "matmul"} <= set(rep["artifact"]["backend"]["ops"])


@pytest.mark.slow
def test_lstm_gate_order(models, tmp_path, monkeypatch, native_in_process):
    """ONNX gates are [i, o, f, c], MIL's [i, f, o, c]: the torch LSTM passes, and without the reordering the
    Core ML hop fails."""
    from onnxbridge.backends.coreml import lower_rnn

    model, sample = models.lstm()
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "l.mlpackage", opset=17).report
    assert rep["status"] == "passed" and "lstm" in rep["artifact"]["backend"]["ops"]
    monkeypatch.setattr(lower_rnn, "_ifoc", lambda w: np.asarray(w, np.float32))
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "bad.mlpackage", opset=17).report
    assert rep["status"] == "failed" and [h["status"] for h in rep["hops"]] == ["passed", "failed"]


@pytest.mark.slow
def test_a_wrong_lowering_is_caught(tmp_path, monkeypatch, native_in_process):
    """Swap the pads order back to ONNX's (the classic mistake): the Core ML hop fails."""
    from onnxbridge.backends.coreml import lower_nn

    monkeypatch.setattr(lower_nn, "_mil_pads", lambda pads, spatial: list(pads or [0] * (2 * spatial)))
    src = tmp_path / "c.onnx"
    onnx.save(CASES["conv_asymmetric_pads"], src)
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "c.mlpackage").report
    assert rep["status"] == "failed" and rep["hops"][-1]["to"] == "coreml"


def test_deployment_target_is_checked_per_node(cli, tmp_path):
    """Asymmetric linear resize needs iOS 16's half_pixel_centers: at iOS 15 it is refused naming the node and
    the target that works; half-pixel resize maps to iOS 15's own meaning of align_corners=False and passes."""
    def resize(coords):
        return _model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="up", mode="linear",
                                        coordinate_transformation_mode=coords)],
                      [("x", [1, 2, 5, 6])], ["y"], [("sc", np.array([1, 1, 2, 2]))])
    onnx.save(resize("asymmetric"), tmp_path / "asym.onnx")
    assert_one_line_error(cli("convert", tmp_path / "asym.onnx", "--to", "coreml", "-o", tmp_path / "a.mlpackage",
                              "--target", "iOS15"), 2, "node 'up' (Resize)", "needs --target iOS16")
    onnx.save(resize("half_pixel"), tmp_path / "half.onnx")
    rep = onnxbridge.convert(tmp_path / "half.onnx", to="coreml", output=tmp_path / "h.mlpackage",
                             target="iOS15").report
    assert rep["status"] == "passed" and rep["artifact"]["backend"]["spec_version"] == 6


def test_coremltools_target_errors_name_the_target():
    from onnxbridge.backends.coreml.program import rejection

    msg = ("No available version for resize in the coremltools.target.iOS16 opset. Please update the "
           "minimum_deployment_target to at least coremltools.target.iOS17")
    assert rejection(ValueError(msg), "iOS16") == "MIL op 'resize' needs --target iOS17 or newer (building for iOS16)"
    assert rejection(ValueError("Incompatible dim 1"), "iOS16").startswith("Core ML rejects the lowering")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the unclamped run's NaN
@pytest.mark.slow
def test_fp16_clamps_float_max_masks(tmp_path, monkeypatch, native_in_process):
    """A -FLT_MAX attention mask becomes -inf in fp16 and a fully masked softmax row NaN; clamped to -65504 it
    matches onnxruntime's fp32 (uniform row). Without the clamp the Core ML hop fails."""
    from onnxbridge.backends.coreml import program

    mask = np.zeros((3, 5), np.float32)
    mask[0, :] = mask[1, 2:] = -np.finfo(np.float32).max
    onnx.save(_model([helper.make_node("Add", ["x", "mask"], ["a"]), helper.make_node("Softmax", ["a"], ["y"])],
                     [("x", [3, 5])], ["y"], [("mask", mask)]), tmp_path / "m.onnx")
    rep = onnxbridge.convert(tmp_path / "m.onnx", to="coreml", output=tmp_path / "m.mlpackage", precision="fp16").report
    assert rep["status"] == "passed"
    monkeypatch.setattr(program, "clamp_fp16", lambda v: v)
    rep = onnxbridge.convert(tmp_path / "m.onnx", to="coreml", output=tmp_path / "n.mlpackage", precision="fp16").report
    assert rep["status"] == "failed"


def test_dtype_policy_saturates_int64():
    from onnxbridge.backends.coreml.lower import narrow

    got = narrow(np.array([2 ** 62, -2 ** 62, 7], np.int64))
    assert got.dtype == np.int32 and got.tolist() == [2 ** 31 - 1, -2 ** 31, 7]  # astype would wrap INT64_MAX to -1
    assert narrow(np.array([1.5])).dtype == np.float32


def test_rank_above_5_names_the_node(cli, tmp_path):
    src = tmp_path / "r6.onnx"
    onnx.save(_model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="to6d")], [("x", [2, 3, 4, 5])], ["y"],
                     typed=[("shape", np.array([1, 2, 1, 3, 4, 5], np.int64))]), src)
    assert_one_line_error(cli("convert", src, "--to", "coreml", "-o", tmp_path / "r.mlpackage"), 2,
                          "node 'to6d' (Reshape)", "rank 6", "rank <= 5")


@pytest.mark.parametrize("dynamic,bounds", [("x:0", [1, 1024]), ("x:0:batch:1..8", [1, 8])])
@pytest.mark.slow
@requires("torch")
def test_flexible_batch(cli, tmp_path, dynamic, bounds):
    """--dynamic becomes a RangeDim (its min..max, else 1..1024) with the sample's size as default; the host
    evaluator runs the saved program at every validated size (the grown batch, and the range's ends)."""
    import coremltools as ct

    out = tmp_path / "cnn.mlpackage"
    res = cli("convert", FACTORY, "--to", "coreml", "-o", out, "--opset", "17", "--dynamic", dynamic,
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["hops"][-1]["status"] == "passed"
    batches = [s["x"][0] for s in rep["inputs"]["samples"]]
    assert batches == ([2, 3, 1, 8] if bounds == [1, 8] else [2, 3])  # sample, grown, the range's ends
    desc = ct.models.MLModel(str(out), skip_model_load=True).get_spec().description.input[0]
    ranges = [[r.lowerBound, r.upperBound] for r in desc.type.multiArrayType.shapeRange.sizeRanges]
    assert ranges == [bounds, [3, 3], [32, 32], [32, 32]] and list(desc.type.multiArrayType.shape)[0] == 2
    assert rep["artifact"]["backend"]["flexible_inputs"] == {"x": ranges}
    info = cli("inspect", out, "--json")
    assert info.exit_code == 0, info.output
    facts = json.loads(info.stdout)
    assert facts["inputs"][0]["shape_range"] == ranges and facts["outputs"][0]["shape"][0] is None


def test_check_lists_every_blocker_without_converting(cli, tmp_path):
    """Unknown op, rank 6, refused shape, unsupported einsum, op too new for the target: each named; a node
    fed by a refused one is not reported again, and nothing is written."""
    from onnxbridge.backends.coreml.program import check

    model = _model([helper.make_node("BitwiseNot", ["i"], ["h"], name="bn"),
                    helper.make_node("Neg", ["h"], ["r"], name="after_bn"),
                    helper.make_node("Resize", ["x", "", "sc"], ["u"], name="up", mode="linear",
                                     coordinate_transformation_mode="asymmetric"),
                    helper.make_node("Reshape", ["x", "shape"], ["y6"], name="to6d"),
                    helper.make_node("Det", ["x"], ["dt"], name="det"),
                    helper.make_node("Einsum", ["x", "x", "x"], ["es"], name="es", equation="abcd,abcd,abcd->a"),
                    helper.make_node("Sigmoid", ["x"], ["ok"], name="fine")],
                   [("x", [1, 2, 3, 4]), ("i", [3], TensorProto.INT32)],
                   [("r", TensorProto.INT32), "u", "y6", "dt", "es", "ok"],
                   [("sc", np.array([1, 1, 2, 2]))], typed=[("shape", np.array([1, 1, 1, 2, 3, 4], np.int64))],
                   opset=18)
    expected = ["node 'bn' (BitwiseNot): no Core ML lowering", "node 'to6d' (Reshape): output 'y6' has rank 6",
                "node 'det' (Det): the determinant of [3, 4] matrices", "node 'es' (Einsum): equation 'abcd,abcd,abcd->a'"]
    found = check(model, "iOS16")
    assert len(found) == 4 and all(f.startswith(e) for f, e in zip(found, expected)), found
    assert any("node 'up' (Resize)" in f and "needs --target iOS16" in f for f in check(model, "iOS15"))
    onnx.save(model, tmp_path / "m.onnx")
    res = cli("check", tmp_path / "m.onnx", "--targets", "coreml")
    assert res.exit_code == 2 and all(f"coreml: {e}" in res.output for e in expected), res.output
    res = cli("check", tmp_path / "m.onnx", "--targets", "coreml", "--target", "iOS15")
    assert res.exit_code == 2 and "coreml: node 'up' (Resize)" in res.output and "needs --target iOS16" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.slow
def test_rnn_layout_1_is_batch_first(op, tmp_path):
    """layout=1 (X [b, s, I], states [b, D, H], Y [b, s, D, H]); onnxruntime refuses it, so the reference is the
    layout=0 node on transposed tensors. Both lowerings: LSTM through MIL's lstm, GRU unrolled with clip."""
    import onnxruntime as ort

    from onnxbridge.backends.coreml.package import build
    from onnxbridge.backends.coreml.runners import Runner

    gates = 4 if op == "LSTM" else 3
    weights = [("W", _w(2, gates * 4, 3)), ("R", _w(2, gates * 4, 4)), ("B", _w(2, gates * 8))]
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    states = ["h0"] + (["c0"] if op == "LSTM" else [])
    attrs = dict(hidden_size=4, direction="bidirectional", **({} if op == "LSTM" else {"clip": 0.8}))

    def model(layout: int):
        dims = ([3, 5, 3], [3, 2, 4]) if layout else ([5, 3, 3], [2, 3, 4])
        return _model([helper.make_node(op, ["x", "W", "R", "B", "", *states], outs, layout=layout, **attrs)],
                      [("x", dims[0])] + [(s, dims[1]) for s in states], outs, weights)
    onnx.save(model(1), tmp_path / "m.onnx")
    build(tmp_path / "m.onnx", tmp_path / "m.mlpackage")
    feeds = {"x": _w(3, 5, 3), **{s: _w(3, 2, 4) for s in states}}
    got = Runner(tmp_path / "m.mlpackage")(feeds)
    want = ort.InferenceSession(model(0).SerializeToString()).run(None, {
        "x": feeds["x"].transpose(1, 0, 2), **{s: feeds[s].transpose(1, 0, 2) for s in states}})
    assert got[0].shape == (3, 5, 2, 4) and np.allclose(got[0], want[0].transpose(2, 0, 1, 3), atol=1e-5)
    for g, w in zip(got[1:], want[1:]):
        assert g.shape == (3, 2, 4) and np.allclose(g, w.transpose(1, 0, 2), atol=1e-5)


def test_slice_and_mod_refusals_name_the_reason():
    """A backwards slice of a flexible dim that does not start at its end, and float Mod without fmod=1."""
    from onnxbridge.backends.coreml.program import check

    model = _model([helper.make_node("Slice", ["x", "m2", "imin", "ax0", "m1"], ["s"], name="part_flip"),
                    helper.make_node("Mod", ["x", "x"], ["m"], name="float_mod")],
                   [("x", ["N", 4])], ["s", "m"],
                   typed=[("m1", np.array([-1], np.int64)), ("m2", np.array([-2], np.int64)),
                          ("imin", np.array([I64_MIN], np.int64)), ("ax0", np.array([0], np.int64))])
    found = check(model, "iOS16")
    assert len(found) == 2 and found[0].startswith("node 'part_flip' (Slice): a negative step on the flexible dim 0")
    assert found[1] == "node 'float_mod' (Mod): fmod=0 is undefined for floats in ONNX (set fmod=1)"


def test_rnn_and_pool_refusals_name_the_reason():
    """Recurrences that cannot be unrolled, unknown activations and SAME padding with dilations (onnxruntime and
    the spec disagree) are refused, and listed by check."""
    from onnxbridge.backends.coreml.program import check

    model = _model([helper.make_node("LSTM", ["s", "W", "R"], ["l"], name="clip_flex", hidden_size=4, clip=1.0),
                    helper.make_node("GRU", ["x", "GW", "GR"], ["g"], name="act", hidden_size=4,
                                     activations=["Sigmoid", "Gelu"]),
                    helper.make_node("MaxPool", ["p"], ["ms"], name="same_dil", kernel_shape=[2, 2], dilations=[2, 2],
                                     auto_pad="SAME_UPPER")],
                   [("s", ["T", 2, 3]), ("x", [5, 2, 3]), ("p", [1, 2, 6, 6])], ["l", "g", "ms"],
                   [("W", _w(1, 16, 3)), ("R", _w(1, 16, 4)), ("GW", _w(1, 12, 3)), ("GR", _w(1, 12, 4))], opset=19)
    found = check(model, "iOS16")
    expected = [("clip_flex", "LSTM", "need a static sequence length"), ("act", "GRU", "activation Gelu"),
                ("same_dil", "MaxPool", "auto_pad=SAME_UPPER with dilations")]
    assert len(found) == len(expected) and all(f.startswith(f"node '{n}' ({op}): ") and why in f
                                               for f, (n, op, why) in zip(found, expected)), found


def _resize_to_shape_of(coords="half_pixel"):
    """x resized (linear) to the first two dims of x and the flexible shape of ``ref`` (sizes known at run time)."""
    return _model([helper.make_node("Shape", ["x"], ["sx"], end=2), helper.make_node("Shape", ["ref"], ["sr"]),
                   helper.make_node("Concat", ["sx", "sr"], ["sz"], axis=0),
                   helper.make_node("Resize", ["x", "", "", "sz"], ["y"], name="rs", mode="linear",
                                    coordinate_transformation_mode=coords)],
                  [("x", [1, 2, 4, 5]), ("ref", ["A", "B"])], ["y"])


@pytest.mark.slow
def test_resize_to_sizes_known_at_run_time(tmp_path):
    """Sizes from another input's flexible shape: iOS 17's resize (run-time shape); before iOS 17, interpolation
    tables computed in the program (matmul), also right at a size the validation did not use."""
    import onnxruntime as ort

    from onnxbridge.backends.coreml.runners import Runner
    from onnxbridge.errors import UnsupportedError

    model = _resize_to_shape_of()
    onnx.save(model, tmp_path / "m.onnx")
    rep = onnxbridge.convert(tmp_path / "m.onnx", to="coreml", output=tmp_path / "m.mlpackage", target="iOS17").report
    assert rep["status"] == "passed" and "resize" in rep["artifact"]["backend"]["ops"]
    feeds = {"x": _w(1, 2, 4, 5), "ref": np.zeros((7, 3), np.float32)}  # a size the validation did not use
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = Runner(tmp_path / "m.mlpackage")(feeds)[0]
    assert got.shape == want.shape == (1, 2, 7, 3) and np.allclose(got, want, atol=1e-5)
    rep = onnxbridge.convert(tmp_path / "m.onnx", to="coreml", output=tmp_path / "n.mlpackage", target="iOS16").report
    assert rep["status"] == "passed" and "resize" not in rep["artifact"]["backend"]["ops"]
    got = Runner(tmp_path / "n.mlpackage")(feeds)[0]
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-5)


def test_resize_refusals_name_the_reason():
    """What Core ML cannot express is refused, and listed by check, naming node, op and the mode or input."""
    from onnxbridge.backends.coreml.program import check

    def node(name, *inputs, **attrs):
        return helper.make_node("Resize", ["x", "", *inputs], [name], name=name, **attrs)
    model = _model([node("crop", "sc", mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
                    node("aa", "sc", mode="linear", antialias=1),
                    node("sym", "sc", mode="nearest", coordinate_transformation_mode="half_pixel_symmetric"),
                    node("keep", "", "sz", mode="nearest", keep_aspect_ratio_policy="not_larger"),
                    node("dyn", "s_in", mode="nearest")],
                   [("x", [1, 2, 5, 7]), ("s_in", [4])], ["crop", "aa", "sym", "keep", "dyn"],
                   [("sc", np.array([1, 1, 0.6, 1.5]))], opset=19,
                   typed=[("sz", np.array([1, 2, 9, 4], np.int64))])
    found = check(model, "iOS17")
    expected = [("crop", "tf_crop_and_resize"), ("aa", "antialias=1"), ("sym", "half_pixel_symmetric"),
                ("keep", "keep_aspect_ratio_policy=not_larger"), ("dyn", "scales are computed from run-time data")]
    assert len(found) == len(expected) and all(f.startswith(f"node '{n}' (Resize): ") and why in f
                                               for f, (n, why) in zip(found, expected)), found
    runtime = [f for f in check(_model(_resize_to_shape_of().graph.node[:3] + [
        helper.make_node("Resize", ["x", "", "", "sz"], ["y"], name="rs", mode="nearest")],
        [("x", [1, 2, 4, 5]), ("ref", ["A", "B"])], ["y"]), "iOS17")]
    assert runtime == ["node 'rs' (Resize): nearest mode to sizes known only at run time has no Core ML equivalent "
                       "(linear and cubic have)"]
    assert check(_resize_to_shape_of("tf_half_pixel_for_nn"), "iOS17")[0].endswith(
        "coordinate_transformation_mode=tf_half_pixel_for_nn to sizes known only at run time is not lowered")


@pytest.mark.parametrize("name", ["transformer", "lstm"])
@pytest.mark.slow
def test_flexible_batch_through_shape_chains(models, tmp_path, name):
    """torch computes reshape targets (attention heads) and zero LSTM states from Shape chains; with a dynamic
    batch those sizes stay symbolic (reshape infers them, or they are computed at run time) instead of baking in
    the sample's batch: the grown batch (3) passes."""
    model, sample = getattr(models, name)()
    rep = onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "m.mlpackage", opset=17,
                             dynamic=["x:0"]).report
    assert rep["status"] == "passed" and [s["x"][0] for s in rep["inputs"]["samples"]] == [2, 3]
    assert rep["artifact"]["backend"]["flexible_inputs"]["x"][0] == [1, 1024]
    if name == "lstm":  # zero states of the run-time batch
        assert {"shape", "fill"} <= set(rep["artifact"]["backend"]["ops"])


def test_bad_inputs(cli, tmp_path):
    src = tmp_path / "bn.onnx"
    onnx.save(_model([helper.make_node("BitwiseNot", ["x"], ["y"], name="bn")], [("x", [2, 3], TensorProto.INT32)],
                     [("y", TensorProto.INT32)], opset=18), src)
    assert_one_line_error(cli("convert", src, "--to", "coreml", "-o", tmp_path / "a.mlpackage"), 2,
                          "node 'bn' (BitwiseNot)", "no Core ML lowering")
    src = tmp_path / "eq.onnx"
    onnx.save(_model([helper.make_node("Einsum", ["a", "b", "a"], ["y"], name="es", equation="ij,ij,ij->i")],
                     [("a", [2, 3]), ("b", [2, 3])], ["y"]), src)
    assert_one_line_error(cli("convert", src, "--to", "coreml", "-o", tmp_path / "b.mlpackage"), 2,
                          "node 'es' (Einsum)", "equation 'ij,ij,ij->i'")
    src = tmp_path / "empty.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [0, 3])], ["y"]), src)
    assert_one_line_error(cli("convert", src, "--to", "coreml", "-o", tmp_path / "b.mlpackage"), 2,
                          "input 'x' is empty")
    assert_one_line_error(cli("convert", FACTORY, "--to", "coreml", "-o", tmp_path / "c.mlpackage", "--target", "iOS9"),
                          2, "unknown coreml target")
    assert_one_line_error(cli("convert", FACTORY, "--to", "coreml", "-o", tmp_path / "d.onnx"), 2, ".mlpackage")
    assert_one_line_error(cli("convert", FACTORY, "-o", tmp_path / "e.onnx", "--target", "iOS17"), 2, "--target")
    assert not any(p.suffix == ".mlpackage" for p in tmp_path.iterdir())


@pytest.mark.slow
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
@pytest.mark.fast_cases("light_squeezenet")
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


@pytest.mark.slow
def test_macos_runs_core_ml_itself(monkeypatch, tmp_path, native_in_process):
    """On macOS the hop uses MLModel.predict (Core ML itself), fed and read like the host evaluator; elsewhere, or
    with ONNXBRIDGE_COREML_HOST=1, the numpy evaluation of the saved program."""
    import platform

    import coremltools as ct

    import onnxbridge.backends.coreml as coreml
    from onnxbridge.backends.coreml.runners import PredictRunner, Runner

    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2, 3])], ["y"])
    onnx.save(model, tmp_path / "m.onnx")
    assert onnxbridge.convert(tmp_path / "m.onnx", to="coreml", output=tmp_path / "m.mlpackage").passed
    seen = {}

    real = ct.models.MLModel

    class Predicting:  # what MLModel.predict returns on a Mac: a dict of outputs by name
        def predict(self, feeds):
            seen["feeds"] = feeds
            return {"y": np.maximum(feeds["x"], 0).astype(np.float16)}

    def mlmodel(path, *args, **kwargs):  # the spec is read as usual; loading for predict is the Mac's part
        if kwargs.get("skip_model_load"):
            return real(path, *args, **kwargs)
        seen["path"] = path
        return Predicting()

    assert type(coreml.runner(tmp_path / "m.mlpackage")) is Runner  # Linux: Core ML cannot predict here
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(ct.models, "MLModel", mlmodel)
    run = coreml.runner(tmp_path / "m.mlpackage")
    assert isinstance(run, PredictRunner)
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    out = run({"x": x})
    assert seen["path"] == str(tmp_path / "m.mlpackage") and seen["feeds"]["x"].dtype == np.float32
    assert out[0].dtype == np.float32 and np.array_equal(out[0], np.maximum(x, 0))
    monkeypatch.setenv("ONNXBRIDGE_COREML_HOST", "1")
    assert type(coreml.runner(tmp_path / "m.mlpackage")) is Runner
