"""Host-side numerics for a Core ML program on Linux, where Core ML cannot run: a numpy kernel per MIL op,
applied to the MIL program that was saved (after coremltools' graph passes), in fp32 or fp16 as the
program's casts say."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from onnxbridge.backends.coreml import kernels_math
from onnxbridge.backends.coreml import kernels_window as windows
from onnxbridge.backends.coreml.gaps import EvaluatorGap
from onnxbridge.errors import UnsupportedError
from onnxbridge.optable import OpTable

KERNELS: OpTable[str] = OpTable("host kernel of MIL op")
kernel = KERNELS.register  # @kernel("name", ...): the numpy kernel of those MIL ops
DTYPES = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_, "int8": np.int8,
          "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16}  # the narrow ones: iOS 17's fp16 passes


def run(function, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate a pymil Function on named inputs; returns its outputs by name. Overflow to inf and NaN are results
    here (fp16's range is the point of the check; the comparison reports them), not warnings to print."""
    with np.errstate(all="ignore"):
        return _run(function, feeds)


def _run(function, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    env: dict[str, Any] = {name: np.asarray(feeds[name]) for name in function.inputs}
    keep = {v.name for v in function.outputs}
    dead = _dead_after(function.operations, keep)
    for index, op in enumerate(function.operations):
        if op.op_type == "const":
            env[op.outputs[0].name] = np.asarray(op.outputs[0].val)
            continue
        fn = KERNELS.get(op.op_type)
        if fn is None:
            raise EvaluatorGap(f"the host evaluator has no kernel for MIL op '{op.op_type}'")
        args = {k: _value(v, env) for k, v in op.inputs.items()}
        result = fn(**args)
        del args
        for var, value in zip(op.outputs, result if isinstance(result, tuple) else (result,)):
            env[var.name] = value
        for name in dead.get(index, ()):
            env.pop(name, None)  # no later op reads it: its memory goes back now
    return {v.name: env[v.name] for v in function.outputs}


def _dead_after(ops, keep: set[str]) -> dict[int, list[str]]:
    """Op index -> the non-const vars whose last reader it is (outputs in ``keep`` never die)."""
    last: dict[str, int] = {}

    def note(value, index):
        if isinstance(value, (tuple, list)):
            for v in value:
                note(v, index)
        elif getattr(value, "name", None) is not None and getattr(value, "op", None) is not None \
                and value.op.op_type != "const":
            last[value.name] = index

    for index, op in enumerate(ops):
        for value in op.inputs.values():
            note(value, index)
    dead: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in keep:
            dead.setdefault(index, []).append(name)
    return dead


def _value(var, env):
    if isinstance(var, (tuple, list)):
        return [_value(v, env) for v in var]
    if var.name in env:
        return env[var.name]
    return np.asarray(var.val) if var.val is not None else None


def _s(v):
    """A scalar attribute as a Python value."""
    return v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v


# elementwise -----------------------------------------------------------------------------------
UNARY = {"relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh,
         "exp": np.exp, "sqrt": np.sqrt, "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
         "identity": np.copy, "cos": np.cos, "sin": np.sin, "tan": np.tan, "acos": np.arccos,
         "asin": np.arcsin, "atan": np.arctan, "atanh": np.arctanh, "cosh": np.cosh, "sinh": np.sinh,
         "sign": np.sign, "softsign": lambda x: x / (1 + np.abs(x)),
         "silu": lambda x: x / (1 + np.exp(-x))}  # silu: what coremltools fuses x * sigmoid(x) into
for _name, _f in UNARY.items():
    KERNELS[_name] = (lambda f: lambda x, **_: f(x).astype(x.dtype, copy=False))(_f)


@kernel("log")
def log(x, epsilon=1e-45, **_):
    """log(x + epsilon) (MIL's default epsilon is 1e-45)."""
    return np.log(x + np.asarray(epsilon, x.dtype)).astype(x.dtype)


@kernel("inverse")
def inverse(x, epsilon=1e-4, **_):
    """1 / (x + epsilon) (MIL's default epsilon is 1e-4)."""
    return (1 / (x + np.asarray(epsilon, x.dtype))).astype(x.dtype)


@kernel("erf")
def erf(x, **_):
    """In fp64 (``kernels_math.erf``, as ``math.erf``), rounded to x's dtype."""
    return kernels_math.erf(x).astype(x.dtype)


@kernel("sigmoid_hard")
def sigmoid_hard(x, alpha=0.2, beta=0.5, **_):
    return np.clip(_s(alpha) * x + _s(beta), 0, 1).astype(x.dtype)


@kernel("elu")
def elu(x, alpha=1.0, **_):
    return np.where(x > 0, x, _s(alpha) * (np.exp(np.minimum(x, 0)) - 1)).astype(x.dtype)


@kernel("softplus")
def softplus(x, **_):
    return np.logaddexp(0, x).astype(x.dtype)


@kernel("leaky_relu")
def leaky_relu(x, alpha, **_):
    return np.where(x >= 0, x, x * _s(alpha)).astype(x.dtype)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "pow": np.power,
          "maximum": np.maximum, "minimum": np.minimum, "floor_div": np.floor_divide}
for _name, _f in BINARY.items():
    KERNELS[_name] = (lambda f: lambda x, y, **_: f(x, y).astype(np.result_type(x, y), copy=False))(_f)


COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
           "greater": np.greater, "greater_equal": np.greater_equal, "logical_and": np.logical_and,
           "logical_or": np.logical_or, "logical_xor": np.logical_xor}
for _name, _f in COMPARE.items():
    KERNELS[_name] = (lambda f: lambda x, y, **_: f(x, y))(_f)


@kernel("logical_not")
def logical_not(x, **_):
    return np.logical_not(x)


@kernel("select")
def select(cond, a, b, **_):
    return np.where(cond, a, b).astype(np.result_type(a, b))


@kernel("rsqrt")
def rsqrt(x, epsilon=1e-12, **_):
    return (1 / np.sqrt(x + _s(epsilon))).astype(x.dtype)


@kernel("gelu")
def gelu(x, mode="EXACT", **_):
    mode = str(_s(mode))
    v = x.astype(np.float64)
    if mode == "EXACT":
        return (0.5 * v * (1 + erf(v / np.sqrt(2)))).astype(x.dtype)
    if mode == "TANH_APPROXIMATION":
        return (0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))).astype(x.dtype)
    return (v / (1 + np.exp(-1.702 * v))).astype(x.dtype)  # SIGMOID_APPROXIMATION


@kernel("cast")
def cast(x, dtype, **_):
    return x.astype(DTYPES[str(_s(dtype))])


# linear algebra --------------------------------------------------------------------------------
@kernel("matmul")
def matmul(x, y, transpose_x=False, transpose_y=False, **_):
    """fp16 operands are summed in fp32 and rounded once, as numpy's own fp16 matmul does (without BLAS); here
    through BLAS on fp32 copies (made once for an operand that is a constant)."""
    half = x.dtype == np.float16 and y.dtype == np.float16
    if half:
        x, y = _wide(x), _wide(y)
    if _s(transpose_x):
        x = np.swapaxes(x, -1, -2)
    if _s(transpose_y):
        y = np.swapaxes(y, -1, -2)
    z = np.matmul(x, y)
    return z.astype(np.float16) if half else z


@kernel("linear")
def linear(x, weight, bias=None, **_):
    """As ``matmul`` for fp16; the bias is added to the rounded product in its dtype."""
    if x.dtype == np.float16 and weight.dtype == np.float16:
        y = np.matmul(_wide(x), _wide(weight).T).astype(np.float16)
    else:
        y = x @ weight.T
    return y + bias if bias is not None else y


def _wide(v: np.ndarray) -> np.ndarray:
    return windows.widened(v, np.dtype(np.float32))


# compressed weights ----------------------------------------------------------------------------
# The constexpr ops that hold quantized weights (``--precision int8``), decompressed as their MIL definitions (and
# coremltools' ``materialized_val_inference``) do; the result has the scale's dtype.
@kernel("constexpr_affine_dequantize")
def constexpr_affine_dequantize(quantized_data, zero_point, scale, axis, **_):
    """iOS16: ``scale * (quantized_data - zero_point)``; ``scale`` and ``zero_point`` are scalars or vectors along
    ``axis`` (one per channel). Computed in fp32, then cast to the scale's dtype."""
    rank = quantized_data.ndim
    axis = int(_s(axis)) % rank

    def along(v):
        v = np.asarray(v)
        return v.reshape([v.size if i == axis else 1 for i in range(rank)]) if v.ndim == 1 else v

    scale = np.asarray(scale)
    out = (quantized_data.astype(np.float32) - along(zero_point).astype(np.float32)) * along(scale)
    return out.astype(scale.dtype)


@kernel("constexpr_blockwise_shift_scale")
def constexpr_blockwise_shift_scale(data, scale, offset=None, **_):
    """iOS18: ``scale * (data - offset)`` per block; ``scale`` (and ``offset``) have ``data``'s rank and each
    entry covers ``data.shape[i] // scale.shape[i]`` elements along axis i (per-channel: 1 on every other axis).
    Computed in the scale's dtype."""
    def blocks(v):
        for axis, (d, s) in enumerate(zip(data.shape, v.shape)):
            if d // s > 1:
                v = np.repeat(v, d // s, axis)
        return v

    scale = np.asarray(scale)
    x = data.astype(scale.dtype)
    if offset is not None:
        x = x - blocks(np.asarray(offset))
    return (blocks(scale) * x).astype(scale.dtype)


# shapes ----------------------------------------------------------------------------------------
@kernel("reshape")
def reshape(x, shape, **_):
    return x.reshape([int(d) for d in shape])


@kernel("transpose")
def transpose(x, perm, **_):
    return np.transpose(x, [int(p) for p in perm])


@kernel("concat")
def concat(values, axis, interleave=False, **_):
    """``interleave`` (what coremltools fuses a channel shuffle into; inputs of one shape): element i of input j
    goes to index i * len(values) + j along ``axis``."""
    axis = int(_s(axis))
    if not _s(interleave):
        return np.concatenate(values, axis=axis)
    axis %= values[0].ndim
    shape = list(values[0].shape)
    shape[axis] *= len(values)
    return np.stack(values, axis=axis + 1).reshape(shape)


@kernel("expand_dims")
def expand_dims(x, axes, **_):
    return np.expand_dims(x, tuple(int(a) for a in axes))


@kernel("squeeze")
def squeeze(x, axes=None, **_):
    return np.squeeze(x, None if axes is None else tuple(int(a) for a in axes))


@kernel("split")
def split(x, axis, num_splits=None, split_sizes=None, **_):
    axis = int(_s(axis))
    if split_sizes is None:
        return tuple(np.split(x, int(_s(num_splits)), axis=axis))
    return tuple(np.split(x, np.cumsum([int(v) for v in split_sizes])[:-1], axis=axis))


@kernel("reverse")
def reverse(x, axes=None, **_):
    return np.flip(x, None if axes is None else tuple(int(a) for a in axes))


@kernel("stack")
def stack(values, axis=0, **_):
    return np.stack(values, axis=int(_s(axis)))


@kernel("tile")
def tile(x, reps, **_):
    return np.tile(x, [int(r) for r in reps])


@kernel("shape")
def shape(x, **_):
    return np.array(x.shape, np.int32)


@kernel("fill")
def fill(shape, value=0.0, **_):
    value = np.asarray(value)
    return np.full([int(d) for d in shape], value, value.dtype)


@kernel("einsum")
def einsum(values, equation, **_):
    return np.einsum(str(_s(equation)), *values)


@kernel("gather")
def gather(x, indices, axis=0, **_):
    """Strict bounds: negative indices are out of bounds from iOS 17 on, so the lowering must have fixed them."""
    axis = int(_s(axis))
    return np.take(x, _in_bounds("gather", indices, x.shape[axis]), axis=axis)


def _in_bounds(op: str, indices: np.ndarray, size: int) -> np.ndarray:
    """``indices`` as int64, refused when any is outside [0, size): Core ML's gathers do not wrap negatives."""
    if np.any(indices < 0) or np.any(indices >= size):
        raise UnsupportedError(f"{op} indices outside [0, {size}) reached Core ML's {op}")
    return indices.astype(np.int64)


@kernel("slice_by_index")
def slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None, **_):
    index = []
    for i in range(x.ndim):
        b = None if begin_mask is not None and begin_mask[i] else int(begin[i])
        e = None if end_mask is not None and end_mask[i] else int(end[i])
        index.append(slice(b, e, int(stride[i]) if stride is not None else 1))
    y = x[tuple(index)]
    if squeeze_mask is not None and any(squeeze_mask):
        y = np.squeeze(y, tuple(i for i, m in enumerate(squeeze_mask) if m))
    return y


@kernel("gather_nd")
def gather_nd(x, indices, batch_dims=0, **_):
    """Strict bounds per picked dim, as ``gather``; ``batch_dims`` 0 (all the lowering emits)."""
    columns = [_in_bounds("gather_nd", indices[..., k], x.shape[k]) for k in range(indices.shape[-1])]
    return x[tuple(columns)]


@kernel("gather_along_axis")
def gather_along_axis(x, indices, axis=0, **_):
    """Strict bounds, as ``gather``."""
    axis = int(_s(axis))
    return np.take_along_axis(x, _in_bounds("gather_along_axis", indices, x.shape[axis]), axis=axis)


@kernel("band_part")
def band_part(x, lower=-1, upper=-1, **_):
    """x where (row i, column j of the last two axes) i - j <= lower and j - i <= upper (negative: unbounded)."""
    lower, upper = int(_s(lower)), int(_s(upper))
    i, j = np.indices(x.shape[-2:])
    keep = ((lower < 0) | (i - j <= lower)) & ((upper < 0) | (j - i <= upper))
    return np.where(keep, x, np.zeros((), x.dtype))


@kernel("cumsum")
def cumsum(x, axis=0, exclusive=False, reverse=False, **_):
    axis = int(_s(axis))
    v = np.flip(x, axis) if _s(reverse) else x
    total = np.cumsum(v, axis=axis, dtype=x.dtype)
    if _s(exclusive):
        total = np.concatenate([np.zeros_like(np.take(total, [0], axis=axis)),
                                np.take(total, np.arange(total.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(total, axis) if _s(reverse) else total


@kernel("pad")
def pad(x, pad, mode="constant", constant_val=0.0, **_):
    p = [int(v) for v in pad]
    lead = x.ndim - len(p) // 2
    width = [(0, 0)] * lead + [(p[2 * i], p[2 * i + 1]) for i in range(len(p) // 2)]
    mode = {"replicate": "edge"}.get(str(_s(mode)), str(_s(mode)))
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=_s(constant_val)).astype(x.dtype)
    return np.pad(x, width, mode=mode)


# reductions and normalisation ------------------------------------------------------------------
def _reducer(f):
    def reduce(x, axes=None, keep_dims=False, **_):
        axes = None if axes is None else tuple(int(a) for a in axes)
        return f(x, axis=axes, keepdims=bool(_s(keep_dims))).astype(x.dtype)
    return reduce


def _arg(f):
    def reduce(x, axis=-1, keep_dims=False, **_):
        y = f(x, axis=int(_s(axis)))  # ties: the first index
        return (np.expand_dims(y, int(_s(axis))) if _s(keep_dims) else y).astype(np.int32)
    return reduce


KERNELS.update(reduce_argmax=_arg(np.argmax), reduce_argmin=_arg(np.argmin))
KERNELS.update(reduce_l1_norm=_reducer(lambda x, **k: np.sum(np.abs(x), **k)),
               reduce_l2_norm=_reducer(lambda x, **k: np.sqrt(np.sum(np.square(x), **k))),
               reduce_log_sum=_reducer(lambda x, **k: np.log(np.sum(x, **k))),
               reduce_log_sum_exp=_reducer(lambda x, **k: np.log(np.sum(np.exp(x - x.max()), **k)) + x.max()),
               reduce_sum_square=_reducer(lambda x, **k: np.sum(np.square(x), **k)))


@kernel("range_1d")
def range_1d(start, end, step, **_):
    return np.arange(_s(start), _s(end), _s(step)).astype(np.result_type(start, end, step))
KERNELS.update(reduce_mean=_reducer(np.mean), reduce_max=_reducer(np.max), reduce_sum=_reducer(np.sum),
               reduce_min=_reducer(np.min), reduce_prod=_reducer(np.prod))


@kernel("softmax")
def softmax(x, axis=-1, **_):
    e = np.exp(x - x.max(axis=int(_s(axis)), keepdims=True))
    return (e / e.sum(axis=int(_s(axis)), keepdims=True)).astype(x.dtype)


@kernel("batch_norm")
def batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5, **_):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + _s(epsilon))
    if gamma is not None:
        y = y * gamma.reshape(shape)
    if beta is not None:
        y = y + beta.reshape(shape)
    return y.astype(x.dtype)


@kernel("local_response_norm")
def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0, **_):
    """x / (k + alpha / size * sum of squares over the ``size`` channels centred on each one) ** beta."""
    size, half = int(_s(size)), int(_s(size)) // 2
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (half, half)] + [(0, 0)] * (x.ndim - 2))
    total = sum(sq[:, i:i + x.shape[1]] for i in range(size))
    return (x / (_s(k) + _s(alpha) / size * total) ** _s(beta)).astype(x.dtype)


@kernel("instance_norm")
def instance_norm(x, gamma=None, beta=None, epsilon=1e-5, **_):
    axes = tuple(range(2, x.ndim))
    v = x.astype(np.float64)
    mean = v.mean(axis=axes, keepdims=True)
    y = (v - mean) / np.sqrt(((v - mean) ** 2).mean(axis=axes, keepdims=True) + _s(epsilon))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = y * (1 if gamma is None else gamma.reshape(shape)) + (0 if beta is None else beta.reshape(shape))
    return y.astype(x.dtype)


@kernel("layer_norm")
def layer_norm(x, axes, gamma=None, beta=None, epsilon=1e-5, **_):
    axes = tuple(int(a) for a in axes)
    mean = x.mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + _s(epsilon))
    return (y * (1 if gamma is None else gamma) + (0 if beta is None else beta)).astype(x.dtype)


# windows: conv and pools -----------------------------------------------------------------------
def _padding(x, kernel: list[int], strides: list[int], dilations: list[int], pad_type: str, pad) -> list[tuple]:
    spatial = x.shape[2:]
    if pad_type == "custom":
        p = [int(v) for v in pad]
        return [(p[2 * i], p[2 * i + 1]) for i in range(len(spatial))]
    if pad_type == "valid":
        return [(0, 0)] * len(spatial)
    out = []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        out.append((small, big) if pad_type == "same" else (big, small))
    return out


@kernel("conv")
def conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1, **_):
    """im2col + one grouped matrix product (``kernels_window.conv``); fp16 summed in fp32, rounded once."""
    spatial = x.ndim - 2
    kernel = list(weight.shape[2:])
    strides = [int(s) for s in (strides if strides is not None else [1] * spatial)]
    dilations = [int(d) for d in (dilations if dilations is not None else [1] * spatial)]
    pads = _padding(x, kernel, strides, dilations, str(_s(pad_type)), pad)
    return windows.conv(x, weight, bias, strides, dilations, pads, int(_s(groups)))


@kernel("conv_transpose")
def conv_transpose(x, weight, bias=None, pad=None, output_shape=None, pad_type="valid", strides=None,
                   dilations=None, groups=1, **_):
    """Scatter-add of every input position times the kernel (``kernels_window.conv_transpose_full``), then the
    pads cropped (custom/valid pads) and the bias added; fp16 summed in fp32 and rounded once."""
    spatial = x.ndim - 2
    strides = [int(s) for s in (strides if strides is not None else [1] * spatial)]
    dilations = [int(d) for d in (dilations if dilations is not None else [1] * spatial)]
    kind = str(_s(pad_type))
    if kind not in ("custom", "valid"):
        raise EvaluatorGap(f"the host evaluator runs conv_transpose with custom or valid pads, not {kind}")
    y = windows.conv_transpose_full(x, weight, strides, dilations, int(_s(groups)))
    full = y.shape[2:]
    if kind == "custom" and pad is not None:
        p = [int(v) for v in pad]
        y = y[(slice(None), slice(None)) + tuple(slice(p[2 * i], full[i] - p[2 * i + 1]) for i in range(spatial))]
    if output_shape is not None:
        y = y[tuple(slice(0, int(d)) for d in output_shape)]
    if bias is not None:
        y = y + bias.astype(y.dtype, copy=False).reshape(1, -1, *([1] * spatial))
    return y.astype(x.dtype)


def _pool_pads(x, kernel: list[int], strides: list[int], pad_type, pad, ceil_mode) -> list[tuple]:
    pads = _padding(x, kernel, strides, [1] * len(kernel), str(_s(pad_type)), pad)
    if _s(ceil_mode):  # extra padding at the end so the last partial window counts
        pads = [(b, e + (s - 1)) for (b, e), s in zip(pads, strides)]
    return pads


@kernel("max_pool")
def max_pool(x, kernel_sizes, strides, pad_type, pad=None, ceil_mode=False, **_):
    kernel, strides = [int(k) for k in kernel_sizes], [int(s) for s in strides]
    return windows.max_pool(x, kernel, strides, _pool_pads(x, kernel, strides, pad_type, pad, ceil_mode))


@kernel("avg_pool")
def avg_pool(x, kernel_sizes, strides, pad_type, pad=None, ceil_mode=False, exclude_padding_from_average=False, **_):
    kernel, strides = [int(k) for k in kernel_sizes], [int(s) for s in strides]
    return windows.avg_pool(x, kernel, strides, _pool_pads(x, kernel, strides, pad_type, pad, ceil_mode),
                            bool(_s(exclude_padding_from_average)))


# recurrence ------------------------------------------------------------------------------------
@kernel("lstm")
def lstm(x, initial_h, initial_c, weight_ih, weight_hh, bias=None, peephole=None, direction="forward",
         output_sequence=False, recurrent_activation="sigmoid", cell_activation="tanh", activation="tanh", clip=None,
         **_):
    """Forward; MIL gate order [i, f, o, c]; returns (outputs [s, b, H] or [1, b, H], h [b, H], c [b, H])."""
    if str(_s(direction)) != "forward" or peephole is not None and np.any(peephole) or clip is not None:
        raise EvaluatorGap("the host evaluator runs forward LSTMs without peepholes or clipping")
    if (str(_s(recurrent_activation)), str(_s(cell_activation)), str(_s(activation))) != ("sigmoid", "tanh", "tanh"):
        raise EvaluatorGap("the host evaluator runs LSTMs with the default activations only")
    steps = range(x.shape[0])
    h, c = initial_h.astype(np.float64), initial_c.astype(np.float64)
    b = np.zeros(weight_ih.shape[0]) if bias is None else bias
    outputs = [None] * x.shape[0]
    for t in steps:
        gates = x[t] @ weight_ih.T + h @ weight_hh.T + b
        i, f, o, z = np.split(gates, 4, axis=-1)
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        c = sig(f) * c + sig(i) * np.tanh(z)
        h = sig(o) * np.tanh(c)
        outputs[t] = h
    seq = np.stack(outputs) if _s(output_sequence) else h[None]
    dtype = x.dtype
    return seq.astype(dtype), h.astype(dtype), c.astype(dtype)


# resizing --------------------------------------------------------------------------------------
def _source_coords(n_in: int, n_out: int, scale: float, align_corners: bool, half_pixel: bool) -> np.ndarray:
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return dst * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    if half_pixel:
        return np.clip((dst + 0.5) / scale - 0.5, 0, n_in - 1)
    return np.clip(dst / scale, 0, n_in - 1)


def _lerp(x, axis: int, coords: np.ndarray):
    lo = np.floor(coords).astype(int)
    hi = np.minimum(lo + 1, x.shape[axis] - 1)
    frac = (coords - lo).reshape([-1 if a == axis % x.ndim else 1 for a in range(x.ndim)])
    return np.take(x, lo, axis=axis) * (1 - frac) + np.take(x, hi, axis=axis) * frac


@kernel("upsample_bilinear")
def upsample_bilinear(x, scale_factor_height=1.0, scale_factor_width=1.0, align_corners=True,
                      half_pixel_centers=None, **_):
    """``half_pixel_centers`` (iOS 16+) absent: iOS 15's meaning, half-pixel unless ``align_corners``."""
    sh, sw = float(_s(scale_factor_height)), float(_s(scale_factor_width))
    h, w = x.shape[-2:]
    oh, ow = int(np.floor(h * sh)), int(np.floor(w * sw))
    ac = bool(_s(align_corners))
    hp = not ac if half_pixel_centers is None else bool(_s(half_pixel_centers))
    y = _lerp(x.astype(np.float64), -2, _source_coords(h, oh, sh, ac, hp))
    return _lerp(y, -1, _source_coords(w, ow, sw, ac, hp)).astype(x.dtype)


@kernel("upsample_nearest_neighbor")
def upsample_nearest(x, scale_factor_height=1, scale_factor_width=1, **_):
    sh, sw = float(_s(scale_factor_height)), float(_s(scale_factor_width))
    h, w = x.shape[-2:]
    rows = np.minimum(np.floor(np.arange(int(h * sh)) / sh).astype(int), h - 1)
    cols = np.minimum(np.floor(np.arange(int(w * sw)) / sw).astype(int), w - 1)
    return x[..., rows, :][..., cols]


def _grid(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """Source coordinates of MIL's size-based bilinear sampling modes (as resize_bilinear documents them)."""
    i = np.arange(n_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if n_out == 1:
            points = np.full(1, 0.0 if mode == "STRICT_ALIGN_CORNERS" else (n_in - 1) / 2)
        else:
            points = i * (n_in - 1) / (n_out - 1)
    elif mode == "DEFAULT":
        points = i * n_in / n_out
    elif mode == "OFFSET_CORNERS":
        delta = max(1, n_in - 1) / n_out
        points = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        points = (i + 0.5) * n_in / n_out - 0.5
    else:
        raise EvaluatorGap(f"the host evaluator has no bilinear sampling mode {mode}")
    return np.clip(points, 0, n_in - 1)


def _bilinear_to(x, oh: int, ow: int, mode: str):
    h, w = x.shape[-2:]
    y = _lerp(x.astype(np.float64), -2, _grid(h, oh, mode))
    return _lerp(y, -1, _grid(w, ow, mode)).astype(x.dtype)


@kernel("resize_bilinear")
def resize_bilinear(x, target_size_height=1, target_size_width=1, sampling_mode="DEFAULT", **_):
    return _bilinear_to(x, int(_s(target_size_height)), int(_s(target_size_width)), str(_s(sampling_mode)))


@kernel("resize")
def resize(x, shape, resized_dims, interpolation_mode="LINEAR", sampling_mode="DEFAULT", **_):
    """iOS 17's resize; LINEAR of the last two axes only (what the lowering emits). A 0 in ``shape`` keeps
    that size."""
    dims = int(_s(resized_dims))
    if str(_s(interpolation_mode)) != "LINEAR" or dims != 2:
        raise EvaluatorGap("the host evaluator runs iOS 17 resize in LINEAR mode over the last two axes only")
    oh, ow = (int(v) if int(v) else x.shape[i - 2] for i, v in enumerate(np.asarray(shape).reshape(-1)[-2:]))
    return _bilinear_to(x, oh, ow, str(_s(sampling_mode)))


# kernels of further op families register themselves on import
from onnxbridge.backends.coreml import evaluate_select, evaluate_spatial  # noqa: E402,F401
