"""Which TensorRT: NVIDIA's ``tensorrt`` or ``tensorrt_rtx``, picked by what is installed (or ``--flavour``), and what
its API can do, found by looking for the features themselves rather than by parsing version strings.

TensorRT 11 (and TensorRT-RTX) are strongly typed only: no ``BuilderFlag.FP16``/``INT8``, no int8 calibrator, so
precision has to live in the ONNX graph. TensorRT 10 still has the flags. Both log through one process-wide logger:
the first logger given to a Builder/Runtime wins, so ``Flavour.capture()`` redirects one shared logger.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

from onnxbridge.errors import BadInputError, UnavailableError

# flavour -> (Python module, pip hint)
MODULES = {
    "tensorrt": ("tensorrt", "pip install tensorrt-cu12 --extra-index-url https://pypi.nvidia.com "
                             "(needs NVIDIA's index)"),
    "tensorrt-rtx": ("tensorrt_rtx", "pip install 'onnxbridge[tensorrt]' (tensorrt-rtx-cu12 from PyPI)"),
}
MAGIC = {b"ftrt": "tensorrt", b"vtrt": "tensorrt-rtx"}  # the first 4 bytes of each flavour's serialized engines
PREFERENCE = ("tensorrt", "tensorrt-rtx")  # the full TensorRT first: its engines run on any supported NVIDIA GPU
HIDE_ENV = "ONNXBRIDGE_TENSORRT_HIDE"  # comma-separated flavours to treat as not installed (tests, doctor checks)
# Highest default-domain opset each parser generation takes (NVIDIA's ONNX opset guide: TensorRT 11.x -> 25;
# TensorRT 10.x and the TensorRT-RTX 1.x parser -> 22). Models above are adapted down before parsing.
OPSET_CEILING = {"11": 25, "10": 22}


@dataclass
class Flavour:
    """One importable TensorRT module and what it can do."""

    name: str
    trt: Any = field(repr=False)
    version: str
    features: dict[str, bool]
    _logger: Any = field(default=None, repr=False)

    @property
    def api(self) -> str:
        """``"11"`` when weak typing is gone (strongly typed only), else ``"10"``."""
        return "11" if self.features["strongly_typed_only"] else "10"

    @property
    def opset_ceiling(self) -> int:
        return OPSET_CEILING[self.api]

    def facts(self) -> dict:
        return {"flavour": self.name, "version": self.version, "api": f"tensorrt {self.api}",
                "features": dict(self.features)}

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[tuple[str, str]]]:
        """Collect (severity, message) pairs TensorRT logs at WARNING or worse while the block runs."""
        logger = self.logger()
        sink: list[tuple[str, str]] = []
        logger.sinks.append(sink)
        try:
            yield sink
        finally:
            logger.sinks.remove(sink)

    def logger(self):
        if self._logger is None:
            self._logger = _shared_logger(self.trt)
        return self._logger


_LOGGERS: dict[str, Any] = {}


def _shared_logger(trt):
    """One logger per module per process (TensorRT keeps the first it is given and ignores later ones)."""
    if trt.__name__ in _LOGGERS:
        return _LOGGERS[trt.__name__]

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.sinks: list[list] = []

        def log(self, severity, msg) -> None:
            if severity <= trt.ILogger.Severity.WARNING and self.sinks:
                self.sinks[-1].append((severity.name, " ".join(str(msg).split())))

    _LOGGERS[trt.__name__] = Logger()
    return _LOGGERS[trt.__name__]


def detect(trt) -> dict[str, bool]:
    """Feature flags of an imported TensorRT module (attribute presence, not version numbers)."""
    flags, net = trt.BuilderFlag, trt.NetworkDefinitionCreationFlag
    return {
        "strongly_typed_only": not hasattr(flags, "FP16"),
        "fp16_flag": hasattr(flags, "FP16"),
        "int8_flag": hasattr(flags, "INT8"),
        "int8_calibrator": hasattr(trt.IBuilderConfig, "int8_calibrator"),
        "strongly_typed_flag": hasattr(net, "STRONGLY_TYPED"),
        "explicit_batch_flag": hasattr(net, "EXPLICIT_BATCH"),
        "native_int64": hasattr(trt.DataType, "INT64"),
        "memory_pool_limit": hasattr(trt.IBuilderConfig, "set_memory_pool_limit"),
        "progress_monitor": hasattr(trt, "IProgressMonitor") and hasattr(trt.IBuilderConfig, "progress_monitor"),
        "timing_cache": hasattr(trt.IBuilderConfig, "create_timing_cache"),
        "execute_async_v3": hasattr(trt.IExecutionContext, "execute_async_v3"),
        "engine_inspector": hasattr(trt.ICudaEngine, "create_engine_inspector"),
    }


def installed() -> list[str]:
    """Flavours whose module can be found (without importing it), in preference order."""
    import importlib.util

    hidden = {h.strip() for h in os.environ.get(HIDE_ENV, "").split(",") if h.strip()}
    return [f for f in PREFERENCE if f not in hidden and importlib.util.find_spec(MODULES[f][0]) is not None]


_CACHE: dict[str, Flavour] = {}


def load(flavour: str | None = None) -> Flavour:
    """The TensorRT flavour to use: ``flavour`` if given, else the first installed; UnavailableError if none."""
    if flavour is not None and flavour not in MODULES:
        raise BadInputError(f"--flavour {flavour} is not a TensorRT flavour; choose {' or '.join(MODULES)}")
    hidden = {h.strip() for h in os.environ.get(HIDE_ENV, "").split(",") if h.strip()}
    names = [flavour] if flavour else list(PREFERENCE)
    errors = []
    for name in names:
        if name in _CACHE and name not in hidden:
            return _CACHE[name]
        module, hint = MODULES[name]
        if name in hidden:
            errors.append(f"{module} hidden by {HIDE_ENV}")
            continue
        try:
            trt = importlib.import_module(module)
        except Exception as exc:  # ImportError, or a wheel whose shared libraries are missing
            errors.append(f"{module}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}")
            continue
        features = detect(trt)
        if not (features["memory_pool_limit"] and hasattr(trt.Builder, "build_serialized_network")):
            errors.append(f"{module} {trt.__version__} predates set_memory_pool_limit/build_serialized_network")
            continue
        _CACHE[name] = Flavour(name, trt, str(trt.__version__), features)
        return _CACHE[name]
    hint = MODULES[flavour][1] if flavour else MODULES["tensorrt-rtx"][1] + ", or " + MODULES["tensorrt"][1]
    raise UnavailableError(f"TensorRT is not available ({'; '.join(errors)})", hint=hint)


def for_engine(data: bytes, recorded: str | None = None) -> str | None:
    """The flavour that wrote an engine: the sidecar's record, else the engine's magic (``MAGIC``), else None."""
    if recorded in MODULES:
        return recorded
    return MAGIC.get(bytes(data[:4]))
