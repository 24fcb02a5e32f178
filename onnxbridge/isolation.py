"""Keep frameworks that cannot share a process apart.

Some frameworks crash the process when imported after another (``import tensorflow`` followed by ``import paddle``
segfaults): a plugin declares the modules its framework must not follow (``Plugin.conflicts``) and
``require_importable`` refuses that import order. (Native code that can crash runs in ``onnxbridge.worker``; a
converter that aborts its process or lives in an environment of its own runs in a child process of its plugin's.)
"""
from __future__ import annotations

import sys

from onnxbridge.errors import UnavailableError


def conflicts(framework: str) -> tuple[str, ...]:
    """The modules that must not be imported before ``framework`` (a plugin's name, its framework's module) in one
    process: what its plugin declares (``Plugin.conflicts``); none for a name no plugin has."""
    from onnxbridge.plugins import BACKENDS, FRONTENDS

    for registry in (FRONTENDS, BACKENDS):
        if framework in registry.names():
            return registry.plugin(framework).conflicts
    return ()


def require_importable(framework: str) -> None:
    """Raise UnavailableError if importing ``framework`` here would crash the process."""
    if framework in sys.modules:
        return
    for other in conflicts(framework):
        if other in sys.modules:
            raise UnavailableError(
                f"{framework} cannot be imported into a process that has already imported {other} "
                "(the process would crash)", hint=f"convert {framework} models in a separate process")
