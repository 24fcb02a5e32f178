"""What to do about a blocker: ``hint(blocker)`` matches a backend's refusal against the families below and returns
the way out users of the field take (or None when there is no general advice). Used by ``check --targets``."""
from __future__ import annotations

import re

# (pattern over the blocker's text, hint); the first match wins, so the specific families come first
HINTS: tuple[tuple[str, str], ...] = (
    (r"needs --target (\w+)", r"build with --target \1 (or newer)"),
    (r"is not static|dynamic dims?|flexible (size|dim)|has no fixed size",
     "fix the dims with --input-shape NAME:D1,D2,... (a DLC needs static shapes)"),
    (r"must be a constant|computed from run-time data|depends on run-time data",
     "the backend needs this value at build time: export the model with it fixed (an initializer, not a graph "
     "input or a value computed from inputs), or give the input a fixed shape with --input-shape so it folds"),
    (r"rank (\d+); Core ML allows rank <= 5|rank-?[6-9]",
     "Core ML tensors have rank <= 5: reshape in the source so no intermediate tensor has more dims"),
    (r"is a scalar \(rank 0\)", "give the input rank 1 (shape [1]) in the source"),
    (r"\b(DOUBLE|FLOAT64|fp64|float64)\b", "cast the model to float32 in the source (e.g. model.float() in PyTorch)"),
    (r"is UINT(32|64)", "Core ML inputs are float or int32: give the model int32 (or float) inputs in the source"),
    (r"has no Core ML equivalent|is not lowered|only .* are lowered",
     "this form of the op has no equivalent on this backend: use the form the message names, or the op's default "
     "attributes, in the source"),
    (r"\b(STRING|string)\b", "strings have no tensor form on this backend: keep that preprocessing outside the model"),
    (r"opset", "move the model to an opset the backend takes with --opset N (the adapters are exact)"),
    (r"no Core ML lowering|has no QNN op|took no node|cannot take it|custom op",
     "no equivalent on this backend: replace the op in the source (a different layer or formulation), or run "
     "that part outside the model"),
    (r"partition|fell out to the CPU|not the whole model", "part of the graph would run on the CPU: the nodes named are the ones to "
                                      "replace in the source for one QNN graph"),
)


def hint(blocker: str) -> str | None:
    """The advice for ``blocker`` (a backend's one-line refusal), or None (also when it names the fix itself)."""
    if "(give --" in blocker:
        return None
    for pattern, advice in HINTS:
        found = re.search(pattern, blocker)
        if found:
            return found.expand(advice)
    return None
