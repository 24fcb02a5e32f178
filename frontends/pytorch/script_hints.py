"""What a TorchScript program says about its inputs, for hints: TorchScript records no shapes, but the first op an
input feeds tells its rank and dtype (``aten::embedding`` takes integer ids, ``aten::conv2d`` an NCHW float batch
whose channels its weight gives)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# First consumer -> (argument index that takes the input, rank, dtype); ranks None: any (the hint uses 2).
_INTEGER_OPS = {"aten::embedding": 1, "aten::embedding_bag": 1, "aten::index_select": 2, "aten::one_hot": 0,
                "aten::bincount": 0}
_FLOAT_RANKS = {"aten::conv1d": 3, "aten::conv2d": 4, "aten::conv3d": 5, "aten::_convolution": None,
                "aten::linear": None, "aten::lstm": 3, "aten::gru": 3, "aten::rnn_tanh": 3, "aten::layer_norm": None,
                "aten::batch_norm": None, "aten::max_pool2d": 4, "aten::avg_pool2d": 4}
_SPATIAL = {3: [64], 4: [224, 224], 5: [16, 32, 32]}


@dataclass(frozen=True)
class InputGuess:
    """An input's likely rank, dims and dtype, and the op that says so."""

    name: str
    dims: tuple[int, ...]
    dtype: str
    op: str | None

    def flag(self) -> str:
        """``--input-shape`` text for it, e.g. ``ids:1,8:int64``."""
        dtype = "" if self.dtype == "float32" else f":{self.dtype}"
        return f"{self.name}:{','.join(map(str, self.dims))}{dtype}"


def _inlined_graph(module: Any):
    graph = module.forward.graph.copy()
    torch._C._jit_pass_inline(graph)
    return graph


def _attribute(module: Any, value) -> Any:
    """The module attribute a ``prim::GetAttr`` chain from ``self`` reads (a weight), or None."""
    names = []
    node = value.node()
    while node.kind() == "prim::GetAttr":
        names.append(node.s("name"))
        node = next(iter(node.inputs())).node()
    if not names or node.kind() != "prim::Param":
        return None
    obj = module
    for name in reversed(names):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


_PASS_THROUGH = {"aten::contiguous", "aten::clone", "aten::detach", "aten::view", "aten::reshape", "aten::flatten",
                 "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::transpose", "aten::unflatten"}


def _consumers(value, limit: int = 64) -> list:
    """The uses of ``value``, in graph order, followed through copies and reshapes and out of ``prim::If`` blocks
    (an exporter's passes put ``contiguous`` in branches before ``embedding``)."""
    found, todo, seen = [], [value], set()
    while todo and len(found) < limit:
        v = todo.pop(0)
        if v.unique() in seen:
            continue
        seen.add(v.unique())
        for use in v.uses():
            node, kind = use.user, use.user.kind()
            if kind in _PASS_THROUGH and use.offset == 0:
                todo += list(node.outputs())
            elif kind == "prim::Return":
                owner = node.owningBlock().owningNode()
                if owner is not None and owner.kind() == "prim::If":
                    todo.append(list(owner.outputs())[use.offset])
            else:
                found.append(use)
    return found


def _guess(module: Any, name: str, value) -> InputGuess:
    for use in _consumers(value):
        node, kind = use.user, use.user.kind()
        if kind in _INTEGER_OPS and use.offset == _INTEGER_OPS[kind]:
            return InputGuess(name, (1, 8), "int64", kind)
        if kind in _FLOAT_RANKS and use.offset == 0:
            weight = _attribute(module, list(node.inputs())[1]) if len(list(node.inputs())) > 1 else None
            shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else ()
            rank = _FLOAT_RANKS[kind] or (len(shape) if kind == "aten::_convolution" and shape else None)
            if kind == "aten::linear" and len(shape) == 2:
                return InputGuess(name, (1, shape[1]), "float32", kind)
            if kind == "aten::layer_norm":  # (input, normalized_shape, weight, ...): the last dim is the weight's
                norm = _attribute(module, list(node.inputs())[2])
                width = norm.shape[-1] if isinstance(norm, torch.Tensor) and norm.dim() else 32
                return InputGuess(name, (1, 8, width), "float32", kind)
            if rank in _SPATIAL:
                channels = shape[1] if len(shape) == rank and kind != "aten::batch_norm" else 3
                if kind == "aten::batch_norm" and shape:
                    channels = shape[0]
                return InputGuess(name, (1, channels, *_SPATIAL[rank]), "float32", kind)
            if kind in ("aten::lstm", "aten::gru", "aten::rnn_tanh"):
                return InputGuess(name, (1, 8, 16), "float32", kind)
    return InputGuess(name, (1, 3, 224, 224), "float32", None)


def guess_inputs(module: Any) -> dict[str, InputGuess]:
    """For a ``torch.jit.ScriptModule``, each forward input's guess by name ({} for anything else, or when its graph
    cannot be read)."""
    if not isinstance(module, torch.jit.ScriptModule):
        return {}
    try:
        graph = _inlined_graph(module)
        names = [a.name for a in module.forward.schema.arguments]
        values = list(graph.inputs())
        return {n: _guess(module, n, v) for n, v in zip(names[1:], values[1:])}
    except Exception:  # a hint is a help: a graph this cannot read gives the generic one
        return {}


def integer_hint(module: Any, shapes: dict[str, tuple[tuple[int, ...], str]]) -> str | None:
    """When ``shapes`` (name -> (dims, dtype) the model was run with) gave a float to an input whose first op takes
    integers, what to add: ``input 'ids' feeds aten::embedding, which takes integers: add :int64 (e.g.
    --input-shape ids:2,9:int64)``."""
    for name, guess in guess_inputs(module).items():
        dims, dtype = shapes.get(name, ((), ""))
        if guess.dtype == "int64" and dtype.startswith(("float", "bfloat")):
            example = f"{name}:{','.join(map(str, dims or guess.dims))}:int64"
            return f"input '{name}' feeds {guess.op}, which takes integers: add :int64 (e.g. --input-shape {example})"
    return None


def interpreter_error(exc: BaseException) -> str:
    """One line for a failure of the module: for the TorchScript interpreter, whose first line is only "The following
    operation failed in the TorchScript interpreter.", the error it ends with."""
    from onnxbridge.errors import first_line

    text = str(exc)
    if text.startswith("The following operation failed in the TorchScript interpreter"):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return first_line(lines[-1]) if lines else first_line(exc)
    return first_line(exc)
