"""What a JAX source is: the callable to trace and run, what it is called, its parameters; eval mode for nnx."""
from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from onnxbridge.errors import BadInputError

EVAL_FLAGS = ("deterministic", "use_running_average")  # nnx Dropout / BatchNorm (what nnx.Module.eval sets)


@dataclass
class Callee:
    """``fn(*arrays)`` is what jax2onnx traces and what reference runs call; ``params`` are its positional
    parameter names (``required``: those without a default), ``module`` the nnx.Module run in eval mode."""

    fn: Callable
    kind: str
    description: str
    params: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    module: Any = None


def _params(fn: Any) -> tuple[list[str], list[str]]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [], []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [p.name for p in positional], [p.name for p in positional if p.default is p.empty]


def resolve(source: Any) -> Callee:
    """The ``Callee`` for a jitted or plain function, an nnx.Module, a bound linen module or a ``(linen module,
    variables)`` pair."""
    from flax import linen, nnx

    if isinstance(source, tuple) and len(source) == 2 and isinstance(source[0], linen.Module):
        module, variables = source
        if not isinstance(variables, Mapping) or not variables:
            raise BadInputError("a (linen module, variables) pair needs the variables from module.init(...)")

        def apply(*args: Any) -> Any:
            return module.apply(variables, *args)

        names, required = _params(module.__call__)
        return Callee(apply, "linen.Module", f"linen {type(module).__name__} with {', '.join(variables)}",
                      names, required)
    if isinstance(source, linen.Module):
        if source.scope is None:
            raise BadInputError(f"linen {type(source).__name__} has no variables bound",
                                hint="pass module.bind(variables), or (module, variables) in the Python API")
        names, required = _params(source.__call__)
        return Callee(source, "linen.Module", f"bound linen {type(source).__name__}", names, required)
    if isinstance(source, nnx.Module):
        if not callable(source):
            raise BadInputError(f"nnx {type(source).__name__} has no __call__ to export")
        names, required = _params(source.__call__)
        return Callee(source, "nnx.Module", f"nnx {type(source).__name__}", names, required, module=source)
    if not callable(source):
        raise BadInputError(f"the jax frontend cannot use a {type(source).__name__}: pass a function, an "
                            "nnx.Module or a bound linen module")
    names, required = _params(source)
    inner = source.func if isinstance(source, functools.partial) else source
    name = getattr(inner, "__name__", type(inner).__name__)
    jitted = type(inner).__module__.split(".")[0] in ("jax", "jaxlib")
    kind = "jitted function" if jitted else "function"
    return Callee(source, kind, f"{'jax.jit(' + name + ')' if jitted else name}", names, required)


@contextlib.contextmanager
def eval_mode(module: Any) -> Iterator[list[str]]:
    """nnx Dropout deterministic and BatchNorm on running averages (as ``module.eval()``), each flag restored
    after; yields what it changed (``Type.flag``)."""
    if module is None:
        yield []
        return
    from flax import nnx

    saved = [(m, flag, getattr(m, flag)) for _, m in nnx.iter_modules(module) for flag in EVAL_FLAGS
             if isinstance(getattr(m, flag, None), bool)]
    changed = sorted({f"{type(m).__name__}.{flag}" for m, flag, value in saved if not value})
    try:
        for m, flag, _ in saved:
            setattr(m, flag, True)
        yield changed
    finally:
        for m, flag, value in saved:
            setattr(m, flag, value)
