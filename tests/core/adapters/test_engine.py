"""The adapter engine: Softmax family and attribute<->input moves across opsets, blockers, linear walk."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge import adapters
from onnxbridge.errors import UnsupportedError
from tests.core.adapters.helpers import model, roundtrip

F, H = TensorProto.FLOAT, TensorProto.FLOAT16
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [F, H], ids=["fp32", "fp16"])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("src, dst", [(13, 12), (13, 7), (11, 13), (11, 21), (7, 21), (21, 11)])
def test_softmax_family(op, axis, src, dst, dtype):
    if src < 11 and axis < 0 or dtype == H and op == "Hardmax" and min(src, dst) < 13:
        pytest.skip("negative axes need opset 11; onnxruntime has no fp16 Hardmax before 13")
    np_type = np.float32 if dtype == F else np.float16
    m = model([helper.make_node(op, ["x"], ["y"], axis=axis, name="n")], [("x", dtype, [2, 3, 4])],
              [("y", dtype, [2, 3, 4])], src)
    x = RNG.standard_normal((2, 3, 4)).astype(np_type)
    roundtrip(m, dst, {"x": x}, atol=1e-5 if dtype == F else 2e-3)


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
@pytest.mark.parametrize("src, dst", [(11, 13), (13, 11), (21, 7), (7, 21)])
def test_squeeze_unsqueeze_axes(op, src, dst):
    axes = [1] if op == "Squeeze" else [0, 3]
    shape = [2, 1, 3] if op == "Squeeze" else [2, 3]
    out_shape = [2, 3] if op == "Squeeze" else [1, 2, 3, 1]
    if src >= 13:
        node = helper.make_node(op, ["x", "axes"], ["y"], name="n")
        inits = [numpy_helper.from_array(np.array(axes, np.int64), "axes")]
    else:
        node, inits = helper.make_node(op, ["x"], ["y"], axes=axes, name="n"), []
    m = model([node], [("x", F, shape)], [("y", F, out_shape)], src, inits)
    roundtrip(m, dst, {"x": RNG.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("dst", [7, 11, 12, 13, 17, 18, 21])
def test_reduce_axes_and_keepdims(op, dst):
    src = 18
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0, name="n")
    m = model([node], [("x", F, [2, 3, 4])], [("y", F, [2])], src,
              [numpy_helper.from_array(np.array([-1, 1], np.int64), "axes")])
    out = roundtrip(m, dst, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)}, atol=1e-5)
    if dst < 11:  # negative axes only exist from 11: made positive with the known rank
        assert list(out.graph.node[0].attribute[-1].ints) == [2, 1]


def test_reduce_with_runtime_axes_is_refused_naming_the_node():
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean_over_runtime_axes")
    m = model([node], [("x", F, [2, 3]), ("axes", TensorProto.INT64, [1])], [("y", F, [1, 1])], 18)
    with pytest.raises(UnsupportedError, match="'mean_over_runtime_axes' \\(ReduceMean\\).*computed at run time"):
        adapters.adapt(m, 17)


@pytest.mark.parametrize("src, dst", [(11, 13), (13, 11), (13, 18), (18, 13), (18, 11), (7, 18)])
def test_split(src, dst):
    if src >= 13:
        node = helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1, name="n")
        inits = [numpy_helper.from_array(np.array([1, 3], np.int64), "split")]
    else:
        node, inits = helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3], name="n"), []
    m = model([node], [("x", F, [2, 4])], [("a", F, [2, 1]), ("b", F, [2, 3])], src, inits)
    roundtrip(m, dst, {"x": RNG.standard_normal((2, 4)).astype(np.float32)})


def test_split_18_uneven_num_outputs_down():
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3, name="n")
    m = model([node], [("x", F, [7])], [("a", F, [3]), ("b", F, [3]), ("c", F, [1])], 18)
    roundtrip(m, 13, {"x": np.arange(7, dtype=np.float32)})


@pytest.mark.parametrize("src, dst", [(9, 10), (10, 9), (13, 7), (7, 13), (11, 10)])
def test_slice(src, dst):
    if src >= 10:
        node = helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="n")
        inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
                 (("s", [1, 0]), ("e", [3, -1]), ("a", [0, 1]))]
    else:
        node, inits = helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 1], name="n"), []
    m = model([node], [("x", F, [4, 5])], [("y", F, [2, 4])], src, inits)
    roundtrip(m, dst, {"x": RNG.standard_normal((4, 5)).astype(np.float32)})


@pytest.mark.parametrize("src, dst", [(9, 10), (10, 9), (11, 9), (9, 11), (11, 21)])
def test_topk(src, dst):
    if src >= 10:
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="n")
        inits = [numpy_helper.from_array(np.array([2], np.int64), "k")]
    else:
        node, inits = helper.make_node("TopK", ["x"], ["v", "i"], axis=1, k=2, name="n"), []
    m = model([node], [("x", F, [3, 5])], [("v", F, [3, 2]), ("i", TensorProto.INT64, [3, 2])], src, inits)
    roundtrip(m, dst, {"x": RNG.permutation(15).reshape(3, 5).astype(np.float32)})


def test_negative_axis_below_11_is_made_positive():
    m = model([helper.make_node("Concat", ["a", "b"], ["y"], axis=-1, name="cat")],
              [("a", F, [2, 3]), ("b", F, [2, 2])], [("y", F, [2, 5])], 13)
    out = roundtrip(m, 9, {"a": np.ones((2, 3), np.float32), "b": np.zeros((2, 2), np.float32)})
    assert out.graph.node[0].attribute[0].i == 1


@pytest.mark.slow
def test_walk_is_linear():
    """20,000 nodes down and up in well under a second each (onnx.version_converter: 7.5-9.3 s down)."""
    import time

    n = 20_000
    nodes = [helper.make_node("Unsqueeze", [f"v{i}"], [f"u{i}"], axes=[0], name=f"u{i}") if i % 2 == 0 else
             helper.make_node("Squeeze", [f"u{i - 1}"], [f"v{i + 1}"], axes=[0], name=f"s{i}") for i in range(n)]
    m = model(nodes, [("v0", F, [3])], [(f"v{n}", F, [3])], 12)
    t = time.perf_counter()
    up = adapters.adapt(m, 13)
    t_up = time.perf_counter() - t
    t = time.perf_counter()
    adapters.adapt(up, 11)
    t_down = time.perf_counter() - t
    assert t_up < 5 and t_down < 5, (t_up, t_down)  # generous for a loaded CI machine; see benchmarks/


def test_computed_axes_are_folded_before_downgrading():
    """axes = Concat(Constant, Sub(Size(Shape(x)), 1)): known before run time, so ReduceMean-18 -> 17 works."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    nodes = [
        helper.make_node("Constant", [], ["first"], value=numpy_helper.from_array(np.array([0], np.int64))),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["shape"], ["rank0"]),
        helper.make_node("Unsqueeze", ["rank0", "zero_axis"], ["rank"]),
        helper.make_node("Sub", ["rank", "one"], ["last"]),
        helper.make_node("Concat", ["first", "last"], ["axes"], axis=0),
        helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0, name="mean"),
    ]
    inits = [one, numpy_helper.from_array(np.array([0], np.int64), "zero_axis")]
    m = model(nodes, [("x", F, [2, 3, 4])], [("y", F, [3])], 18, inits)
    out = roundtrip(m, 13, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)})
    mean = next(n for n in out.graph.node if n.op_type == "ReduceMean")
    assert list(next(a for a in mean.attribute if a.name == "axes").ints) == [0, 2]
