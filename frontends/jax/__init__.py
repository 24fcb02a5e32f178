"""JAX / Flax frontend: a jitted (or plain jax.numpy) function, a Flax ``nnx.Module``, a bound Flax ``linen``
module (``module.bind(variables)``, or a ``(module, variables)`` pair in the Python API), exported with jax2onnx."""
from __future__ import annotations

import functools
import types
from pathlib import Path
from typing import Any, Mapping, Sequence

from onnxbridge.registry import Plugin
from onnxbridge.specs import DynamicAxis, TensorSpec

PLUGIN = Plugin("jax", "onnxbridge.frontends.jax", requires=("jax", "flax", "jax2onnx"), extra="jax", priority=25,
                description="JAX function (jitted or jax.numpy), Flax nnx.Module, bound linen module, factory "
                            "module:function")

NAME = "jax"
JAX_PACKAGES = ("jax", "jaxlib", "flax")


def _from_jax(obj: Any) -> bool:
    return any(c.__module__.split(".")[0] in JAX_PACKAGES for c in type(obj).__mro__)


def _is_linen_module(obj: Any) -> bool:
    return any(c.__module__.startswith("flax.linen") and c.__name__ == "Module" for c in type(obj).__mro__)


def _uses_jax(fn: types.FunctionType) -> bool:
    """Whether a plain function names a JAX or Flax module or object among its globals or closure (no import)."""
    named = [fn.__globals__.get(n) for n in fn.__code__.co_names]
    for cell in fn.__closure__ or ():
        try:
            named.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    for value in named:
        module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(module, str) and module.split(".")[0] in JAX_PACKAGES:
            return True
        if value is not None and not isinstance(value, (types.ModuleType, type)) and _from_jax(value):
            return True
    return False


def accepts(source: Any) -> bool:
    """JAX and Flax objects, a ``(linen module, variables)`` pair, and plain functions that use JAX."""
    if isinstance(source, (str, Path)):
        return False
    if isinstance(source, tuple) and len(source) == 2 and _is_linen_module(source[0]) and \
            isinstance(source[1], Mapping):
        return True
    if isinstance(source, functools.partial):
        return accepts(source.func)
    if isinstance(source, types.FunctionType):
        return _uses_jax(source)
    return callable(source) and _from_jax(source)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0):
    from onnxbridge.frontends.jax.model import JaxModel

    return JaxModel.create(source, sample_inputs=sample_inputs, input_shapes=input_shapes, dynamic=dynamic,
                           input_names=input_names, seed=seed)
