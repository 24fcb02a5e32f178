"""Import coremltools without TensorFlow: coremltools imports TF when it is installed, which costs seconds
and, here, would make a later ``import paddle`` crash (see onnxbridge.isolation)."""
from __future__ import annotations

import logging
import sys
import warnings


def import_ct():
    """``coremltools``; TensorFlow is hidden from it unless this process already imported TF."""
    if "coremltools" in sys.modules:
        return sys.modules["coremltools"]
    hide = "tensorflow" not in sys.modules
    if hide:
        sys.modules["tensorflow"] = None  # makes coremltools' optional "import tensorflow" fail fast
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("coremltools").setLevel(logging.ERROR)
            import coremltools
    finally:
        if hide:
            del sys.modules["tensorflow"]
    return coremltools
