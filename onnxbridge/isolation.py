"""Keep frameworks that cannot share a process apart, and turn native crashes into errors.

``import tensorflow`` followed by ``import paddle`` in one process segfaults, and native converters
(paddle2onnx) abort the whole process on some models. ``require_importable`` refuses the import
order that crashes; ``call_isolated`` runs ``module:function(**kwargs)`` in a fresh worker process
(``onnxbridge.worker``) of its own, so a crash there becomes an error with the signal and the last
lines it printed, and the framework it imports never meets the others.
"""
from __future__ import annotations

import sys
from typing import Any

from onnxbridge.errors import ExportError, UnavailableError, WorkerError

# framework -> frameworks that must not be imported before it in the same process
CONFLICTS: dict[str, tuple[str, ...]] = {"paddle": ("tensorflow",)}


def require_importable(framework: str) -> None:
    """Raise UnavailableError if importing ``framework`` here would crash the process."""
    if framework in sys.modules:
        return
    for other in CONFLICTS.get(framework, ()):
        if other in sys.modules:
            raise UnavailableError(
                f"{framework} cannot be imported into a process that has already imported {other} "
                "(the process would crash)", hint=f"convert {framework} models in a separate process")


def call_isolated(target: str, kwargs: dict[str, Any], *, what: str, timeout: float | None = None,
                  library: str = "") -> Any:
    """``module:function(**kwargs)`` in a fresh worker process of its own (``worker.Worker``), stopped after.

    An OnnxBridgeError raised there is raised here with the same class and message; any other exception becomes
    an ExportError naming ``what``; a crash (signal) or a timeout is a NativeCrash naming ``what`` and ``library``.
    """
    from onnxbridge.worker import Worker

    child = Worker()
    try:
        return child.request(("call", target, (), dict(kwargs)), step=what, library=library or what,
                             timeout=timeout)
    except WorkerError as exc:
        raise ExportError(f"{what}: {exc}") from None
    finally:
        child.kill()
