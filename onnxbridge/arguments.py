"""The Python API's arguments, checked in one place before anything runs.

``check`` refuses a wrong type or value with BadInputError naming the argument and what it got (never a TypeError
from deep inside a run); ``checked`` makes a public function (``onnxbridge.convert``, ...) run ``check`` on its
arguments first; ``check_paths`` refuses outputs that would overwrite each other, an input, or one of an input's
files.
"""
from __future__ import annotations

import functools
import inspect
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from onnxbridge.errors import BadInputError
from onnxbridge.pathchecks import regular
from onnxbridge.specs import DynamicAxis

PRECISIONS = ("fp32", "fp16", "int8")
RENDERERS = ("junit", "markdown", "html")


def _path(value: Any) -> str | None:
    if not isinstance(value, (str, os.PathLike)):
        return "must be a path (str or os.PathLike)"
    text = os.fspath(value)
    if not isinstance(text, str) or not text or "\0" in text:
        return "must be a non-empty path without NUL bytes"
    return None


def _of(kind: type, what: str) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        ok = isinstance(value, bool) if kind is bool else isinstance(value, kind)
        return None if ok else f"must be {what}"
    return rule


def list_of(kinds: type | tuple, what: str) -> Callable[[Any], str | None]:
    def rule(value: Any) -> str | None:
        ok = isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, kinds) for v in value)
        return None if ok else f"must be a list of {what}"
    return rule


def inputs(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return "must be a path (.npz or a folder of .npy) or a name -> array mapping" if _path(value) else None
    bad = [k for k, v in value.items() if not isinstance(k, str) or not hasattr(v, "__array__")]
    return f"holds {bad[0]!r}: {type(value[bad[0]]).__name__}, not an array" if bad else None


def _model(value: Any) -> str | None:
    if type(value).__name__ != "ModelProto":
        return "must be a path or an onnx.ModelProto" if _path(value) else None
    return None if value.graph.node or value.graph.output else "is an empty ModelProto (no graph)"


def _sample(value: Any) -> str | None:
    """Sample inputs are the frontend's to judge (tensors, arrays, a framework's input specs); a bare number or
    string is none of them."""
    ok = not isinstance(value, (numbers.Number, str, bytes))
    return None if ok else "must be an array, a tuple or list of inputs, or a name -> array mapping"


def _axes(value: Any) -> bool:
    """``{axis: label}`` or a list of axes: one input's entry in a ``dynamic`` mapping."""
    def axis(a: Any) -> bool:
        return isinstance(a, numbers.Integral) and not isinstance(a, bool)

    if isinstance(value, Mapping):
        return all(axis(a) and (label is None or isinstance(label, str)) for a, label in value.items())
    return isinstance(value, (list, tuple)) and all(axis(a) for a in value)


def dynamic(value: Any) -> str | None:
    if isinstance(value, Mapping):
        ok = all(isinstance(k, str) and _axes(v) for k, v in value.items())
    else:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, (str, DynamicAxis)) for v in value)
    return None if ok else "must be a list of 'NAME:AXIS[:LABEL]' str or a name -> {axis: label} mapping"


def tolerance(value: Any) -> str | None:
    """The type of ``atol``/``rtol`` (``validation.Tolerance`` checks each number's value)."""
    def leaf(v: Any) -> bool:
        return isinstance(v, (str, numbers.Real)) and not isinstance(v, bool)

    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else [value]
    return None if all(leaf(v) for v in items) else \
        "must be a number, an '[OUTPUT:]NUMBER' str, a list of those or an output -> number mapping"


def renderers(value: Any) -> str | None:
    ok = isinstance(value, Mapping) and all(k in RENDERERS and not _path(p) for k, p in value.items())
    return None if ok else f"must map {', '.join(RENDERERS)} to paths"


RULES: dict[str, Callable[[Any], str | None]] = {  # arguments that are no option (``onnxbridge.request``)
    "raise_on_failure": _of(bool, "True or False"), "allow_skipped": _of(bool, "True or False"),
    "converted": _model, "model": _model, "sample_inputs": _sample,
    "targets": list_of(str, "backend names (str)"),
}


def rule(name: str) -> Callable[[Any], str | None] | None:
    """The check of the argument called ``name``: its option's (the core's, else a plugin's), else ``RULES``'s."""
    from onnxbridge import request

    option = request.declared(name)
    if option is not None:
        return option.problem
    from onnxbridge.plugins import BACKENDS, FRONTENDS

    declared = [o for registry in (FRONTENDS, BACKENDS) for o in registry.options().get(name, {}).values()]
    if declared:  # plugins may declare one name differently: a value one of them takes passes here (the spine
        # then refuses it for the plugins that do not take it, naming them)
        return lambda value: None if any(o.problem(value) is None for o in declared) else declared[0].problem(value)
    return RULES.get(name)


# the public functions' rules that differ from RULES for an argument of the same name
OVERRIDES: dict[str, dict[str, Callable[[Any], str | None]]] = {
    "check_targets": {"model": _path},  # read from disk by each backend's check
    "inspect_model": {"model": lambda v: None if isinstance(v, (bytes, bytearray)) or type(v).__name__ ==
                      "ModelProto" or not _path(v) else "must be a path, an onnx.ModelProto or its bytes"},
}


def check(given: Mapping[str, Any], required: Sequence[str] = (),
          rules: Mapping[str, Callable[[Any], str | None]] | None = None) -> None:
    """Refuse the first argument of ``given`` (a call's arguments by name, e.g. ``locals()``) whose type or value is
    wrong; None passes except for the names in ``required``, and a name without a rule passes. ``rules``: this
    call's rules where they differ from ``RULES``."""
    for name, value in given.items():
        check_of = (rules or {}).get(name) or rule(name)
        problem = "must be given" if value is None and name in required else \
            check_of(value) if check_of is not None and value is not None else None
        if problem:
            text, kind = repr(value), type(value).__name__
            plain = 0 < len(text) <= 60 and "\n" not in text and not hasattr(value, "SerializeToString")
            shown = f"{text} ({kind})" if plain else f"<{kind}>"  # a proto's repr is its content (onnx >= 1.19)
            raise BadInputError(f"argument {name.rstrip('_')}={shown} {problem}")


def checked(fn: Callable, name: str | None = None) -> Callable:
    """``fn``, public as ``name`` (default: its own name), with its arguments checked first: a call Python itself
    refuses (a missing or unknown argument) and a wrong type or value are BadInputError; parameters without a
    default must not be None."""
    name = name or fn.__name__
    signature = inspect.signature(fn)
    required = [p.name for p in signature.parameters.values() if p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    var_keyword = [p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            given = signature.bind(*args, **kwargs).arguments
        except TypeError as exc:
            raise BadInputError(f"{name}: {exc}") from None
        extra = given.pop(var_keyword[0], {}) if var_keyword else {}
        check({**given, **extra}, required, OVERRIDES.get(name))
        try:
            return fn(*args, **kwargs)
        except SystemExit as exc:  # the model's code (a forward, an export hook): never the caller's exit
            from onnxbridge.sources import exit_call

            raise BadInputError(f"{name}: the model's code (or a library it calls) called {exit_call(exc)}") from None

    return call


def check_paths(reads: Mapping[str, Any], writes: Mapping[str, Any]) -> None:
    """Refuse, before anything runs, one of ``reads`` that is neither a regular file nor a folder (a device, FIFO or
    socket, or a link to one or to nothing: reading it would hang or never end), two of ``writes`` naming one file, or
    one naming an input of ``reads`` or one of its files: anything inside an input folder, an ONNX model's external
    data. Keys say what each path is (a flag or "the source model"); values that are not paths (a live model, None)
    and reads that name nothing on disk (a ``module:function`` factory) are skipped."""
    for what, src in reads.items():
        if isinstance(src, (str, os.PathLike)) and os.path.lexists(src):
            regular(src, what, folder=True)
    outputs = {label: Path(p) for label, p in writes.items() if isinstance(p, (str, os.PathLike))}
    seen: dict[str, str] = {}
    for label, path in outputs.items():
        real = os.path.realpath(path)
        if real in seen:
            raise BadInputError(f"{seen[real]} and {label} both name '{path}'; give each its own path")
        seen[real] = label
    for what, src in reads.items():
        if isinstance(src, (str, os.PathLike)) and os.path.exists(src):
            data = _external_data(Path(src), outputs.values())
            for label, path in outputs.items():
                clash = _clash(Path(src), what, path, data)
                if clash:
                    raise BadInputError(f"{label} '{path}' {clash}; choose another path")


def _clash(src: Path, what: str, out: Path, data: dict[Path, str]) -> str | None:
    """How writing ``out`` would harm the input ``src`` (called ``what``; ``data``: its external data), or None."""
    real_src, real_out = Path(os.path.realpath(src)), Path(os.path.realpath(out))
    if real_out == real_src:
        return f"would overwrite {what} '{src}'"
    if real_src in real_out.parents:
        return f"lies inside {what} '{src}'"
    if real_out in real_src.parents:
        return f"would replace the folder holding {what} '{src}'"
    if real_out in data:
        return f"would overwrite '{data[real_out]}', the external data of {what} '{src}'"
    return None


def _external_data(src: Path, outputs) -> dict[Path, str]:
    """An ONNX input's external data files (real path -> location), read only when an output lies in its folder
    (where they must be)."""
    folder = Path(os.path.realpath(src.parent))
    if src.suffix.lower() != ".onnx" or not src.is_file() or \
            not any(folder in Path(os.path.realpath(p)).parents for p in outputs):
        return {}
    from onnxbridge.external_data import external_files
    from onnxbridge.onnxio import load_onnx

    return {Path(os.path.realpath(src.parent / loc)): loc for loc in external_files(load_onnx(src))}
