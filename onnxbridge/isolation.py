"""Keep frameworks that cannot share a process apart.

``import tensorflow`` followed by ``import paddle`` in one process segfaults: ``require_importable`` refuses the
import order that crashes. (Native code that can crash runs in ``onnxbridge.worker``; paddle2onnx, which aborts its
process on some models and may live in an environment of its own, in ``frontends/paddle/p2o_child.py``.)
"""
from __future__ import annotations

import sys

from onnxbridge.errors import UnavailableError

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
