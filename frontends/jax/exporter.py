"""jax2onnx, called the way onnxbridge needs it: only the plugin trees a JAX/Flax model can use, errors mapped to
onnxbridge's (an unconvertible primitive named), and the checker's verdict on what it wrote."""
from __future__ import annotations

import contextlib
import re
import sys
import warnings
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any, Iterator, Sequence

from onnxbridge.errors import BadInputError, ExportError, OnnxBridgeError, UnsupportedError
from onnxbridge.quiet import quiet

LOGGERS = ("jax2onnx", "onnx_ir", "jax", "absl")
# jax2onnx imports every plugin module on its first export, its examples and Equinox's included, and those build
# models at import (74 XLA compilations, ~30 s). The trees a model can need: jax and flax always, the others only
# when the model's library is imported.
ALWAYS_TREES = ("jax", "flax")
LIBRARY_TREES = {"equinox": "equinox", "dm_pix": "dm_pix"}
_PRIMITIVE = re.compile(r"No plugins registered for primitive '([^']+)'")
_SHAPE_ERRORS = ("InconclusiveDimensionOperation", "incompatible shapes", "symbolic", "shape polymorphism")


def version() -> str:
    return dist_version("jax2onnx")


@contextlib.contextmanager
def plugins_loaded() -> Iterator[None]:
    """jax2onnx's plugins for jax, flax and the imported libraries it has trees for; jax2onnx's own flag is
    restored after, so a later direct jax2onnx call in this process still loads the rest. Without the internals
    this relies on (another jax2onnx version), jax2onnx loads everything itself."""
    from jax2onnx.plugins import plugin_system as ps

    if ps.__dict__.get("_already_imported_plugins") is not False or not callable(ps.__dict__.get("_import_tree")):
        yield
        return
    root = Path(ps.__file__).parent
    trees = [*ALWAYS_TREES, *(tree for tree, lib in LIBRARY_TREES.items() if lib in sys.modules)]
    with quiet([], LOGGERS):  # its own modules' deprecation warnings are no news about the model
        for tree in trees:
            ps._import_tree(root / tree, f"jax2onnx.plugins.{tree}")
    ps._already_imported_plugins = True
    try:
        yield
    finally:
        ps._already_imported_plugins = False


def to_onnx(fn: Any, specs: Sequence[Any], *, opset: int, input_names: Sequence[str], output_names: Sequence[str],
            double: bool, model_name: str, caught: list[str], dynamic: Sequence[str] = ()) -> Any:
    """jax2onnx's ModelProto for ``fn`` traced at ``specs``; ``dynamic`` names the dynamic axes (for errors)."""
    from jax2onnx import to_onnx as convert

    try:
        with plugins_loaded(), quiet(caught, LOGGERS), warnings.catch_warnings():
            # jax2onnx's own use of deprecated Flax/JAX API says nothing about the model
            warnings.simplefilter("ignore", DeprecationWarning)
            return convert(fn, list(specs), model_name=model_name, opset=opset, enable_double_precision=double,
                           input_names=list(input_names), output_names=list(output_names))
    except OnnxBridgeError:
        raise
    except Exception as exc:  # noqa: BLE001 - any jax2onnx failure becomes one onnxbridge error
        raise error_for(exc, dynamic) from None


def error_for(exc: Exception, dynamic: Sequence[str] = ()) -> OnnxBridgeError:
    """onnxbridge's error for a jax2onnx failure: a primitive it has no plugin for is UnsupportedError naming it."""
    text = " ".join(str(exc).split())
    found = _PRIMITIVE.search(text)
    if found:
        return UnsupportedError(f"jax2onnx {version()} cannot convert the JAX primitive '{found.group(1)}'",
                                hint="express that step with jax.numpy / lax operations jax2onnx converts (host "
                                     "callbacks never export), or register a jax2onnx plugin for it")
    if isinstance(exc, NotImplementedError):
        return UnsupportedError(f"jax2onnx {version()} cannot convert the model: {text[:400]}")
    if dynamic and any(s in text or s in type(exc).__name__ for s in _SHAPE_ERRORS):
        reason = text.split(". ")[0][:300]
        return BadInputError(f"the model cannot be traced with --dynamic {', '.join(dynamic)}: "
                             f"{type(exc).__name__}: {reason}",
                             hint="leave out axes whose size the model branches on or fixes; axes that must be "
                                  "equal need one label (x:0:batch y:0:batch)")
    return ExportError(f"jax2onnx failed: {type(exc).__name__}: {text[:400]}")


def checker_problem(proto: Any) -> str | None:
    """The ONNX checker's complaint about ``proto`` (full check, in memory), or None."""
    import onnx

    if proto.ByteSize() > 2**31 - 1:
        return None  # too large to check in memory; the builder checks the written file
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError or InferenceError
        return " ".join(str(exc).split())[:200]
    return None
