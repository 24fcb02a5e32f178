"""Single-feature steps: new attributes refused or dropped going down, renamed ops and modes."""
from __future__ import annotations

import numpy as np

from onnxbridge.adapters.registry import down, up
from onnxbridge.adapters.rewriter import attr_to_input, drop_attr, drop_default, get_attr, refuse, set_attr, set_input

FLOAT8 = (17, 18, 19, 20, 23)  # float8e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, float8e8m0


@down("Reshape", 14)
def reshape_down_14(node, rw):
    """allowzero=1 matters only when the shape holds a 0."""
    if get_attr(node, "allowzero", 0):
        shape = rw.const(node.input[1])
        if shape is None or np.any(shape == 0):
            refuse("allowzero=1 (a 0 in the shape meaning an empty dimension) has no older equivalent")
    drop_attr(node, "allowzero")


@down("Gemm", 11)
def gemm_down_11(node, rw):
    """C is required before 11: a zero scalar of the input type."""
    import onnx

    if len(node.input) > 2 and node.input[2]:
        return None
    et = rw.elem_type(node.input[0])
    if et is None:
        refuse("C is missing and the input type is unknown, so a zero C cannot be made")
    set_input(node, 2, rw.constant(np.array(0, onnx.helper.tensor_dtype_to_np_dtype(et)), f"{node.name}_C"))


@down(("ArgMax", "ArgMin"), 12)
def arg_down_12(node, rw):
    drop_default(node, "select_last_index", 0, "the last index of ties")


@down("GatherND", 12)
def gather_nd_down_12(node, rw):
    drop_default(node, "batch_dims", 0, "batched gather")


@down(("ScatterND", "ScatterElements"), 16)
def scatter_down_16(node, rw):
    drop_default(node, "reduction", "none", "reduction into the data")


@down(("ScatterND", "ScatterElements"), 18)
def scatter_down_18(node, rw):
    if get_attr(node, "reduction", b"none") in (b"max", b"min"):
        refuse(f"reduction={get_attr(node, 'reduction').decode()!r} needs opset 18")


@up("Scatter", 11)
def scatter_to_elements(node, rw):
    """Scatter is deprecated from 11: ScatterElements has the same inputs and axis."""
    node.op_type = "ScatterElements"
    return [node]


@down("ScatterElements", 11)
def elements_to_scatter(node, rw):
    """Before 11 the op is Scatter-9, whose indices are not documented as negative: constant ones are
    made non-negative (run-time ones are left as they are)."""
    indices = rw.const(node.input[1])
    if indices is not None and np.any(indices < 0):
        dims = rw.shape(node.input[0])
        axis = get_attr(node, "axis", 0)
        size = dims[axis % len(dims)] if dims else None
        if not isinstance(size, int):
            refuse("negative constant indices need the data shape along axis, which is unknown")
        set_input(node, 1, rw.constant((indices % size).astype(indices.dtype), f"{node.name}_indices"))
    node.op_type = "Scatter"
    return [node]


@down("DepthToSpace", 11)
def depth_to_space_down_11(node, rw):
    drop_default(node, "mode", "DCR", "column-row-depth order")


@down("Constant", 12)
def constant_down_12(node, rw):
    """value_float(s) / value_int(s) / value_string(s) become a value tensor."""
    from onnx import numpy_helper

    attr = node.attribute[0].name if node.attribute else None
    if attr not in ("value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings"):
        return None
    value = get_attr(node, attr)
    dtype = np.float32 if "float" in attr else np.int64 if "int" in attr else object
    array = np.array(list(value) if isinstance(value, list) else value, dtype=dtype)
    drop_attr(node, attr)
    set_attr(node, "value", numpy_helper.from_array(array, node.output[0]))


@down("Cast", 19)
def cast_down_19(node, rw):
    """saturate matters only for float8, which opset 18 lacks."""
    if get_attr(node, "to") in FLOAT8:
        refuse("a cast to float8 needs opset 19")
    drop_attr(node, "saturate")


@down(("RNN", "GRU", "LSTM"), 14)
def rnn_down_14(node, rw):
    drop_default(node, "layout", 0, "batch-first layout")


@down(("QuantizeLinear", "DequantizeLinear"), 13)
def quant_down_13(node, rw):
    """Before 13 the scale is one scalar (per-tensor)."""
    dims = rw.shape(node.input[1])
    if dims is None:
        refuse("the scale shape is unknown, and only a scalar (per-tensor) scale works before opset 13")
    if len(dims) != 0:
        refuse("a per-axis (non-scalar) scale needs opset 13")
    drop_attr(node, "axis")


@down("QuantizeLinear", 19)
def quantize_down_19(node, rw):
    """saturate applies to float8 outputs only, which opset 18 lacks."""
    if not get_attr(node, "saturate", 1) and rw.elem_type(node.output[0]) in FLOAT8:
        refuse("saturate=0 needs opset 19")
    drop_attr(node, "saturate")


def _block_size_down(node, rw):
    drop_default(node, "block_size", 0, "blocked quantization")


@down("QuantizeLinear", 21)
def quantize_down_21(node, rw):
    """output_dtype is redundant when it equals the zero point's type (or the default uint8 without one)."""
    _block_size_down(node, rw)
    dtype = get_attr(node, "output_dtype", 0)
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if dtype and dtype != (rw.elem_type(zp) if zp else 2):
        refuse("output_dtype without a zero point of that type needs opset 21")
    drop_attr(node, "output_dtype")


@down("DequantizeLinear", 21)
def dequantize_down_21(node, rw):
    _block_size_down(node, rw)


@down("QuantizeLinear", 23)
def quantize_down_23(node, rw):
    """precision (the type of the intermediate division) is new in 23; 0 means the scale's type."""
    drop_default(node, "precision", 0, "a division type other than the scale's", also=(rw.elem_type(node.input[1]),))


@down("DequantizeLinear", 23)
def dequantize_down_23(node, rw):
    """output_dtype is redundant when it equals the scale's type."""
    drop_default(node, "output_dtype", 0, "an output type other than the scale's", also=(rw.elem_type(node.input[1]),))


def _group_channels(node, rw):
    """Channel count and group count, or a refusal."""
    dims, groups = rw.shape(node.input[0]), get_attr(node, "num_groups")
    if dims is None or len(dims) < 2 or not isinstance(dims[1], int):
        refuse("the channel count of the input is unknown")
    return dims[1], groups


@up("GroupNormalization", 21)
def group_norm_up_21(node, rw):
    """Per-group scale and bias (18) become per-channel (21): each value repeated C/G times."""
    channels, groups = _group_channels(node, rw)
    for i, what in ((1, "scale"), (2, "bias")):
        value = rw.require_const(node, i, what)
        set_input(node, i, rw.constant(np.repeat(value, channels // groups), f"{node.name}_{what}"))


@down("GridSample", 20)
def grid_sample_down_20(node, rw):
    """Before 20 only 4-D inputs, and the modes are named bilinear / bicubic."""
    if rw.rank(node.input[0]) != 4:
        refuse("a GridSample input that is not known to be 4-D needs opset 20")
    mode = get_attr(node, "mode", b"linear").decode()
    set_attr(node, "mode", {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode))


@up("GridSample", 20)
def grid_sample_up_20(node, rw):
    mode = get_attr(node, "mode", b"bilinear").decode()
    set_attr(node, "mode", {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode))


@up("DFT", 20)
def dft_up_20(node, rw):
    """The axis attribute (default 1) becomes an input (whose default is -2)."""
    attr_to_input(node, rw, "axis", 2, np.int64, default=1)


@down("DFT", 20)
def dft_down_20(node, rw):
    axis = rw.require_const(node, 2, "axis")
    if len(node.input) > 2:
        set_input(node, 2, "")
    set_attr(node, "axis", -2 if axis is None else int(np.asarray(axis).ravel()[0]))


@down("CastLike", 19)
def cast_like_down_19(node, rw):
    """saturate matters only for float8, which opset 18 lacks."""
    drop_attr(node, "saturate")
