"""onnxbridge: move trained models between frameworks and runtimes through ONNX, validated hop by hop.

    import onnxbridge
    result = onnxbridge.convert(model, (x,), output="model.onnx", opset=17)
    result.report["status"]          # "passed" / "failed" / "skipped" (a hop that did not run: never a pass)
    result.raise_for_status()        # ValidationFailed, or ValidationSkipped (allow_skipped=True accepts it)
    onnxbridge.validate(model_or_factory, "model.onnx", inputs="inputs.npz")

Nothing heavy is imported until it is used. Every function here checks its arguments before it runs
(``arguments.checked``): a wrong type or value is a BadInputError naming the argument, never a bare TypeError.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from onnxbridge._version import __version__

if TYPE_CHECKING:
    from onnxbridge.spine import adapt
    from onnxbridge.inspection import summarize as inspect_model
    from onnxbridge.spine import ConversionResult, check_targets, convert, validate

__all__ = ["__version__", "convert", "validate", "adapt", "check_targets", "inspect_model", "ConversionResult"]

_LAZY = {
    "convert": ("onnxbridge.spine", "convert"),
    "validate": ("onnxbridge.spine", "validate"),
    "ConversionResult": ("onnxbridge.spine", "ConversionResult"),
    "adapt": ("onnxbridge.spine", "adapt"),
    "check_targets": ("onnxbridge.spine", "check_targets"),
    "inspect_model": ("onnxbridge.inspection", "summarize"),
}


_SUBMODULES = ("adapters", "errors", "report", "inspection", "renderers", "testing", "localize", "matrix")


def __getattr__(name: str):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"onnxbridge.{name}")
    if name in _LAZY:
        import importlib

        from onnxbridge.arguments import checked

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        if not isinstance(value, type):  # a function: ConversionResult's methods check their own
            value = checked(value, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnxbridge' has no attribute {name!r}")
