"""Core ML lowerings of elementwise and math ops (trigonometric and hyperbolic functions, activations, rounding,
arg-reductions with ties, Hardmax, LogSoftmax, variadic Max/Min, Pow's dtypes, Clip with computed bounds): each in
a small model converted to Core ML, its saved MIL program run by the host evaluator and compared with onnxruntime
at a tight tolerance, on inputs that hit the edge cases (ties, halves, infinities, large and tiny magnitudes)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxbridge
from tests.backends.coreml.hop import passed_coreml_hop
from tests.helpers.extras import require
from onnxbridge.errors import UnsupportedError

require("coremltools")

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
NP = {F: np.float32, I64: np.int64, I32: np.int32, TensorProto.FLOAT16: np.float16}


def _model(nodes, inputs, outputs, opset=18):
    """``inputs`` and ``outputs`` as ``(name, elem_type, shape)``."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _convert(model: onnx.ModelProto, feeds: dict, tmp_path, atol=1e-6, rtol=1e-5) -> dict:
    """Convert to Core ML and check the Core ML hop passed against onnxruntime at ``atol``/``rtol``."""
    return passed_coreml_hop(model, tmp_path, inputs=feeds, atol=atol, rtol=rtol)


WIDE = np.array([-1e30, -3.0, -1.5, -1.0, -1e-6, 0.0, 1e-6, 0.25, 1.0, 1.5, 3.0, 1e10, 1e30], np.float32)
UNIT = np.array([-1.0, -0.999, -0.5, -1e-6, 0.0, 1e-6, 0.3, 0.9999, 1.0], np.float32)
UNARY = {
    "Acos": UNIT, "Asin": UNIT, "Atan": WIDE, "Atanh": UNIT[1:-1], "Tan": np.linspace(-1.5, 1.5, 13, dtype=np.float32),
    "Cosh": np.linspace(-10, 10, 11, dtype=np.float32), "Sinh": np.linspace(-10, 10, 11, dtype=np.float32),
    # near 1 (where log(x + sqrt(x^2 - 1)) loses digits) and huge (where x^2 overflows)
    "Acosh": np.array([1.0, 1.0000001, 1.0001, 1.5, 1.999, 2.0, 3.0, 1e5, 1e20, 3e38], np.float32),
    "Asinh": np.concatenate([WIDE, [-3e38, 3e38, 1.999, -2.0]]).astype(np.float32),
    "Softsign": WIDE, "Sign": WIDE, "Mish": np.linspace(-20, 20, 17, dtype=np.float32),
    # halves go to even; just below a half goes down, including -0.49999997 where 1 + x rounds to 0.5
    "Round": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.49999997, -0.50000006, 2.4999998,
                       -7.5, 8388607.5, 16777215.0, 3e38, -3e38, np.inf, -np.inf], np.float32),
    "Selu": WIDE[1:-1], "Log": np.array([0.0, 1e-30, 1.0, 3e38], np.float32),
    "Reciprocal": np.array([1e-4, -1e-4, 3.0, -0.5], np.float32),
}


@pytest.mark.slow
def test_unary(tmp_path):
    """Every op of ``UNARY`` in one model, each on its own input."""
    nodes = [helper.make_node(op, [f"x{op}"], [f"y{op}"]) for op in UNARY]
    model = _model(nodes, [(f"x{op}", F, [len(x)]) for op, x in UNARY.items()], [(f"y{op}", F, None) for op in UNARY])
    _convert(model, {f"x{op}": x for op, x in UNARY.items()}, tmp_path)


ATTRIBUTES = [("Celu", {"alpha": 2.0}, WIDE[1:-1]),
              ("ThresholdedRelu", {"alpha": 1.0}, WIDE),  # x == alpha gives 0 (MIL's thresholded_relu keeps it)
              ("Shrink", {"lambd": 1.5, "bias": 0.5}, WIDE),  # x == +-lambd gives 0
              ("Selu", {"alpha": 2.0, "gamma": 3.0}, WIDE[1:-1])]


@pytest.mark.slow
def test_activation_attributes(tmp_path):
    nodes = [helper.make_node(op, [f"x{i}"], [f"y{i}"], **attrs) for i, (op, attrs, _) in enumerate(ATTRIBUTES)]
    model = _model(nodes, [(f"x{i}", F, [len(x)]) for i, (_, _, x) in enumerate(ATTRIBUTES)],
                   [(f"y{i}", F, None) for i in range(len(ATTRIBUTES))])
    _convert(model, {f"x{i}": x for i, (_, _, x) in enumerate(ATTRIBUTES)}, tmp_path)


def test_isinf(tmp_path):
    """Each combination of ``detect_positive`` and ``detect_negative`` (neither: never true)."""
    flags = [(1, 1), (1, 0), (0, 1), (0, 0)]
    nodes = [helper.make_node("IsInf", ["x"], [f"y{p}{n}"], detect_positive=p, detect_negative=n) for p, n in flags]
    model = _model(nodes, [("x", F, [6])], [(f"y{p}{n}", TensorProto.BOOL, None) for p, n in flags])
    _convert(model, {"x": np.array([-np.inf, -3e38, 0.0, np.nan, 3e38, np.inf], np.float32)}, tmp_path)


TIES = np.array([[[1, 3, 3, 0], [2, 2, 2, 2], [5, 1, 5, 5]], [[0, 0, 1, 1], [4, -1, 4, -1], [7, 7, 7, 0]]],
                np.float32)


@pytest.mark.slow
def test_arg_reduce_select_last_index(tmp_path):
    """The last (and by default the first) of tied extremes, along each axis, with and without keepdims."""
    cases = [(op, axis, keep) for op in ("ArgMax", "ArgMin") for axis, keep in ((-1, 1), (1, 0), (0, 1))]
    nodes = [helper.make_node(op, ["x"], [f"{op}{i}{last}"], axis=axis, keepdims=keep, select_last_index=last)
             for i, (op, axis, keep) in enumerate(cases) for last in (0, 1)]
    model = _model(nodes, [("x", F, list(TIES.shape))], [(n.output[0], I64, None) for n in nodes], 13)
    _convert(model, {"x": TIES}, tmp_path)


@pytest.mark.parametrize("opset,axes", [(13, (-1, 1)), (11, (1, 2))])
@pytest.mark.slow
def test_hardmax_and_log_softmax(opset, axes, tmp_path):
    """Hardmax marks the first of tied maxima; LogSoftmax stays finite where softmax underflows; before opset 13
    both work over the axes from ``axis`` on, flattened."""
    x = TIES * 30.0
    nodes = [helper.make_node(op, ["x"], [f"{op}{axis}"], axis=axis)
             for op in ("Hardmax", "LogSoftmax") for axis in axes]
    model = _model(nodes, [("x", F, list(x.shape))], [(n.output[0], F, None) for n in nodes], opset)
    _convert(model, {"x": x}, tmp_path, atol=1e-5)


def test_max_min_any_number_of_inputs(tmp_path):
    nodes = [helper.make_node(op, inputs, [f"{op}{len(inputs)}"]) for op in ("Max", "Min")
             for inputs in (["a"], ["a", "b"], ["a", "b", "c"])]
    outputs = [(n.output[0], F, None) for n in nodes]
    model = _model(nodes, [("a", F, [3]), ("b", F, [3]), ("c", F, [2, 1])], outputs, 13)
    feeds = {"a": np.array([3, 2, 1], np.float32), "b": np.array([1, 3, 2], np.float32),
             "c": np.array([[2], [0]], np.float32)}
    _convert(model, feeds, tmp_path)


@pytest.mark.slow
def test_pow_keeps_the_base_dtype(tmp_path):
    """Int base, float exponent: the power truncated toward zero, in the base's dtype (negative bases too); int
    base and exponent: a negative exponent truncates to 0 unless the base is 1 or -1."""
    pairs = [(I32, F), (I64, F), (F, I32), (F, I64), (I32, I32), (I64, I64)]
    nodes = [helper.make_node("Pow", [f"x{i}", f"y{i}"], [f"z{i}"]) for i in range(len(pairs))]
    inputs = [(f"{v}{i}", t, [6]) for i, pair in enumerate(pairs) for v, t in zip("xy", pair)]
    model = _model(nodes, inputs, [(f"z{i}", base, None) for i, (base, _) in enumerate(pairs)], 15)
    feeds = {}
    for i, (base, exponent) in enumerate(pairs):
        ints = base != F and exponent != F
        feeds[f"x{i}"] = np.array([2, -1, -1, 1, 7, -2] if ints else [2, 3, -3, 5, 7, -2], NP[base])
        feeds[f"y{i}"] = np.array([0.5, 2, 3, 1.5, 0, 3] if exponent == F else [-1, -3, -2, -5, 0, 3] if ints
                                  else [3, 2, 3, 1, 0, 3], NP[exponent])
    _convert(model, feeds, tmp_path)


@pytest.mark.slow
def test_mod_fmod_float16(tmp_path):
    model = _model([helper.make_node("Mod", ["x", "y"], ["z"], fmod=1)],
                   [("x", TensorProto.FLOAT16, [6]), ("y", TensorProto.FLOAT16, [6])],
                   [("z", TensorProto.FLOAT16, None)], 13)
    feeds = {"x": np.array([-4.0, 7.0, 5.0, 4.0, -7.0, 8.0], np.float16),
             "y": np.array([2.0, -3.0, 8.0, -2.0, 3.0, 5.0], np.float16)}
    _convert(model, feeds, tmp_path, atol=1e-3, rtol=1e-3)


def test_clip_with_computed_bounds(tmp_path):
    """min and max reduced from other inputs at run time (rank 0), min > max giving max; integer x too."""
    nodes = [helper.make_node("ReduceMin", ["lo"], ["lo0"], keepdims=0),
             helper.make_node("ReduceMax", ["hi"], ["hi0"], keepdims=0),
             helper.make_node("Clip", ["x", "lo0", "hi0"], ["y"]),
             helper.make_node("Clip", ["x", "", "lo0"], ["only_max"]),
             helper.make_node("Clip", ["x", "hi0", "lo0"], ["crossed"]),
             helper.make_node("Cast", ["lo0"], ["lo_i"], to=I32),
             helper.make_node("Clip", ["n", "lo_i"], ["n_clipped"])]
    model = _model(nodes, [("x", F, [5]), ("lo", F, [2]), ("hi", F, [2]), ("n", I32, [5])],
                   [("y", F, None), ("only_max", F, None), ("crossed", F, None), ("n_clipped", I32, None)], 13)
    feeds = {"x": np.array([-3, -1, 0, 1, 3], np.float32), "lo": np.array([-1.5, 0.5], np.float32),
             "hi": np.array([0.5, 2.0], np.float32), "n": np.array([-3, -1, 0, 1, 3], np.int32)}
    _convert(model, feeds, tmp_path)


def test_evaluator_applies_mil_epsilons():
    """MIL's log and inverse add their ``epsilon`` (1e-45 and 1e-4 by default): the host kernels must too, or a
    lowering that forgets to zero it would pass unnoticed."""
    from onnxbridge.backends.coreml.evaluate import KERNELS

    x = np.array([0.0, 1.0], np.float32)
    assert np.allclose(KERNELS["inverse"](x=np.array([1.0], np.float32)), 1 / 1.0001)
    assert np.isfinite(KERNELS["log"](x=x)).all() and KERNELS["log"](x=x, epsilon=np.float32(0))[0] == -np.inf


def test_shrink_of_integers_with_fractional_lambd_is_refused(tmp_path):
    model = _model([helper.make_node("Shrink", ["x"], ["y"], lambd=0.5)], [("x", I32, [3])], [("y", I32, None)])
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    with pytest.raises(UnsupportedError, match="Shrink.*lambd=0.5"):
        onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage",
                           inputs={"x": np.array([-1, 0, 1], np.int32)})


EINSUM = [("...ii->...i", [3, 5, 5]), ("i,i", [5], [5]), ("ij->i", [3, 4]), ("ij->ji", [3, 4]), ("ii", [4, 4]),
          ("bij,bjk->bik", [2, 3, 4], [2, 4, 5]), ("bhqd,bhkd->bhqk", [2, 3, 4, 5], [2, 3, 6, 5]),
          ("ij,jk", [3, 4], [4, 2]), ("abc,cd->abd", [2, 3, 4], [4, 5]),
          ("...ij,...jk->...ik", [2, 1, 3, 4], [1, 5, 4, 2]), ("ijk,ik->j", [2, 3, 4], [2, 4]),
          ("iij,j->ij", [3, 3, 2], [2])]


@pytest.mark.slow
def test_einsum_forms(tmp_path):
    """Diagonals, traces, sums, transposes, implicit outputs, ellipses that broadcast, batched and merged matrix
    products."""
    nodes, inputs, feeds, rng = [], [], {}, np.random.default_rng(0)
    for i, (eq, *shapes) in enumerate(EINSUM):
        names = [f"x{i}_{k}" for k in range(len(shapes))]
        nodes.append(helper.make_node("Einsum", names, [f"y{i}"], equation=eq))
        inputs += [(n, F, s) for n, s in zip(names, shapes)]
        feeds.update({n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)})
    model = _model(nodes, inputs, [(f"y{i}", F, None) for i in range(len(EINSUM))], 12)
    _convert(model, feeds, tmp_path, atol=1e-5)


@pytest.mark.slow
def test_bitwise_and_det(tmp_path):
    """And/Or/Xor on int32 extremes and negatives, int16 and broadcast uint8 operands; Det of 1x1 to 4x4
    matrices (batched), singular ones included."""
    i32 = np.array([0, -1, 1, 7, -8, 2**31 - 1, -2**31, 123456789, -987654321], np.int32)
    kinds = [(I32, "a", "b", [9]), (TensorProto.INT16, "c", "d", [9]), (TensorProto.UINT8, "e", "f", [2, 9])]
    nodes = [helper.make_node(f"Bitwise{op}", [x, y], [f"{op}{x}"]) for op in ("And", "Or", "Xor")
             for _, x, y, _ in kinds]
    nodes += [helper.make_node("Det", [f"m{n}"], [f"det{n}"]) for n in (1, 2, 3, 4)]
    inputs = [(v, t, shape) for t, x, y, shape in kinds for v in (x, y)]
    inputs += [(f"m{n}", F, [2, n, n]) for n in (1, 2, 3, 4)]
    outputs = [(n.output[0], next(t for t, x, _, _ in kinds if n.input[0] == x), None) for n in nodes[:9]]
    singular = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 5]], np.float32)
    feeds = {"a": i32, "b": np.roll(i32, 3), "c": i32.astype(np.int16), "d": np.roll(i32, 4).astype(np.int16),
             "e": np.array([[0, 1, 255, 128, 7, 8, 200, 15, 16]] * 2, np.uint8),
             "f": np.array([[255, 3, 170, 85, 0, 9, 55, 240, 16]] * 2, np.uint8),
             **{f"m{n}": np.random.default_rng(n).standard_normal((2, n, n)).astype(np.float32) for n in (1, 2, 4)},
             "m3": np.stack([singular, singular.T + 1])}
    model = _model(nodes, inputs, outputs + [(f"det{n}", F, None) for n in (1, 2, 3, 4)])
    _convert(model, feeds, tmp_path, atol=1e-5)


def test_tie_breaking_over_a_flexible_axis(tmp_path):
    """The positions along a flexible axis are counted at run time (range_1d of the axis' size)."""
    nodes = [helper.make_node("ArgMin", ["x"], ["last"], axis=0, select_last_index=1),
             helper.make_node("Hardmax", ["x"], ["h"], axis=0)]
    model = _model(nodes, [("x", F, ["seq", 4])], [("last", I64, None), ("h", F, None)], 13)
    rep = _convert(model, {"x": TIES[1]}, tmp_path)
    assert rep["artifact"]["backend"]["flexible_inputs"]


@pytest.mark.slow
def test_where_with_a_wider_condition_and_integer_division(tmp_path):
    """Where's condition broadcasting past both values (MIL's select would type the result by the values: the
    reduction after it would be refused); integer Div and Mod round toward zero / floor as ONNX."""
    one, zero = helper.make_tensor("one", F, [], [1.0]), helper.make_tensor("zero", F, [], [0.0])
    axis = helper.make_tensor("axis", I64, [1], [1])
    nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in (one, zero, axis)]
    nodes += [helper.make_node("Greater", ["x", "zero"], ["c"]), helper.make_node("Where", ["c", "one", "zero"], ["w"]),
              helper.make_node("ReduceSum", ["w", "axis"], ["s"], keepdims=0),
              helper.make_node("Where", ["c", "n3", "d3"], ["wi"]),
              helper.make_node("Div", ["n", "d"], ["q"]), helper.make_node("Mod", ["n", "d"], ["m"]),
              helper.make_node("Mod", ["n", "d"], ["fm"], fmod=1)]
    model = _model(nodes, [("x", F, [2, 3]), ("n3", I32, [3]), ("d3", I32, [3]), ("n", I32, [6]), ("d", I32, [6])],
                   [("w", F, None), ("s", F, None), ("wi", I32, None), ("q", I32, None),
                    ("m", I32, None), ("fm", I32, None)], 17)
    feeds = {"x": np.array([[1, -1, 2], [-3, 0, 4]], np.float32), "n3": np.arange(3, dtype=np.int32),
             "d3": -np.arange(3, dtype=np.int32),
             "n": np.array([7, -7, 7, -7, 6, -6], np.int32), "d": np.array([2, 2, -2, -2, 3, 4], np.int32)}
    _convert(model, feeds, tmp_path)


@pytest.mark.slow
def test_bit_shift_right_and_left_refused(tmp_path):
    """RIGHT on uint8 and uint16 (shifts past the width give 0); LEFT, which wraps at the type's width, is refused."""
    u8, u16 = TensorProto.UINT8, TensorProto.UINT16
    nodes = [helper.make_node("BitShift", [x, y], [f"r{x}"], direction="RIGHT") for x, y in (("a", "b"), ("c", "d"))]
    model = _model(nodes, [("a", u8, [5]), ("b", u8, [5]), ("c", u16, [5]), ("d", u16, [5])],
                   [("ra", u8, None), ("rc", u16, None)])
    feeds = {"a": np.array([255, 16, 1, 200, 7], np.uint8), "b": np.array([1, 4, 0, 9, 2], np.uint8),
             "c": np.array([65535, 1024, 3, 40000, 9], np.uint16), "d": np.array([15, 10, 1, 40, 0], np.uint16)}
    _convert(model, feeds, tmp_path)
    left = _model([helper.make_node("BitShift", ["a", "b"], ["l"], direction="LEFT")], [("a", u8, [5]), ("b", u8, [5])],
                  [("l", u8, None)])
    onnx.save(left, tmp_path / "left.onnx")
    with pytest.raises(UnsupportedError, match="BitShift.*direction=LEFT"):
        onnxbridge.convert(tmp_path / "left.onnx", to="coreml", output=tmp_path / "l.mlpackage",
                           inputs={k: feeds[k] for k in "ab"})


@pytest.mark.slow
def test_dropout_at_inference_and_training_refused(tmp_path):
    """Inference Dropout (no training_mode, any run-time ratio) is x with an all-true mask; training mode with a
    non-zero ratio draws random numbers and is refused, as is a training_mode known only at run time."""
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    node = helper.make_node("Dropout", ["x", "r"], ["y", "mask"])
    model = _model([node], [("x", F, [3, 4]), ("r", F, [])], [("y", F, [3, 4]), ("mask", TensorProto.BOOL, [3, 4])])
    _convert(model, {"x": x, "r": np.array(0.5, np.float32)}, tmp_path)
    ratio = onnx.helper.make_tensor("ratio", F, [], [0.5])
    for training, match in ((onnx.helper.make_tensor("t", TensorProto.BOOL, [], [True]), "draws a random mask"),
                            (None, "training_mode must be a constant")):
        nodes = [helper.make_node("Dropout", ["x", "ratio", "t"], ["y"])]
        inputs = [("x", F, [3, 4])] + ([("t", TensorProto.BOOL, [])] if training is None else [])
        m = _model(nodes, inputs, [("y", F, [3, 4])])
        m.graph.initializer.extend([ratio] + ([training] if training is not None else []))
        onnx.save(m, tmp_path / "t.onnx")
        with pytest.raises(UnsupportedError, match=match):
            onnxbridge.convert(tmp_path / "t.onnx", to="coreml", output=tmp_path / "t.mlpackage",
                               inputs={"x": x, **({"t": np.array(True)} if training is None else {})})
