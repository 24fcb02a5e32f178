"""What the host evaluator cannot run: an artifact it cannot evaluate is not judged here (its hop is skipped), unlike
an error the program itself makes."""
from __future__ import annotations

from onnxbridge.errors import UnsupportedError


class EvaluatorGap(UnsupportedError):
    """The host evaluator has no kernel (or no mode of one) for an op the package holds; Core ML may well run it."""
