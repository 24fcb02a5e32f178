"""ONNX nodes as MIL ops: the registry ``OPS`` (one function per ONNX op, filled by the op families in
``lower_math``, ``lower_nn``, ``lower_rnn``, ``lower_resize``, ``lower_shape``), the lowering context ``Ctx`` and the
helpers they share; ``program.program`` builds the MIL program.

Values are MIL vars, or numpy arrays for constants (initializers, Constant nodes, folded values), which MIL
takes directly where it wants constants (conv weights, shapes, axes). A lowering returns one value, or a tuple
with one value per ONNX output. Input dims may be flexible (MIL symbols): folded shape values then hold those
symbols (object arrays, turned into run-time int32 tensors by ``runtime_shape`` where an op needs them), and a
lowering that needs a static dim refuses, naming the node, rather than baking in the sample's size.

Dtype policy (MIL has no int64 or fp64): constants are narrowed with ``narrow`` (int64 -> int32 saturating,
fp64 -> fp32); binary ops get one dtype through ``same_dtype`` (explicit casts, as MIL never promotes). Ops that
only move values but whose MIL op takes no bool (gathers, scatters) or floats only (pad, depth_to_space, nearest
upsample) take bools and int32s exactly through ``moved`` and ``float_moved``, never by a rounding cast.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from onnxbridge.errors import UnsupportedError
from onnxbridge.optable import OpTable

if TYPE_CHECKING:
    import onnx

OPS: OpTable[str] = OpTable("Core ML lowering of ONNX op")
op = OPS.register  # @op("Name", ...): the lowering of those ONNX ops
from onnxbridge.backends.coreml import TARGETS  # noqa: E402 - declared with the plugin, light
INT32 = np.iinfo(np.int32)
FP16_MAX = 65504.0
# bounds on what a lowering builds from a model's sizes, so a crafted size cannot make it run or allocate for ever
MAX_UNROLL = 4096  # steps of a recurrent op unrolled into MIL ops
MAX_TAPS = 1024  # kernel taps of a max pool built from one slice per tap
MAX_TABLE = 1 << 24  # entries of a resize's interpolation matrix or index list


class Ctx:
    """Values by ONNX name, the node being lowered, and the MIL builder."""

    def __init__(self, mb, opset: int, target: str = "iOS16"):
        self.mb, self.opset, self.target, self.values = mb, opset, target, {}
        self.node: "onnx.NodeProto | None" = None
        self.fp16 = False  # fp16 compute: constants are clamped to +-65504 as they are stored
        self.symbols: dict = {}  # MIL symbol of a flexible dim -> (var, axis) it can be read from at run time

    def needs(self, target: str, what: str):
        """Refuse when the build's deployment target is older than ``target``."""
        if TARGETS.index(self.target) < TARGETS.index(target):
            self.refuse(f"{what} needs --target {target} or newer (building for {self.target})")

    def get(self, i: int, raw: bool = False):
        """Input ``i``: a MIL var or a constant; a folded shape value holding flexible sizes (an object array)
        becomes an int32 tensor computed at run time unless ``raw``."""
        name = self.node.input[i] if i < len(self.node.input) else ""
        value = self.values[name] if name else None
        if not raw and isinstance(value, np.ndarray) and value.dtype == object:
            return runtime_shape(self, value)
        return value

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Input ``i`` as a constant (an object array when it holds flexible sizes), else refused."""
        value = self.get(i, raw=True)
        if value is not None and not isinstance(value, np.ndarray):
            self.refuse(f"its {what} must be a constant for Core ML")
        return value

    def attr(self, name: str, default: Any = None) -> Any:
        import onnx

        for a in self.node.attribute:
            if a.name == name:
                value = onnx.helper.get_attribute_value(a)
                if isinstance(value, list) and value and isinstance(value[0], bytes):
                    return [v.decode() for v in value]
                return value.decode() if isinstance(value, bytes) else value
        return default

    def refuse(self, why: str):
        raise UnsupportedError(f"node '{self.node.name}' ({self.node.op_type}): {why}")

    def name(self, i: int = 0) -> str:
        return _mil_name(self.node.output[i])


def _mil_name(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _f32(v):
    return v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v


def narrow(v: np.ndarray) -> np.ndarray:
    """A constant in a dtype MIL has: integers -> int32 (saturating: INT64_MAX must not wrap to -1),
    fp64 -> fp32."""
    if v.dtype.kind in "iu" and v.dtype != np.int32:
        return np.asarray(np.clip(v, INT32.min, INT32.max), np.int32)  # np.clip gives a 0-d array a numpy scalar
    return v.astype(np.float32) if v.dtype == np.float64 else v


def np_dtype(v) -> np.dtype:
    """The numpy dtype of a constant or a MIL var."""
    if isinstance(v, np.ndarray):
        return v.dtype
    from coremltools.converters.mil.mil import types

    return np.dtype(types.nptype_from_builtin(v.dtype))


def same_dtype(ctx: "Ctx", *values) -> list:
    """``values`` in one dtype: the vars' dtype when they agree, else fp32 when any is float, else int32.
    Vars are cast explicitly; constants are narrowed (fp16 ones clamped to +-65504)."""
    vars_ = [v for v in values if v is not None and not isinstance(v, np.ndarray)]
    kinds = {np_dtype(v) for v in vars_} or {narrow(np.asarray(v)).dtype for v in values if v is not None}
    if len(kinds) == 1:
        dtype = kinds.pop()
    else:
        dtype = np.dtype(np.float32) if any(k.kind == "f" for k in kinds) else np.dtype(np.int32)
    mil = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(np.int32): "int32",
           np.dtype(np.bool_): "bool"}[dtype]
    out = []
    for v in values:
        if v is None:
            out.append(v)
        elif isinstance(v, np.ndarray):
            v = narrow(v)
            out.append(np.clip(v, -FP16_MAX, FP16_MAX).astype(dtype) if dtype == np.float16 else v.astype(dtype))
        else:
            out.append(v if np_dtype(v) == dtype else ctx.mb.cast(x=v, dtype=mil))
    return out


def moved(ctx: "Ctx", x, move):
    """``move(x, **named)``: a MIL op that only moves x's values (gathers, scatters) but takes no bool, named as the
    node's output; a bool ``x`` goes through it as int32 0/1 and back, which is exact."""
    if np_dtype(x) != np.bool_:
        return move(narrow(x) if isinstance(x, np.ndarray) else x, name=ctx.name())
    as_int = x.astype(np.int32) if isinstance(x, np.ndarray) else ctx.mb.cast(x=x, dtype="int32")
    return ctx.mb.cast(x=move(as_int), dtype="bool", name=ctx.name())


PIECE_BITS = 11  # int32 moved through float ops in pieces of 11 bits: every piece is exact in fp16 too


def int32_piece(value: int, k: int | None) -> int:
    """Piece ``k`` of int32 ``value`` as ``float_moved`` splits it: bits 0-10 and 11-21 (in [0, 2048)), then the
    signed rest (in [-512, 512)); the value itself for k None (a float or bool ``x``)."""
    if k is None:
        return value
    return value >> (PIECE_BITS * k) if k == 2 else (value >> (PIECE_BITS * k)) & ((1 << PIECE_BITS) - 1)


def float_moved(ctx: "Ctx", x, move, named: bool = True):
    """``move(v, k, **named)``: a MIL op that only moves values (pad, nearest upsample, depth_to_space) but takes
    floats only, named as the node's output unless not ``named``. A float ``x`` goes as it is (k None); a bool one
    as fp32 0/1; an int32 one as three pieces (``int32_piece``: k 0, 1, 2) moved each and joined again in int32.
    Each piece is an integer below 2048 in magnitude, exact in fp32 and in fp16 (coremltools' fp16 compute casts
    the fp32 ops), so every int32 comes back exactly; a cast of the whole value to fp32 would be exact only up to
    2^24 (2^11 in fp16). Not for ops that compute on values (a max pool's max of pieces is not the pieces of a
    max)."""
    mb, dtype = ctx.mb, np_dtype(x)
    name = {"name": ctx.name()} if named else {}
    x = ctx.mb.const(val=narrow(x)) if isinstance(x, np.ndarray) else x
    if dtype.kind == "f":
        return move(x, None, **name)
    if dtype == np.bool_:
        return mb.cast(x=move(mb.cast(x=x, dtype="fp32"), None), dtype="bool", **name)
    base, pieces, rest = np.int32(1 << PIECE_BITS), [], x
    for _ in range(2):
        high = mb.floor_div(x=rest, y=base)
        pieces.append(mb.sub(x=rest, y=mb.mul(x=high, y=base)))
        rest = high
    moved_ = [mb.cast(x=move(mb.cast(x=v, dtype="fp32"), k), dtype="int32") for k, v in enumerate(pieces + [rest])]
    return mb.add(x=mb.mul(x=mb.add(x=mb.mul(x=moved_[2], y=base), y=moved_[1]), y=base), y=moved_[0], **name)


def _static(dims) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in dims)


def runtime_shape(ctx: "Ctx", value: np.ndarray):
    """An object array of ints and flexible sizes (MIL symbols, sums, products, floor quotients) as an int32
    tensor computed at run time from the shapes of the vars the symbols come from."""
    parts = [_runtime_size(ctx, e) for e in value.reshape(-1)]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts).reshape(value.shape)
    flat = ctx.mb.concat(values=parts, axis=0) if len(parts) > 1 else parts[0]
    if value.ndim == 0:
        return ctx.mb.squeeze(x=flat)
    return flat if value.ndim == 1 else ctx.mb.reshape(x=flat, shape=np.array(value.shape, np.int32))


def _runtime_size(ctx: "Ctx", e):
    import sympy

    if isinstance(e, (int, np.integer, sympy.Integer)):
        return np.array([int(e)], np.int32)
    if isinstance(e, sympy.Symbol):
        if e not in ctx.symbols:
            ctx.refuse(f"the flexible size {e} cannot be read at run time")
        var, axis = ctx.symbols[e]
        return ctx.mb.slice_by_index(x=ctx.mb.shape(x=var), begin=np.array([axis], np.int32),
                                     end=np.array([axis + 1], np.int32))
    if isinstance(e, (sympy.Add, sympy.Mul)):
        fn = ctx.mb.add if isinstance(e, sympy.Add) else ctx.mb.mul
        if any(a.is_Number and not a.is_Integer for a in e.args):  # a quotient MIL inferred (a reshape's -1)
            num, den = sympy.fraction(sympy.together(e))
            if not den.is_Integer:
                ctx.refuse(f"the flexible size {e} is not an integer expression")
            return ctx.mb.floor_div(x=_runtime_size(ctx, num), y=np.array([int(den)], np.int32))  # exact: a size
        acc = _runtime_size(ctx, e.args[0])
        for arg in e.args[1:]:
            acc = fn(x=acc, y=_runtime_size(ctx, arg))
        return acc
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den.is_Integer:
            return ctx.mb.floor_div(x=_runtime_size(ctx, num), y=np.array([int(den)], np.int32))
        return ctx.mb.floor_div(x=_runtime_size(ctx, num), y=_runtime_size(ctx, den))  # sizes: positive integers
    ctx.refuse(f"the flexible size {e} is not lowered")


def _axes(ctx: Ctx, index: int, rank: int) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or the constant input ``index`` (newer), made non-negative."""
    axes = ctx.attr("axes")
    if axes is None and index < len(ctx.node.input) and ctx.node.input[index]:
        axes = ctx.const(index, "axes").tolist()
    return None if axes is None else [int(a) % rank for a in axes]


# the op families register themselves in OPS on import (they import this module's helpers)
from onnxbridge.backends.coreml import (  # noqa: E402,F401
    lower_loss, lower_math, lower_nn, lower_resize, lower_rnn, lower_select, lower_shape, lower_spatial,
)
