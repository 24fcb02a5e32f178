"""Single-feature steps in both directions; refusals name the node and the feature."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from onnxbridge.adapters import engine
from onnxbridge.errors import UnsupportedError
from tests.core.adapters.helpers import model, roundtrip

rng = np.random.default_rng(0)


def refused(m, target, *words):
    with pytest.raises(UnsupportedError) as info:
        engine.convert(m, target)
    for w in ("'n'",) + words:
        assert w in str(info.value), str(info.value)


def attrs_of(m, op):
    return {a.name: helper.get_attribute_value(a) for n in m.graph.node if n.op_type == op for a in n.attribute}


# Reshape 14 ---------------------------------------------------------------------------------------
def reshape(opset, shape, **attrs):
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="n", **attrs)
    out = [4, 6] if shape[0] == 4 else [2, 12]
    return model([node], [("x", T.FLOAT, [2, 3, 4])], [("y", T.FLOAT, out)], opset,
                 [numpy_helper.from_array(np.array(shape, np.int64), "s")])


@pytest.mark.parametrize("allowzero", [0, 1])
@pytest.mark.parametrize("target", [13, 7])
def test_reshape_down(allowzero, target):
    out = roundtrip(reshape(14, [4, -1], allowzero=allowzero), target, {"x": rng.random((2, 3, 4), np.float32)})
    assert "allowzero" not in attrs_of(out, "Reshape")


def test_reshape_up():
    roundtrip(reshape(13, [0, -1]), 14, {"x": rng.random((2, 3, 4), np.float32)})


def test_reshape_allowzero_refused():
    refused(reshape(14, [0, -1], allowzero=1), 13, "allowzero")


# Gemm 11 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("et,dt", [(T.FLOAT, np.float32), (T.FLOAT16, np.float16), (T.DOUBLE, np.float64)])
@pytest.mark.parametrize("target", [10, 9, 7])
def test_gemm_without_c(et, dt, target):
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="n", transB=1, alpha=0.5)
    m = model([node], [("a", et, [2, 3]), ("b", et, [4, 3])], [("y", et, [2, 4])], 13)
    out = roundtrip(m, target, {"a": rng.random((2, 3)).astype(dt), "b": rng.random((4, 3)).astype(dt)},
                    1e-2 if dt is np.float16 else 1e-5)
    assert len(out.graph.node[0].input) == 3


# ArgMax / ArgMin 12, GatherND 12, DepthToSpace 11, RNN 14 -----------------------------------------
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_select_last(op):
    def arg(opset, **attrs):
        node = helper.make_node(op, ["x"], ["y"], name="n", axis=1, **attrs)
        return model([node], [("x", T.FLOAT, [3, 4])], [("y", T.INT64, [3, 1])], opset)

    roundtrip(arg(13, select_last_index=0), 11, {"x": rng.integers(0, 2, (3, 4)).astype(np.float32)})
    roundtrip(arg(11), 13, {"x": rng.integers(0, 2, (3, 4)).astype(np.float32)})
    refused(arg(13, select_last_index=1), 11, "select_last_index")


def test_gather_nd():
    def gnd(batch_dims):
        node = helper.make_node("GatherND", ["x", "i"], ["y"], name="n", batch_dims=batch_dims)
        out = [2, 3] if batch_dims == 0 else [2]
        return model([node], [("x", T.FLOAT, [2, 3]), ("i", T.INT64, [2, 1])], [("y", T.FLOAT, out)], 13)

    roundtrip(gnd(0), 11, {"x": rng.random((2, 3), np.float32), "i": np.array([[0], [1]], np.int64)})
    refused(gnd(1), 11, "batch_dims")


@pytest.mark.parametrize("mode", ["DCR", None])
def test_depth_to_space(mode):
    attrs = {"mode": mode} if mode else {}
    node = helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=2, **attrs)
    m = model([node], [("x", T.FLOAT, [1, 8, 2, 3])], [("y", T.FLOAT, [1, 2, 4, 6])], 13)
    out = roundtrip(m, 9, {"x": rng.random((1, 8, 2, 3), np.float32)})
    assert "mode" not in attrs_of(out, "DepthToSpace")
    roundtrip(out, 13, {"x": rng.random((1, 8, 2, 3), np.float32)})


def test_depth_to_space_crd_refused():
    node = helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=2, mode="CRD")
    refused(model([node], [("x", T.FLOAT, [1, 8, 2, 3])], [("y", T.FLOAT, [1, 2, 4, 6])], 13), 10, "CRD")


@pytest.mark.parametrize("op,outs", [("RNN", 2), ("GRU", 2), ("LSTM", 3)])
def test_rnn_layout(op, outs):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    h, i, s, b = 3, 2, 4, 2
    names = ["y", "yh", "yc"][:outs]
    inits = [numpy_helper.from_array(rng.random((1, gates * h, i), np.float32), "w"),
             numpy_helper.from_array(rng.random((1, gates * h, h), np.float32), "r")]

    def rnn(layout):
        node = helper.make_node(op, ["x", "w", "r"], names, name="n", hidden_size=h, layout=layout)
        return model([node], [("x", T.FLOAT, [s, b, i])],
                     [("y", T.FLOAT, [s, 1, b, h])] + [(o, T.FLOAT, [1, b, h]) for o in names[1:]], 14, inits)

    out = roundtrip(rnn(0), 13, {"x": rng.random((s, b, i), np.float32)})
    roundtrip(out, 14, {"x": rng.random((s, b, i), np.float32)})
    refused(rnn(1), 13, "layout")


# Scatter family -----------------------------------------------------------------------------------
def scatter(op, opset, et=T.FLOAT, **attrs):
    node = helper.make_node(op, ["x", "i", "u"], ["y"], name="n", **attrs)
    shape = [3, 3] if op != "ScatterND" else [4]
    ishape, ushape = ([2, 3], [2, 3]) if op != "ScatterND" else ([2, 1], [2])
    return model([node], [("x", et, shape), ("i", T.INT64, ishape), ("u", et, ushape)], [("y", et, shape)], opset)


def scatter_feeds(op, dt=np.float32):
    if op == "ScatterND":
        return {"x": rng.random(4).astype(dt), "i": np.array([[1], [3]], np.int64), "u": rng.random(2).astype(dt)}
    return {"x": rng.random((3, 3)).astype(dt), "i": np.array([[1, 0, 2], [0, 2, 1]], np.int64),
            "u": rng.random((2, 3)).astype(dt)}


@pytest.mark.parametrize("et,dt", [(T.FLOAT, np.float32), (T.FLOAT16, np.float16), (T.INT32, np.int32)])
@pytest.mark.parametrize("target", [11, 13])
def test_scatter_up(et, dt, target):
    out = roundtrip(scatter("Scatter", 9, et, axis=1), target, scatter_feeds("Scatter", dt))
    assert [n.op_type for n in out.graph.node] == ["ScatterElements"]


@pytest.mark.parametrize("source", [11, 13, 18])
@pytest.mark.parametrize("target", [9, 10])
def test_scatter_elements_down(source, target):
    attrs = {"reduction": "none"} if source >= 16 else {}
    out = roundtrip(scatter("ScatterElements", source, axis=1, **attrs), target, scatter_feeds("ScatterElements"))
    assert [n.op_type for n in out.graph.node] == ["Scatter"]


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_scatter_reduction(op):
    feeds = scatter_feeds(op)
    roundtrip(scatter(op, 18, reduction="none"), 13, feeds)
    roundtrip(scatter(op, 18, reduction="add"), 16, feeds)
    roundtrip(scatter(op, 13), 18, feeds)
    refused(scatter(op, 18, reduction="add"), 15, "reduction")
    refused(scatter(op, 18, reduction="max"), 17, "reduction")


# Constant 12 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("attr,value,et,shape", [
    ("value_float", 2.5, T.FLOAT, []), ("value_floats", [1.0, 2.0], T.FLOAT, [2]),
    ("value_int", 7, T.INT64, []), ("value_ints", [1, 2, 3], T.INT64, [3])])
@pytest.mark.parametrize("target", [11, 9])
def test_constant_down(attr, value, et, shape, target):
    node = helper.make_node("Constant", [], ["c"], name="n", **{attr: value})
    add = helper.make_node("Add", ["c", "x"], ["y"], name="add")
    m = model([node, add], [("x", et, shape)], [("y", et, shape)], 13)
    out = roundtrip(m, target, {"x": np.ones(shape, np.float32 if et == T.FLOAT else np.int64)})
    assert list(attrs_of(out, "Constant")) == ["value"]


def test_constant_strings_down():
    node = helper.make_node("Constant", [], ["y"], name="n", value_strings=["a", "bc"])
    out, _ = engine.convert(model([node], [], [("y", T.STRING, [2])], 13), 11)
    assert list(numpy_helper.to_array(out.graph.node[0].attribute[0].t)) == ["a", "bc"]


def test_constant_sparse_refused():
    sparse = helper.make_sparse_tensor(helper.make_tensor("v", T.FLOAT, [1], [1.0]),
                                       helper.make_tensor("i", T.INT64, [1], [1]), [3])
    node = helper.make_node("Constant", [], ["y"], name="n", sparse_value=sparse)
    refused(model([node], [], [("y", T.FLOAT, [3])], 13), 10, "sparse_value")


# Cast 19 ------------------------------------------------------------------------------------------
def test_cast_saturate_dropped():
    node = helper.make_node("Cast", ["x"], ["y"], name="n", to=T.FLOAT16, saturate=1)
    m = model([node], [("x", T.FLOAT, [4])], [("y", T.FLOAT16, [4])], 19)
    out = roundtrip(m, 13, {"x": np.array([1, 2.5, 7e4, -1], np.float32)})
    assert "saturate" not in attrs_of(out, "Cast")


def test_cast_float8_refused():
    node = helper.make_node("Cast", ["x"], ["y"], name="n", to=T.FLOAT8E4M3FN)
    refused(model([node], [("x", T.FLOAT, [4])], [("y", T.FLOAT8E4M3FN, [4])], 19), 18, "float8")


# QuantizeLinear / DequantizeLinear ----------------------------------------------------------------
def qdq(opset, scale_shape=(), zp=True, qattrs=None, dattrs=None, qtype=T.UINT8):
    q = helper.make_node("QuantizeLinear", ["x", "s"] + (["z"] if zp else []), ["q"], name="n", **(qattrs or {}))
    d = helper.make_node("DequantizeLinear", ["q", "s"] + (["z"] if zp else []), ["y"], name="d",
                         **(dattrs or {}))
    n = int(np.prod(scale_shape))
    inits = [numpy_helper.from_array((rng.random(scale_shape) * 0.1 + 0.01).astype(np.float32), "s")]
    if zp:
        zdt = helper.tensor_dtype_to_np_dtype(qtype)
        inits.append(numpy_helper.from_array(np.full(scale_shape, 3 if n else 3, zdt), "z"))
    return model([q, d], [("x", T.FLOAT, [2, 3, 4])], [("q", qtype, [2, 3, 4]), ("y", T.FLOAT, [2, 3, 4])],
                 opset, inits)


@pytest.mark.parametrize("source,target", [(13, 10), (19, 13), (21, 13), (23, 10), (10, 23), (13, 21)])
def test_qdq_per_tensor(source, target):
    roundtrip(qdq(source), target, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


def test_qdq_attrs_dropped():
    m = qdq(23, qattrs={"saturate": 1, "block_size": 0, "output_dtype": T.UINT8, "precision": T.FLOAT},
            dattrs={"block_size": 0, "output_dtype": T.FLOAT})
    out = roundtrip(m, 10, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})
    assert not attrs_of(out, "QuantizeLinear") and not attrs_of(out, "DequantizeLinear")


def test_qdq_per_axis():
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    roundtrip(qdq(21, (3,), qattrs={"axis": 1}, dattrs={"axis": 1}), 13, feeds)
    refused(qdq(13, (3,), qattrs={"axis": 1}, dattrs={"axis": 1}), 12, "per-axis")


def test_qdq_refusals():
    refused(qdq(21, (2, 3, 2), qattrs={"block_size": 2, "axis": 2}), 19, "block_size")
    refused(qdq(23, zp=False, qattrs={"output_dtype": T.INT8}, qtype=T.INT8), 19, "output_dtype")
    refused(qdq(21, qtype=T.INT4), 19, "int4")
    refused(qdq(19, qtype=T.FLOAT8E4M3FN, qattrs={"saturate": 0}), 18, "saturate")
    refused(qdq(19, qtype=T.FLOAT8E4M3FN), 18, "float8")


# GroupNormalization 21 ----------------------------------------------------------------------------
def test_group_norm_up_rule():
    """18 -> 21 cannot run through the engine (GroupNormalization-18 is deprecated, so opset-18 models
    holding it are refused); the rule itself repeats per-group scale/bias over channels."""
    from onnxbridge.adapters.rewriter import Rewriter
    from onnxbridge.adapters.rules.misc import group_norm_up_21

    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="n", num_groups=2)
    graph = helper.make_graph([node], "g", [], [], [numpy_helper.from_array(np.array([1, 2], np.float32), "s"),
                                                    numpy_helper.from_array(np.array([3, 4], np.float32), "b")])
    rw = Rewriter(graph, {"x": (T.FLOAT, (1, 4, 3))})
    assert group_norm_up_21(node, rw) is None
    assert [list(rw.const(n)) for n in node.input[1:]] == [[1, 1, 2, 2], [3, 3, 4, 4]]


# GridSample 16 <-> 20 -----------------------------------------------------------------------------
def grid(opset, mode=None, et=T.FLOAT, xshape=(1, 2, 4, 5)):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], name="n", **({"mode": mode} if mode else {}))
    gshape = [xshape[0], 3, 2, len(xshape) - 2]
    return model([node], [("x", et, list(xshape)), ("g", et, gshape)], [("y", et, list(xshape[:2]) + [3, 2])],
                 opset)


def grid_feeds(dt=np.float32):
    return {"x": rng.random((1, 2, 4, 5)).astype(dt), "g": (rng.random((1, 3, 2, 2)) * 2.2 - 1.1).astype(dt)}


@pytest.mark.parametrize("mode16,mode20", [("bilinear", "linear"), ("bicubic", "cubic"), ("nearest", "nearest"),
                                           (None, None)])
def test_grid_sample(mode16, mode20):
    out = roundtrip(grid(16, mode16), 20, grid_feeds())
    assert attrs_of(out, "GridSample")["mode"].decode() == (mode20 or "linear")
    out = roundtrip(grid(20, mode20), 16, grid_feeds())
    assert attrs_of(out, "GridSample")["mode"].decode() == (mode16 or "bilinear")
    roundtrip(grid(22, mode20), 16, grid_feeds())


def test_grid_sample_5d_refused():
    refused(grid(20, "linear", xshape=(1, 2, 3, 4, 5)), 19, "4-D")


# DFT 17 <-> 20 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 1, 2, -2])
def test_dft(axis):
    x = {"x": rng.random((2, 4, 6, 1), np.float32)}
    node = helper.make_node("DFT", ["x"], ["y"], name="n", **({"axis": axis} if axis is not None else {}))
    m17 = model([node], [("x", T.FLOAT, [2, 4, 6, 1])], [("y", T.FLOAT, [2, 4, 6, 2])], 17)
    out = roundtrip(m17, 20, x, 1e-4)
    roundtrip(out, 17, x, 1e-4)
    inputs = ["x", ""] + (["a"] if axis is not None else [])
    node = helper.make_node("DFT", inputs, ["y"], name="n")
    init = [numpy_helper.from_array(np.array(axis, np.int64), "a")] if axis is not None else []
    m20 = model([node], [("x", T.FLOAT, [2, 4, 6, 1])], [("y", T.FLOAT, [2, 4, 6, 2])], 20, init)
    roundtrip(m20, 17, x, 1e-4)


def test_dft_runtime_axis_refused():
    node = helper.make_node("DFT", ["x", "", "a"], ["y"], name="n")
    m = model([node], [("x", T.FLOAT, [2, 4, 6, 1]), ("a", T.INT64, [])], [("y", T.FLOAT, [2, 4, 6, 2])], 20)
    refused(m, 19, "axis")


def test_scatter_elements_negative_indices():
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="n", axis=-1)
    m = model([node], [("x", T.FLOAT, [3, 3]), ("u", T.FLOAT, [2, 3])], [("y", T.FLOAT, [3, 3])], 13,
              [numpy_helper.from_array(np.array([[-1, 0, 2], [0, -3, 1]], np.int64), "i")])
    out = roundtrip(m, 9, {"x": rng.random((3, 3), np.float32), "u": rng.random((2, 3), np.float32)})
    assert (numpy_helper.to_array(out.graph.initializer[-1]) >= 0).all()
