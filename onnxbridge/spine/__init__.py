"""The whole journey of a model, in order:

    source -> frontends.<framework> -> builder.finalize (opset, IR, metadata) -> onnxio.save_onnx
           -> validation (per hop, against the source framework) -> report

``convert``, ``validate``, ``adapt``, ``check_opset``, ``check_targets`` and ``inspect_artifact`` here are the
Python API; the CLI is a thin layer over them. The package holds the journey by what each part does:

- ``conversion``: ``convert`` as its stages (load, export, finalize, optimize, fp16, write, build, validate,
  localize, report), each reading the request (``onnxbridge.request``);
- ``validating``: ``validate``; ``checking``: ``check_opset``, ``check_targets``, ``adapt``;
- ``preflight``: what is refused before any work; ``loading``: the source model and the names the user gave;
- ``samples``: the validation samples; ``hops``: the hops and the runners they compare;
- ``artifacts``: facts about files on disk; ``results``: ``ConversionResult`` and the reports written.
"""
from __future__ import annotations

from onnxbridge.spine.artifacts import inspect_artifact
from onnxbridge.spine.checking import adapt, check_opset, check_targets
from onnxbridge.spine.conversion import DEFAULT_BACKEND, convert
from onnxbridge.spine.loading import load_source
from onnxbridge.spine.preflight import dynamic_not_kept, installed_suffixes
from onnxbridge.spine.results import ConversionResult
from onnxbridge.spine.validating import validate

__all__ = ["ConversionResult", "DEFAULT_BACKEND", "adapt", "check_opset", "check_targets", "convert",
           "dynamic_not_kept", "inspect_artifact", "installed_suffixes", "load_source", "validate"]


def _signatures() -> None:
    """``convert``'s and ``validate``'s signatures as ``inspect`` shows them: their tables' options as keyword
    arguments (the functions take them through ``**given``)."""
    import inspect

    from onnxbridge import request as requests
    from onnxbridge.spine.conversion import convert
    from onnxbridge.spine.validating import validate

    P = inspect.Parameter
    tail = [P("timeout", P.KEYWORD_ONLY, default=None), P("options", P.VAR_KEYWORD)]
    convert.__signature__ = requests.signature(
        "convert", [P("source", P.POSITIONAL_OR_KEYWORD), P("sample_inputs", P.POSITIONAL_OR_KEYWORD, default=None)],
        tail)
    validate.__signature__ = requests.signature(
        "validate", [P("source", P.POSITIONAL_OR_KEYWORD), P("converted", P.POSITIONAL_OR_KEYWORD),
                     P("inputs", P.POSITIONAL_OR_KEYWORD, default=None),
                     P("sample_inputs", P.KEYWORD_ONLY, default=None),
                     P("raise_on_failure", P.KEYWORD_ONLY, default=False),
                     P("allow_skipped", P.KEYWORD_ONLY, default=False)], tail)


_signatures()
