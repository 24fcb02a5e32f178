"""Import coremltools without TensorFlow: coremltools imports TF when it is installed, which costs seconds
and, here, would make a later ``import paddle`` crash (see onnxbridge.isolation)."""
from __future__ import annotations

import logging
import sys
import warnings


def import_ct():
    """``coremltools``; TensorFlow is hidden from it unless this process already imported TF. Every entry point of
    the backend calls this before anything imports from coremltools: without it, UnavailableError (exit 3, with
    the install hint)."""
    if sys.modules.get("coremltools") is not None:
        return sys.modules["coremltools"]
    hide = "tensorflow" not in sys.modules
    if hide:
        sys.modules["tensorflow"] = None  # makes coremltools' optional "import tensorflow" fail fast
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("coremltools").setLevel(logging.ERROR)
            import coremltools
    except Exception as exc:  # noqa: BLE001 - not installed, or a broken install's own error at import
        from onnxbridge.backends.coreml import PLUGIN

        raise PLUGIN.unavailable("coremltools", exc) from None
    finally:
        if hide:
            del sys.modules["tensorflow"]
    return coremltools
