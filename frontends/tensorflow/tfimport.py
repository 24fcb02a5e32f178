"""Import TensorFlow quietly and keep tf2onnx / TFLite chatter out of the user's terminal."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from typing import Iterator


def import_tf():
    """``tensorflow``, with its C++ INFO/WARNING logs off unless the user set TF_CPP_MIN_LOG_LEVEL."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from onnxbridge.isolation import require_importable

    require_importable("tensorflow")
    import tensorflow as tf

    for name in ("tensorflow", "absl", "tf2onnx"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return tf


@contextlib.contextmanager
def quiet(caught: list[str]) -> Iterator[None]:
    """Silence tf2onnx's logging and stdout; collect Python warnings (deduplicated) into ``caught``."""
    loggers = [logging.getLogger(n) for n in ("tf2onnx", "tensorflow", "absl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as records, contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("always")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    for w in records:
        text = " ".join(str(w.message).split())[:300]
        if text not in caught and "deprecated" not in text.lower() and len(caught) < 10:
            caught.append(text)
