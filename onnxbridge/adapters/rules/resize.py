"""Upsample 7/9/10 and Resize 10/11/13/18/19: scales placement, roi, coordinate modes, new features."""
from __future__ import annotations

import numpy as np

from onnxbridge.adapters.registry import down, up
from onnxbridge.adapters.rewriter import drop_attr, get_attr, refuse, set_attr, set_input


def _retyped(node, op: str):
    import onnx

    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.op_type = op
    return new


def _empty(rw, node, what: str) -> str:
    return rw.constant(np.zeros([0], np.float32), f"{node.name}_{what}")


@up("Upsample", 9)
def upsample_up_9(node, rw):
    """The ``scales`` attribute became an input."""
    scales = get_attr(node, "scales")
    drop_attr(node, "scales")
    set_input(node, 1, rw.constant(np.array(scales, np.float32), f"{node.name}_scales"))


@down("Upsample", 9)
def upsample_down_9(node, rw):
    """Before 9 ``scales`` was an attribute: it must be a constant."""
    scales = rw.require_const(node, 1, "scales")
    del node.input[1:]
    set_attr(node, "scales", [float(s) for s in np.asarray(scales).ravel()])


@up("Upsample", 10)
def upsample_to_resize(node, rw):
    """Upsample is deprecated at 10: Resize-10 has its inputs, mode and semantics."""
    return [_retyped(node, "Resize")]


@down("Resize", 10)
def resize_to_upsample(node, rw):
    """Below 10 Resize-10 is Upsample-9, which only enlarges."""
    scales = rw.const(node.input[1])
    if scales is not None and np.any(scales < 1):
        refuse(f"scales below 1 ({[float(v) for v in scales]}); Upsample only enlarges")
    return [_retyped(node, "Upsample")]


@up("Resize", 11)
def resize_up_11(node, rw):
    """Add an empty roi and spell out Resize-10's asymmetric coordinates and floor rounding
    (the opset-11 defaults half_pixel / round_prefer_floor change the numbers)."""
    x, scales = node.input[0], node.input[1]
    del node.input[:]
    node.input.extend([x, _empty(rw, node, "roi"), scales])
    set_attr(node, "coordinate_transformation_mode", "asymmetric")
    if get_attr(node, "mode", b"nearest") in (b"nearest", "nearest"):
        set_attr(node, "nearest_mode", _nearest_10(rw.const(scales)))


def _nearest_10(scales) -> str:
    """Resize-10 nearest rounds down when enlarging an axis and up when shrinking it (onnxruntime)."""
    if scales is None:
        return "floor"
    inv = 1 / np.asarray(scales, np.float64)
    rounded = scales[inv != np.round(inv)]  # other axes map to whole pixels: floor and ceil agree
    if not np.any(rounded < 1):
        return "floor"
    if not np.any(rounded > 1):
        return "ceil"
    refuse("nearest with scales both below and above 1 (Resize-10 rounds each axis its own way)")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _sizes_to_scales(node, rw) -> str:
    sizes = rw.require_const(node, 3, "sizes")
    dims = rw.shape(node.input[0])
    if dims is None or not all(isinstance(d, int) and d > 0 for d in dims) or len(dims) != sizes.size:
        refuse("sizes without scales need a static input shape to compute scales")
    scales = (sizes.astype(np.float64) / np.array(dims, np.float64)).astype(np.float32)
    for i, (d, s) in enumerate(zip(dims, sizes.ravel())):
        while min(np.float32(d) * scales[i], d * np.float64(scales[i])) < s:  # older ops floor input * scale
            scales[i] = np.nextafter(scales[i], np.float32(np.inf))
    return rw.constant(scales, f"{node.name}_scales")


@down("Resize", 11)
def resize_down_11(node, rw):
    """Resize-10 is linear, or nearest rounding down when enlarging and up when shrinking, with asymmetric
    coordinates, given scales and no roi."""
    mode = _text(get_attr(node, "mode", "nearest"))
    ctm = _text(get_attr(node, "coordinate_transformation_mode", "half_pixel"))
    if mode not in ("nearest", "linear"):
        refuse(f"mode={mode}")
    if ctm != "asymmetric":
        refuse(f"coordinate_transformation_mode={ctm}")
    nearest = _text(get_attr(node, "nearest_mode", "round_prefer_floor"))
    if len(node.input) > 3 and node.input[3]:
        scales = _sizes_to_scales(node, rw)
    else:
        scales = node.input[2] if len(node.input) > 2 else ""
        if not scales or getattr(rw.const(scales), "size", 1) == 0:
            refuse("neither scales nor sizes given")
    if mode == "nearest" and nearest not in ("floor", "ceil"):
        refuse(f"nearest_mode={nearest}")
    if mode == "nearest":
        values = rw.const(scales)
        if values is None and nearest != "floor":
            refuse(f"nearest_mode={nearest} with run-time scales")
        if values is not None and _nearest_10(values) != nearest:
            refuse(f"nearest_mode={nearest} with scales {[float(v) for v in values]} (Resize-10 rounds "
                   "down when enlarging, up when shrinking)")
    x = node.input[0]
    del node.input[:]
    node.input.extend([x, scales])
    drop_attr(node, "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value",
              "nearest_mode")


@up("Resize", 13)
def resize_up_13(node, rw):
    """tf_half_pixel_for_nn was removed in 13."""
    ctm = _text(get_attr(node, "coordinate_transformation_mode", "half_pixel"))
    if ctm == "tf_half_pixel_for_nn":
        refuse("coordinate_transformation_mode=tf_half_pixel_for_nn")


@down("Resize", 13)
def resize_down_13(node, rw):
    """roi and scales are required inputs in 11: omitted ones become empty tensors."""
    for i, what in ((1, "roi"), (2, "scales")):
        if i >= len(node.input) or not node.input[i]:
            set_input(node, i, _empty(rw, node, what))


@down("Resize", 18)
def resize_down_18(node, rw):
    """antialias, axes and keep_aspect_ratio_policy arrived in 18."""
    if get_attr(node, "antialias", 0):
        refuse("antialias=1")
    axes = get_attr(node, "axes")
    if axes is not None:
        _full_rank(node, rw, [int(a) for a in axes])
    policy = _text(get_attr(node, "keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        refuse(f"keep_aspect_ratio_policy={policy}")
    drop_attr(node, "antialias", "axes", "keep_aspect_ratio_policy")


def _full_rank(node, rw, axes: list[int]) -> None:
    """Spread scales/sizes/roi given for ``axes`` over every axis (1s, the static dims, full roi)."""
    dims = rw.shape(node.input[0])
    if dims is None:
        refuse("axes, with an input of unknown rank")
    rank = len(dims)
    axes = [a % rank for a in axes]
    roi = rw.const(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if len(node.input) > 1 and node.input[1] and roi is None:
        refuse("axes with a roi computed at run time")
    if roi is not None and roi.size:
        full = np.concatenate([np.zeros(rank), np.ones(rank)]).astype(roi.dtype)
        for k, a in enumerate(axes):
            full[a], full[rank + a] = roi[k], roi[len(axes) + k]
        set_input(node, 1, rw.constant(full, f"{node.name}_roi"))
    scales = rw.require_const(node, 2, "scales") if len(node.input) > 2 and node.input[2] else None
    if scales is not None and scales.size:
        full = np.ones(rank, scales.dtype)
        full[axes] = scales
        set_input(node, 2, rw.constant(full, f"{node.name}_scales"))
    sizes = rw.require_const(node, 3, "sizes") if len(node.input) > 3 and node.input[3] else None
    if sizes is not None and sizes.size:
        if not all(isinstance(d, int) for i, d in enumerate(dims) if i not in axes):
            refuse("axes with sizes, on an input whose other dims are not static")
        full = np.array([d if isinstance(d, int) else 0 for d in dims], np.int64)
        full[axes] = sizes
        set_input(node, 3, rw.constant(full, f"{node.name}_sizes"))


@down("Resize", 19)
def resize_down_19(node, rw):
    """half_pixel_symmetric arrived in 19."""
    if _text(get_attr(node, "coordinate_transformation_mode", "half_pixel")) == "half_pixel_symmetric":
        refuse("coordinate_transformation_mode=half_pixel_symmetric")
