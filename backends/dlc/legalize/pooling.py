"""QNN rules for pooling and transposed convolution: LpPool, padded AveragePool (which the HTP computes wrongly),
ConvTranspose with output_padding or output_shape."""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import Nodes, base_name, float_input, int_attr, ints_attr, single


def _pool_condition(graph: Graph, match: Match, ceil_ok: bool = False) -> bool:
    """A float pool of static shape (rank >= 3) without dilations (the QNN EP takes no dilated pool); ceil_mode
    only where ``ceil_ok`` and the output's shape is known."""
    node, shape = match.nodes[0], graph.shape(match.inputs["in0"])
    if not float_input(graph, match) or shape is None or len(shape) < 3:
        return False
    n = len(shape) - 2
    if len(ints_attr(node, "kernel_shape")) != n or len(ints_attr(node, "pads")) not in (0, 2 * n) or \
            len(ints_attr(node, "strides")) not in (0, n) or any(d != 1 for d in ints_attr(node, "dilations")):
        return False
    return not int_attr(node, "ceil_mode", 0) or (ceil_ok and graph.shape(node.output[0]) is not None)


def lppool_condition(graph: Graph, match: Match) -> bool:
    """p >= 1, no ceil_mode (a window past the padded input would change the divisor)."""
    return _pool_condition(graph, match) and int_attr(match.nodes[0], "p", 2) >= 1


def lppool_replacement(graph: Graph, match: Match) -> list:
    """(K * AveragePool(|x|^p, count_include_pad=1))^(1/p), K the window's size: the sum of |x|^p over the window,
    padding adding zeros (x * x and Sqrt for p = 2, Abs alone for p = 1); the pool as ``_average_pool`` makes it."""
    node, x = match.nodes[0], match.inputs["in0"]
    p = int_attr(node, "p", 2)
    e = Nodes(graph, base_name(match, "lppool"))
    powered = e("Mul", [x, x]) if p == 2 else e("Abs", [x]) if p == 1 else \
        e("Pow", [e("Abs", [x]), e.scalar("p", p, x)])
    pool = _average_pool(e, node, x, powered, "", include_pad=True)
    window = e.scalar("window", math.prod(ints_attr(node, "kernel_shape")), x)
    summed = e("Mul", [pool, window], node.output[0] if p == 1 else "")
    if p == 2:
        e("Sqrt", [summed], node.output[0])
    elif p > 2:
        e("Pow", [summed, e.scalar("root", 1 / p, x)], node.output[0])
    return e.nodes


def _pool_pads(graph: Graph, node, x: str) -> list[int] | None:
    """The explicit pads (begins, then ends) of a pool on static ``x``: its pads, or what auto_pad SAME_* means."""
    auto = next((a.s for a in node.attribute if a.name == "auto_pad"), b"NOTSET")
    kernel, dims = ints_attr(node, "kernel_shape"), graph.shape(x)[2:]
    if auto in (b"NOTSET", b""):
        return ints_attr(node, "pads") or [0] * 2 * len(kernel)
    if auto == b"VALID":
        return [0] * 2 * len(kernel)
    strides = ints_attr(node, "strides") or [1] * len(kernel)
    total = [max((-(-n // st) - 1) * st + k - n, 0) for n, st, k in zip(dims, strides, kernel)]
    small = [t // 2 for t in total]
    big = [t - t // 2 for t in total]
    return small + big if auto == b"SAME_UPPER" else big + small


def avgpool_condition(graph: Graph, match: Match) -> bool:
    """A float AveragePool of static shape that pads (explicitly or by auto_pad), or has ceil_mode without
    counting the padding: the HTP's padded pool gives wrong numbers (test_averagepool_2d_pads, _ceil, measured)
    or crashes."""
    node, x = match.nodes[0], match.inputs["in0"]
    include, ceil = int_attr(node, "count_include_pad", 0), int_attr(node, "ceil_mode", 0)
    if not _pool_condition(graph, match, ceil_ok=not include):
        return False
    return _last_windows_start_inside(graph, node, x) if ceil else any(_pool_pads(graph, node, x))


def _last_windows_start_inside(graph: Graph, node, x: str) -> bool:
    """Whether ceil_mode's last window on each axis starts in the input or its start padding: onnxruntime drops a
    window starting past them, which ONNX shape inference (the output shape the rewrite builds) still counts."""
    kernel, dims, out = ints_attr(node, "kernel_shape"), graph.shape(x)[2:], graph.shape(node.output[0])[2:]
    strides = ints_attr(node, "strides") or [1] * len(kernel)
    begin = _pool_pads(graph, node, x)[:len(kernel)]
    return all((o - 1) * st < d + b for o, st, d, b in zip(out, strides, dims, begin))


def _window_counts(spatial: list[int], pads: list[int], kernel: list[int], strides: list[int]) -> np.ndarray:
    """How many input (not padding) elements each output position's window holds."""
    n = len(spatial)
    mask = np.pad(np.ones(spatial), list(zip(pads[:n], pads[n:])))
    windows = np.lib.stride_tricks.sliding_window_view(mask, kernel)
    windows = windows[tuple(slice(None, None, st) for st in strides)]
    return windows.sum(axis=tuple(range(n, 2 * n)))


def _average_pool(e: Nodes, node, x: str, src: str, out: str, include_pad: bool) -> str:
    """AveragePool of ``src`` (of ``x``'s static shape) over ``node``'s windows, its padding (and the overhang of
    ceil_mode) done by a Pad first so that the pool itself pads nothing: every window is divided by its size, as
    count_include_pad=1 asks; without it, the result is scaled by size / (input elements in the window), a
    constant of the output's spatial shape."""
    shape, pads = e.graph.shape(x), _pool_pads(e.graph, node, x)
    kernel = ints_attr(node, "kernel_shape")
    strides = ints_attr(node, "strides") or [1] * len(kernel)
    n = len(kernel)
    if int_attr(node, "ceil_mode", 0):  # the last windows reach past the padded input: more padding, uncounted
        dims = e.graph.shape(node.output[0])[2:]
        pads = pads[:n] + [p + max(0, (o - 1) * st + k - (d + b + p)) for o, st, k, d, b, p
                           in zip(dims, strides, kernel, shape[2:], pads[:n], pads[n:])]
    if any(pads):
        full = [0, 0, *pads[:n], 0, 0, *pads[n:]]
        if e.graph.opset >= 11:
            src = e("Pad", [src, e.const("pads", np.array(full, np.int64))])
        else:
            src = e("Pad", [src], pads=full)
        # a Reshape to its own shape between: the QNN EP fuses Pad + AveragePool back into the padded pool the
        # HTP gets wrong (measured: a 5x5 pool of a 5x5 input padded by 2)
        spatial = [d + b + a for d, b, a in zip(shape[2:], pads[:n], pads[n:])]
        src = e("Reshape", [src, e.const("padded_shape", np.array(shape[:2] + spatial, np.int64))])
    if include_pad or not any(pads):
        return e("AveragePool", [src], out, kernel_shape=kernel, strides=strides)
    pooled = e("AveragePool", [src], kernel_shape=kernel, strides=strides)
    scale = math.prod(kernel) / _window_counts(shape[2:], pads, kernel, strides)
    dtype = helper.tensor_dtype_to_np_dtype(e.graph.elem_type(x))
    return e("Mul", [pooled, e.const("window_scale", scale.astype(dtype))], out)


def avgpool_replacement(graph: Graph, match: Match) -> list:
    node, x = match.nodes[0], match.inputs["in0"]
    e = Nodes(graph, base_name(match, "avgpool"))
    _average_pool(e, node, x, x, node.output[0], bool(int_attr(node, "count_include_pad", 0)))
    return e.nodes


def convtranspose_condition(graph: Graph, match: Match) -> bool:
    """Float, static shapes, no auto_pad, and output_padding or output_shape (the HTP gets those wrong: errors of
    44 on test_convtranspose_output_shape, measured)."""
    node, x, w = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    auto = next((a.s for a in node.attribute if a.name == "auto_pad"), b"NOTSET")
    extended = any(ints_attr(node, "output_padding")) or bool(ints_attr(node, "output_shape"))
    shapes = [graph.shape(t) for t in (x, w, node.output[0])]
    if not extended or auto not in (b"NOTSET", b"") or not float_input(graph, match) or \
            any(t is None or len(t) < 3 or len(t) != len(shapes[0]) for t in shapes):
        return False
    n = len(shapes[0]) - 2
    return all(len(ints_attr(node, a)) in (0, k * n) for a, k in
               (("strides", 1), ("dilations", 1), ("output_padding", 1), ("output_shape", 1), ("pads", 2)))


def convtranspose_replacement(graph: Graph, match: Match) -> list:
    """y = F[pad_begin : pad_begin + out] per spatial axis, F the ConvTranspose without padding (its full output,
    zero past its end), then the bias: Slice where that crops, Pad with zeros where it reaches past F."""
    node, x, w = match.nodes[0], match.inputs["in0"], match.inputs["in1"]
    spatial, out = graph.shape(x)[2:], graph.shape(node.output[0])[2:]
    n = len(spatial)
    kernel = graph.shape(w)[2:]
    strides = ints_attr(node, "strides") or [1] * n
    dilations = ints_attr(node, "dilations") or [1] * n
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, spatial, kernel, dilations)]
    if ints_attr(node, "output_shape"):  # the pads output_shape implies (ONNX: the larger half at the start)
        total = [f + p - o for f, p, o in zip(full, ints_attr(node, "output_padding") or [0] * n, out)]
        begin = [t - t // 2 for t in total]
    else:
        begin = (ints_attr(node, "pads") or [0] * 2 * n)[:n]
    starts, ends = [max(b, 0) for b in begin], [min(b + o, f) for b, o, f in zip(begin, out, full)]
    before = [max(-b, 0) for b in begin]
    after = [o - p - (q - r) for o, p, q, r in zip(out, before, ends, starts)]
    bias = match.inputs.get("in2", "")
    sliced, padded = starts != [0] * n or ends != full, any(before) or any(after)
    last = "Add" if bias else "Pad" if padded else "Slice" if sliced else "ConvTranspose"
    e = Nodes(graph, base_name(match, "convtranspose"))

    def out_of(op_type: str) -> str:
        return node.output[0] if op_type == last else ""

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name in ("dilations", "group", "kernel_shape", "strides")}
    y = e("ConvTranspose", [x, w], out_of("ConvTranspose"), **attrs)
    if sliced:
        y = e("Slice", [y, e.const("starts", np.array(starts, np.int64)), e.const("ends", np.array(ends, np.int64)),
                        e.const("axes", np.arange(2, n + 2, dtype=np.int64))], out_of("Slice"))
    if padded:
        y = e("Pad", [y, e.const("pads", np.array([0, 0, *before, 0, 0, *after], np.int64))], out_of("Pad"))
    if bias:
        e("Add", [y, e("Reshape", [bias, e.const("bias_shape", np.array([-1] + [1] * n, np.int64))])], out_of("Add"))
    return e.nodes


LPPOOL = Rule("lppool-to-averagepool", single("LpPool"), lppool_condition, lppool_replacement)


CONVTRANSPOSE = Rule("convtranspose-extended-to-slice-pad", single("ConvTranspose"), convtranspose_condition,
                     convtranspose_replacement)


AVGPOOL = Rule("padded-averagepool-to-pad", single("AveragePool"), avgpool_condition, avgpool_replacement)
