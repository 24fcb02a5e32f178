"""Import TensorFlow quietly; the loggers to silence while tf2onnx works."""
from __future__ import annotations

import logging
import os
import sys

LOGGERS = ("tf2onnx", "tensorflow", "absl")


def import_tf():
    """``tensorflow`` (and keras, tf2onnx), without their start-up chatter.

    TF_CPP_MIN_LOG_LEVEL is set to 3 unless the user set it; TF 2.21 still prints absl INFO lines
    (oneDNN, CUDA stubs) from its shared libraries while they load, so the first import runs with
    file descriptors 1 and 2 redirected. An import error is still raised as an exception.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from onnxbridge.isolation import require_importable

    require_importable("tensorflow")
    if "tf2onnx" not in sys.modules:
        from onnxbridge.quiet import native_output_silenced

        with native_output_silenced():
            import keras  # noqa: F401
            import tensorflow  # noqa: F401
            import tf2onnx  # noqa: F401
    import tensorflow as tf

    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    return tf
