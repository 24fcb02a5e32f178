"""BatchNormalization 9/14/15, Dropout 10/12, Clip 6/11, Pad 2/11/18/19: attributes <-> inputs and
training-only features."""
from __future__ import annotations

import numpy as np

from onnxbridge.adapters.registry import down, up
from onnxbridge.adapters.rewriter import attr_to_input, drop_attr, get_attr, refuse, set_attr, set_input


def _np_type(rw, name: str, default=np.float32):
    import onnx

    et = rw.elem_type(name)
    return onnx.helper.tensor_dtype_to_np_dtype(et) if et else default


@up("BatchNormalization", 9)
def batchnorm_up_9(node, rw):
    """``spatial`` was removed in 9 (always spatial)."""
    if get_attr(node, "spatial", 1) == 0:
        refuse("spatial=0")
    drop_attr(node, "spatial")


@down("BatchNormalization", 9)
def batchnorm_down_9(node, rw):
    """Opset 7 takes the default spatial=1, which is what 9 does."""


@up("BatchNormalization", 14)
def batchnorm_up_14(node, rw):
    """From 14 training statistics need training_mode=1; saved_mean/saved_var are gone."""
    if any(node.output[3:]):
        refuse("the saved_mean/saved_var outputs")
    del node.output[3:]
    if any(node.output[1:]):
        set_attr(node, "training_mode", 1)


@down("BatchNormalization", 14)
def batchnorm_down_14(node, rw):
    """training_mode arrived in 14."""
    if get_attr(node, "training_mode", 0):
        refuse("training_mode=1")
    if any(node.output[1:]):
        refuse("the running_mean/running_var outputs")
    del node.output[1:]
    drop_attr(node, "training_mode")


@down("BatchNormalization", 15)
def batchnorm_down_15(node, rw):
    """From 15 scale/B (T1) and mean/var (T2) may differ from X's type; in 14 scale/B are typed like X."""
    import onnx

    x = rw.elem_type(node.input[0])
    for name in node.input[1:3]:
        et = rw.elem_type(name)
        if x and et and et != x:
            kind = onnx.helper.tensor_dtype_to_string(et).replace("TensorProto.", "").lower()
            refuse(f"scale/B of type {kind} with an input of another type")


def _drop_unused_mask(node, rw) -> bool:
    """Remove a mask output nothing reads; True when the node has no mask left."""
    if len(node.output) > 1 and node.output[1] and rw.unused(node.output[1]):
        del node.output[1:]
    return len(node.output) < 2 or not node.output[1]


def _cast_mask(node, rw, to: int):
    if _drop_unused_mask(node, rw):
        return None
    mask = node.output[1]
    node.output[1] = rw.fresh(f"{node.name}_mask")
    return [node, rw.node("Cast", [node.output[1]], [mask], name=f"{node.name}_mask_cast", to=to)]


@up("Dropout", 10)
def dropout_up_10(node, rw):
    """From 10 the mask output is bool, before it had the input's type: cast it back."""
    et = rw.elem_type(node.input[0])
    if et is None and len(node.output) > 1 and node.output[1]:
        refuse("the mask output of an input of unknown type")
    return _cast_mask(node, rw, et)


@down("Dropout", 10)
def dropout_down_10(node, rw):
    """Before 10 the mask output had the input's type: cast it to bool."""
    import onnx

    return _cast_mask(node, rw, onnx.TensorProto.BOOL)


def _no_mask_across_12(node, rw):
    if not _drop_unused_mask(node, rw):
        refuse("the mask output (its inference value is all true from opset 12, unspecified before: "
               "onnxruntime gives all false)")


@up("Dropout", 12)
def dropout_up_12(node, rw):
    """The ``ratio`` attribute became an input."""
    _no_mask_across_12(node, rw)
    attr_to_input(node, rw, "ratio", 1, np.float32)


@down("Dropout", 12)
def dropout_down_12(node, rw):
    """Before 12: ratio an attribute, no training_mode (inference), no seed."""
    ratio = rw.require_const(node, 1, "ratio")
    training = rw.require_const(node, 2, "training_mode")
    if training is not None and bool(np.asarray(training).ravel()[0]):
        refuse("training_mode=true")
    _no_mask_across_12(node, rw)
    del node.input[1:]
    drop_attr(node, "seed")
    if ratio is not None:
        set_attr(node, "ratio", float(np.asarray(ratio).ravel()[0]))


@up("Clip", 11)
def clip_up_11(node, rw):
    """min/max attributes became inputs typed like the input."""
    dtype = _np_type(rw, node.input[0])
    for i, key in ((1, "min"), (2, "max")):
        value = get_attr(node, key)
        if value is not None:
            set_input(node, i, rw.constant(np.array(value, dtype), f"{node.name}_{key}"))
    drop_attr(node, "min", "max")


@down("Clip", 11)
def clip_down_11(node, rw):
    """Before 11 min/max were attributes: they must be constants."""
    lo, hi = rw.require_const(node, 1, "min"), rw.require_const(node, 2, "max")
    del node.input[1:]
    if lo is not None:
        set_attr(node, "min", float(np.asarray(lo).ravel()[0]))
    if hi is not None:
        set_attr(node, "max", float(np.asarray(hi).ravel()[0]))


@up("Pad", 11)
def pad_up_11(node, rw):
    """pads/value attributes became inputs; constant_value has the input's type."""
    pads, value = get_attr(node, "pads"), get_attr(node, "value")
    drop_attr(node, "pads", "value")
    set_input(node, 1, rw.constant(np.array(pads, np.int64), f"{node.name}_pads"))
    if value is not None:
        dtype = _np_type(rw, node.input[0])
        set_input(node, 2, rw.constant(np.array(value, dtype), f"{node.name}_value"))


@down("Pad", 11)
def pad_down_11(node, rw):
    """Before 11 pads and value were attributes: they must be constants."""
    pads, value = rw.require_const(node, 1, "pads"), rw.require_const(node, 2, "constant_value")
    del node.input[1:]
    set_attr(node, "pads", [int(p) for p in np.asarray(pads).ravel()])
    if value is not None:
        set_attr(node, "value", float(np.asarray(value).ravel()[0]))


@down("Pad", 18)
def pad_down_18(node, rw):
    """The ``axes`` input arrived in 18: expand pads to every axis."""
    if len(node.input) < 4 or not node.input[3]:
        return None
    axes, pads = rw.require_const(node, 3, "axes"), rw.require_const(node, 1, "pads")
    rank = rw.rank(node.input[0])
    if rank is None:
        refuse("axes with an input of unknown rank")
    axes = [int(a) % rank for a in np.asarray(axes).ravel()]
    pads = np.asarray(pads).ravel()
    full = np.zeros(2 * rank, np.int64)
    for i, a in enumerate(axes):
        full[a], full[a + rank] = pads[i], pads[i + len(axes)]
    set_input(node, 1, rw.constant(full, f"{node.name}_pads"))
    set_input(node, 3, "")


@down("Pad", 19)
def pad_down_19(node, rw):
    """mode=wrap arrived in 19."""
    if get_attr(node, "mode", "constant") in ("wrap", b"wrap"):
        refuse("mode=wrap")
