"""Import TensorFlow quietly; the loggers to silence while tf2onnx works."""
from __future__ import annotations

import logging
import os

LOGGERS = ("tf2onnx", "tensorflow", "absl")


def import_tf():
    """``tensorflow``, with its C++ INFO/WARNING logs off unless the user set TF_CPP_MIN_LOG_LEVEL."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from onnxbridge.isolation import require_importable

    require_importable("tensorflow")
    import tensorflow as tf

    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    return tf
