"""One exception hierarchy; the CLI maps each class to an exit code and one line."""
from __future__ import annotations


class OnnxBridgeError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with; ``hint`` says what to do next."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        text = " ".join(str(self).split())
        return f"{text} ({self.hint})" if self.hint else text


class BadInputError(OnnxBridgeError):
    """The source, a file or an option cannot be used as given."""


TRUST_HINT = "pass --trust (trust=True) only if you trust where the file comes from"


class UnsafeInputError(BadInputError):
    """Loading or running the source would run code it holds (pickles, TorchScript, SavedModel programs, ...)."""


class TooLargeError(BadInputError):
    """A tensor or a run would exceed a size limit (``onnxbridge.budget``)."""


class TimedOut(BadInputError):
    """The run's time budget ran out (``onnxbridge.deadline``): the model never finishes, or needs more time."""


class ExportError(OnnxBridgeError):
    """The source framework failed to export the model."""


class UnsupportedError(OnnxBridgeError):
    """The model cannot be expressed at the requested opset or target."""


class UnavailableError(OnnxBridgeError):
    """A frontend, backend or toolchain is not installed."""

    exit_code = 3


class HopSkipped(OnnxBridgeError):
    """A backend's artifact cannot run here (no GPU, no simulator): its hop is reported as skipped, never passed."""


class ValidationFailed(OnnxBridgeError):
    """Converted outputs differ from the reference beyond tolerance."""

    exit_code = 1

    def __init__(self, message: str, report: dict | None = None, **kw):
        super().__init__(message, **kw)
        self.report = report


class ValidationSkipped(ValidationFailed):
    """Validation is incomplete: a hop (or a required check, such as the dynamic axes) did not run here, e.g. a
    TensorRT hop without a CUDA GPU. Never a pass: the CLI exits 5 unless ``--allow-skipped`` (Python:
    ``raise_for_status(allow_skipped=True)``, ``validate(..., allow_skipped=True)``)."""

    exit_code = 5


EXIT_INTERNAL = 4


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message (its class name if none), cut to ``limit``."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def listing(names, shown: int = 5) -> str:
    """``names`` quoted for a one-line message: the first ``shown``, then how many more (a file may hold 60,000)."""
    names = list(names)
    text = ", ".join(map(repr, names[:shown]))
    return f"{text} ... and {len(names) - shown:,} more" if len(names) > shown else text


class NativeCrash(OnnxBridgeError):
    """Native code (onnxruntime, QNN, TensorRT, coremltools) crashed or hung in the worker process: a bug there or
    here, never a verdict on the model's numbers. ``output``: what the worker printed last."""

    exit_code = 4
    output = ""


class WorkerError(OnnxBridgeError):
    """An unexpected Python exception in the worker process (a bug: exit 4)."""

    exit_code = 4


class ArtifactMismatch(OnnxBridgeError):
    """The artifact does not hold the graph it is validated against (a foreign or altered file): the hop fails."""

    exit_code = 1
