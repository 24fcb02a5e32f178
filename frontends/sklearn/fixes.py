"""Repairs to skl2onnx 1.20, applied only while our conversion runs.

HistGradientBoosting (classifier and regressor): skl2onnx writes ``nodes_missing_value_tracks_true``
as a list mixing Python ``False`` (leaves) with numpy uint8 (branches). protobuf >= 5 (upb) refuses
a bool in a repeated int field, so ``make_attribute`` raises "Expected an int, got a boolean" and the
conversion fails at every target opset. Booleans in integer attribute lists are written as 0/1 here.
"""
from __future__ import annotations

import contextlib
import threading

_LOCK = threading.Lock()


def _ints(value):
    import numpy as np

    if isinstance(value, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in value) \
            and all(isinstance(v, (bool, int, np.bool_, np.integer)) for v in value):
        return [int(v) for v in value]
    return value


@contextlib.contextmanager
def patched():
    """skl2onnx's node container with booleans in integer attribute lists turned into ints."""
    from skl2onnx.common._container import ModelComponentContainer

    original = ModelComponentContainer.add_node

    def add_node(self, op_type, inputs, outputs, op_domain="", op_version=None, name=None, **attrs):
        attrs = {k: _ints(v) for k, v in attrs.items()}
        return original(self, op_type, inputs, outputs, op_domain=op_domain, op_version=op_version, name=name,
                        **attrs)

    with _LOCK:
        ModelComponentContainer.add_node = add_node
        try:
            yield
        finally:
            ModelComponentContainer.add_node = original
