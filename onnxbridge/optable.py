"""A table of functions by op, filled by decorators as their modules are imported: the opset adapters' rewrites
(``adapters.registry``), the Core ML lowerings (``backends.coreml.lower``) and the MIL host kernels
(``backends.coreml.evaluate``)."""
from __future__ import annotations

from typing import Any, Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
F = TypeVar("F", bound=Callable[..., Any])


class OpTable(Generic[K]):
    """Functions by key (an op name, or an (op, version) pair). A key is registered once: a second registration
    raises ValueError naming both functions, at import time, rather than letting the last module imported win."""

    def __init__(self, what: str):
        self.what = what  # what one entry is, for the error: "up rewrite", "host kernel of MIL op", ...
        self._fns: dict[K, Callable[..., Any]] = {}

    def register(self, *keys: K) -> Callable[[F], F]:
        """A decorator registering its function under every key in ``keys``."""
        def deco(fn: F) -> F:
            for key in keys:
                self[key] = fn
            return fn
        return deco

    def __setitem__(self, key: K, fn: Callable[..., Any]) -> None:
        if key in self._fns:
            raise ValueError(f"{self.what} {key!r} is registered twice: by {_where(self._fns[key])} "
                             f"and by {_where(fn)}")
        self._fns[key] = fn

    def update(self, **fns: Callable[..., Any]) -> None:
        """Register each function under its keyword (string keys)."""
        for key, fn in fns.items():
            self[key] = fn  # type: ignore[index]

    def __getitem__(self, key: K) -> Callable[..., Any]:
        return self._fns[key]

    def get(self, key: K) -> Callable[..., Any] | None:
        return self._fns.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._fns

    def names(self) -> list[K]:
        """Every registered key, sorted."""
        return sorted(self._fns)  # type: ignore[type-var]


def _where(fn: Callable[..., Any]) -> str:
    """A function as ``module.qualname (file:line)``, the place it was defined."""
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    code = getattr(fn, "__code__", None)
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name
