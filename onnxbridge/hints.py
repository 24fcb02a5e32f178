"""What to do about a blocker: ``hint(blocker, backend)`` matches a backend's refusal against the families below and
those the backends declare (``Plugin.hints``), and returns the way out users of the field take (or None when there
is no general advice). Used by ``check --targets``."""
from __future__ import annotations

import re

# what to say where an op has no equivalent on a backend: the backends' families for their own wording use it too
REPLACE_OP = ("no equivalent on this backend: replace the op in the source (a different layer or formulation), or run "
              "that part outside the model")

# (pattern over the blocker's text, advice); the first match wins: FIRST (what a blocker says whatever else it
# says), then the backends' own families (``Plugin.hints``), then the GENERAL ones
FIRST: tuple[tuple[str, str], ...] = (
    (r"needs --target (\w+)", r"build with --target \1 (or newer)"),
    (r"is not static|dynamic dims?|flexible (size|dim)|has no fixed size",
     "fix the dims with --input-shape NAME:D1,D2,... (the backend needs static shapes there)"),
    (r"must be a constant|computed from run-time data|depends on run-time data",
     "the backend needs this value at build time: export the model with it fixed (an initializer, not a graph "
     "input or a value computed from inputs), or give the input a fixed shape with --input-shape so it folds"),
)
GENERAL: tuple[tuple[str, str], ...] = (
    (r"is a scalar \(rank 0\)", "give the input rank 1 (shape [1]) in the source"),
    (r"\b(DOUBLE|FLOAT64|fp64|float64)\b", "cast the model to float32 in the source (e.g. model.float() in PyTorch)"),
    (r"\b(STRING|string)\b", "strings have no tensor form on this backend: keep that preprocessing outside the model"),
    (r"opset", "move the model to an opset the backend takes with --opset N (the adapters are exact)"),
    (r"custom op", REPLACE_OP),
)


def families(backend: str | None = None) -> tuple[tuple[str, str], ...]:
    """The (pattern, advice) families in the order they are tried, with those of ``backend`` (None: of every
    backend)."""
    from onnxbridge.plugins import BACKENDS

    names = BACKENDS.names() if backend is None else [backend]
    declared = tuple(f for name in names for f in BACKENDS.plugin(name).hints)
    return FIRST + declared + GENERAL


def hint(blocker: str, backend: str | None = None) -> str | None:
    """The advice for ``blocker`` (a refusal of ``backend``'s check; None: of any backend), or None (also when it
    names the fix itself)."""
    if "(give --" in blocker:
        return None
    for pattern, advice in families(backend):
        found = re.search(pattern, blocker)
        if found:
            return found.expand(advice)
    return None
