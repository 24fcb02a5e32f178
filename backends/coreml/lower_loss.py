"""Core ML lowerings: CastLike and the training losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).

A loss picks each position's class score with ``gather_along_axis`` over axis 1. Targets equal to
``ignore_index`` are replaced by class 0 before the gather (so the index is in bounds, whatever the ignored value
is) and get weight 0, which zeroes their loss. ``mean`` is ``sum(loss) / sum(weight)`` as ONNX defines it (the
weights of the targets, 0 for ignored ones; 1 each without a weight input); ``sum`` and ``mean`` are rank 0.
"""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import INT32, Ctx, _f32, narrow, np_dtype, op

# the dtype a CastLike casts to, by the dtype its second input has in the program (MIL has no int64 or fp64)
CAST_LIKE = {np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp32", np.dtype(np.float16): "fp16",
             np.dtype(np.int32): "int32", np.dtype(np.int64): "int32", np.dtype(np.bool_): "bool"}


@op("CastLike")
def cast_like(ctx: Ctx):
    """Cast to the (MIL) dtype of input 1; exact as ``Cast`` is (float to integer truncates). An integer
    ``like`` computed in the program is refused: it is int32 in Core ML whatever its ONNX width (int8 ... int64),
    so the width the cast must wrap or saturate to is not known here."""
    like = ctx.get(1, raw=True)
    if not isinstance(like, np.ndarray) and np_dtype(like).kind in "iu":
        ctx.refuse("its 'like' input is a run-time integer tensor, whose ONNX width Core ML's int32 does not keep")
    like = np_dtype(like)
    if like not in CAST_LIKE:
        ctx.refuse(f"a cast to {like} has no Core ML equivalent")
    dtype, x = CAST_LIKE[like], ctx.get(0)
    if isinstance(x, np.ndarray):
        return x.astype({"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "bool": np.bool_}[dtype])
    return ctx.mb.cast(x=x, dtype=dtype, name=ctx.name())


@op("NegativeLogLikelihoodLoss")
def nll_loss(ctx: Ctx):
    return _nll(ctx, _f32(ctx.get(0)), ctx.name())


@op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: Ctx):
    """NLL of log_softmax(scores) over the classes; the optional second output is that log_softmax."""
    log_prob = _log_softmax(ctx, _f32(ctx.get(0)), ctx.name(1) if len(ctx.node.output) > 1 else None)
    return _nll(ctx, log_prob, ctx.name()), log_prob


def _log_softmax(ctx: Ctx, x, name: str | None):
    """x - max - log(sum(exp(x - max))) over axis 1: no log of an underflowed probability."""
    mb = ctx.mb
    if len(x.shape) < 2:
        ctx.refuse(f"its scores have rank {len(x.shape)}; the loss needs [N, C, d1, ...]")
    shifted = mb.sub(x=x, y=mb.reduce_max(x=x, axes=[1], keep_dims=True))
    total = mb.reduce_sum(x=mb.exp(x=shifted), axes=[1], keep_dims=True)
    return mb.sub(x=shifted, y=mb.log(x=total), **({"name": name} if name else {}))


def _nll(ctx: Ctx, x, name: str):
    """-x[n, target[n, d...], d...] * weight[target], reduced as the node's ``reduction`` says."""
    mb = ctx.mb
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        ctx.refuse(f"reduction '{reduction}' is not one ONNX defines")
    rank = len(x.shape)
    if rank < 2:
        ctx.refuse(f"its input has rank {rank}; the loss needs [N, C, d1, ...]")
    target, valid = _target(ctx)
    dtype = np_dtype(x)
    picked = mb.gather_along_axis(x=x, indices=mb.expand_dims(x=target, axes=[1]), axis=1)
    loss = mb.mul(x=mb.squeeze(x=picked, axes=[1]), y=np.array(-1, dtype))
    weight = _weight(ctx, target, valid, dtype)
    if weight is not None:
        loss = mb.mul(x=loss, y=weight)
    if reduction == "none":
        return mb.identity(x=loss, name=name)
    axes = list(range(rank - 1))
    if reduction == "sum":
        return mb.reduce_sum(x=loss, axes=axes, keep_dims=False, name=name)
    if weight is None:
        return mb.reduce_mean(x=loss, axes=axes, keep_dims=False, name=name)
    return mb.real_div(x=mb.reduce_sum(x=loss, axes=axes, keep_dims=False),
                       y=mb.reduce_sum(x=weight, axes=axes, keep_dims=False), name=name)


def _target(ctx: Ctx):
    """The int32 target with ignored positions set to class 0, and where it is not ignored (None: no
    ``ignore_index``)."""
    mb = ctx.mb
    target = ctx.get(1)  # int32 in the program (ONNX's int32 or int64 class indices)
    if isinstance(target, np.ndarray):
        target = narrow(target)
    ignore = ctx.attr("ignore_index")
    if ignore is None:
        return target, None
    if not INT32.min <= ignore <= INT32.max:
        ctx.refuse(f"ignore_index {ignore} is beyond int32, the target's dtype in Core ML")
    valid = mb.not_equal(x=target, y=np.int32(ignore))
    return mb.select(cond=valid, a=target, b=np.int32(0)), valid


def _weight(ctx: Ctx, target, valid, dtype: np.dtype):
    """Each position's class weight (input 2), 0 where the target is ignored; None when every weight is 1."""
    mb = ctx.mb
    weight = _f32(ctx.get(2))
    if weight is not None:
        weight = mb.gather(x=weight, indices=target, axis=0)  # ONNX gives it the input's dtype
    if valid is None:
        return weight
    if weight is None:
        return mb.cast(x=valid, dtype="fp16" if dtype == np.float16 else "fp32")
    return mb.select(cond=valid, a=weight, b=np.array(0, dtype))
