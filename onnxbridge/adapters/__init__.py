"""Move an ONNX model to another default-domain opset, up or down, without changing its numbers.

Our own adapter table (``registry``: one rewrite per op and schema version, rules in ``rules/``)
is walked node by node by ``engine``. A step that cannot be expressed is refused with an error
naming the node, the op, the blocking feature and the opset that works; ``check`` lists every
blocker without converting. Model-local functions are inlined; other domains are left alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx

MIN_OPSET = 7


def default_opset(model: "onnx.ModelProto") -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def max_known_opset() -> int:
    import onnx.defs

    return onnx.defs.onnx_opset_version()


def _load(model: "onnx.ModelProto | str | Path") -> "onnx.ModelProto":
    if isinstance(model, (str, Path)):
        from onnxbridge.onnxio import load_onnx

        return load_onnx(model)
    return model


def _check_range(opset: int) -> None:
    import onnx

    newest = max_known_opset()
    if not MIN_OPSET <= opset <= newest:
        raise UnsupportedError(f"opset {opset} is outside what this onnx {onnx.__version__} knows "
                               f"({MIN_OPSET}..{newest})")


def adapt(model: "onnx.ModelProto | str | Path", opset: int) -> "onnx.ModelProto":
    """A copy of ``model`` at default-domain ``opset``; raises UnsupportedError naming the first blocker.

    External data references are kept (a path's weights are not loaded); ``ir_version`` is set for
    the target. The input is never modified.
    """
    from onnxbridge.adapters import engine
    from onnxbridge.arguments import check
    from onnxbridge.builder import set_ir_version

    check({"model": model, "opset": opset}, required=("model", "opset"))
    model = _load(model)
    if default_opset(model) == opset:
        return model
    _check_range(opset)
    out, _ = engine.convert(model, opset)
    set_ir_version(out)
    return out


def check(model: "onnx.ModelProto | str | Path", opset: int) -> list[str]:
    """Every node that blocks moving ``model`` to ``opset``, each with its reason (empty: it can move)."""
    from onnxbridge.adapters import engine

    model = _load(model)
    if default_opset(model) == opset:
        return []
    _check_range(opset)
    return engine.convert(model, opset, collect=True)[1]
