"""Estimators saved to files: pickles (``.joblib``, ``.pkl``, ``.pickle``) only with trust, ``.skops``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxbridge.errors import TRUST_HINT, BadInputError, UnavailableError, UnsafeInputError
from onnxbridge.pathchecks import regular

PICKLES = (".joblib", ".pkl", ".pickle")
SKOPS = ".skops"
SUFFIXES = (*PICKLES, SKOPS)
ESTIMATOR_PACKAGES = ("sklearn", "lightgbm", "xgboost", "catboost", "imblearn")


def is_estimator(obj: Any) -> bool:
    """True for instances of scikit-learn estimators (and of the packages that build on them)."""
    return any(c.__module__.split(".")[0] in ESTIMATOR_PACKAGES for c in type(obj).__mro__) \
        and hasattr(obj, "get_params")


def load(path: Path, trust: bool) -> tuple[Any, str]:
    """(estimator, kind label) from ``path``; the file is only read."""
    regular(path, "the estimator file")
    suffix = path.suffix.lower()
    if suffix == SKOPS:
        obj, kind = _load_skops(path, trust), "skops file"
    else:
        if not trust:
            raise UnsafeInputError(f"'{path}' is a pickle; unpickling it can run arbitrary code", hint=TRUST_HINT)
        obj, kind = _unpickle(path), f"pickled estimator ({suffix})"
    if not is_estimator(obj):
        raise BadInputError(f"'{path}' holds a {type(obj).__module__}.{type(obj).__name__}, "
                            "not a scikit-learn estimator or pipeline")
    return obj, kind


def _unpickle(path: Path) -> Any:
    import joblib

    try:
        return joblib.load(path)  # reads joblib files and plain pickles alike
    except Exception as exc:
        raise BadInputError(f"cannot unpickle '{path}': {type(exc).__name__}: {_first_line(exc)}") from None


def _load_skops(path: Path, trust: bool) -> Any:
    try:
        import skops.io as sio
    except ImportError:
        raise UnavailableError(f"reading '{path}' needs skops, which is not installed",
                               hint="pip install skops") from None
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:
        raise BadInputError(f"cannot read '{path}' as a skops file: {_first_line(exc)}") from None
    if untrusted and not trust:
        raise UnsafeInputError(f"'{path}' holds types skops does not trust by default "
                               f"({', '.join(untrusted[:5])}{', ...' if len(untrusted) > 5 else ''})",
                               hint=TRUST_HINT)
    try:
        return sio.load(path, trusted=untrusted or None)
    except Exception as exc:
        raise BadInputError(f"cannot load '{path}': {type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""
