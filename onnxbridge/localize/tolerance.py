"""Per-checkpoint tolerances: the hop's (atol, rtol), scaled to each intermediate tensor's magnitude.

A hop's tolerance is set for its outputs, whose values are of order one. Intermediates are not: a pre-activation
with values in the thousands carries fp32 rounding errors of ~1e-4 on its *small* elements too (they are sums of
large terms that cancel), which ``rtol`` of the element cannot cover. So at a checkpoint

    atol_t = atol * max(1, RMS of the reference tensor's finite values),  rtol_t = rtol

(RMS, not max-abs, so one outlier does not loosen the whole tensor). Where either side's tensor is stored in fp16
or bfloat16, the pair is held to at least the fp16 tolerance: that is the precision the tensor had. A hop's
per-output overrides (``--atol logits:1e-3``) apply to checkpoints that are those outputs. Non-numeric and integer
tensors compare exactly (``compare``); a shape or dtype-kind mismatch is a divergence.

A hop judged by the fp16-emulation rule (``onnxbridge.validation``: the candidate computes in fp16) has its
checkpoints judged the same way: where the search also has the fp16 emulation's tensor (``emulated``), a checkpoint
passes when its max abs and relative RMS error are within the hop's ``factor`` times the emulation's at that tensor
(at least ``FP16_FLOOR`` of its scale) and NaN/inf agree, whatever the elementwise figures say. The emulation carries
the rounding error fp16 accumulates up to that tensor, so an error that only grew with it passes, and the first
checkpoint out of budget is where the candidate's error jumps past what fp16 arithmetic explains.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from onnxbridge.compare import TOLERANCES, compare

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.validation import Tolerance

LOW_PRECISION = ("float16", "bfloat16")


def scale_of(ref: "np.ndarray") -> float:
    """RMS of the finite values of a float tensor (1.0 for others and for empty tensors)."""
    import numpy as np

    a = np.asarray(ref)
    if a.dtype.kind not in "fc" and str(a.dtype) != "bfloat16":
        return 1.0
    a = a.astype(np.float64)
    a = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(a * a))) if a.size else 1.0


def checkpoint_tolerance(tol: "Tolerance", name: str, ref: "np.ndarray", got: "np.ndarray") -> tuple[float, float]:
    """(atol, rtol) for the checkpoint ``name`` with reference value ``ref`` and candidate value ``got``."""
    atol, rtol = tol.for_output(name)
    if str(getattr(ref, "dtype", "")) in LOW_PRECISION or str(getattr(got, "dtype", "")) in LOW_PRECISION:
        low_a, low_r = TOLERANCES["fp16"]
        atol, rtol = max(atol, low_a), max(rtol, low_r)
    return atol * max(1.0, scale_of(ref)), rtol


def compare_checkpoint(tol: "Tolerance", name: str, ref: "np.ndarray", got: "np.ndarray",
                       emulated: "np.ndarray | None" = None) -> dict:
    """``compare()``'s metrics for one checkpoint on one sample, with the tolerance it was held to; ``emulated``:
    the fp16 emulation's tensor on the same sample, for a hop judged by the fp16-emulation rule (``budget`` and
    ``over_budget`` then say what the checkpoint was held to; a reference with no finite non-zero value keeps the
    elementwise verdict)."""
    import numpy as np

    ref, got = np.asarray(ref), np.asarray(got)
    atol, rtol = checkpoint_tolerance(tol, name, ref, got)
    metrics = compare(ref, got, atol=atol, rtol=rtol)
    metrics.pop("error_histogram", None)
    metrics.update(atol=atol, rtol=rtol)
    if emulated is not None and tol.rule == "fp16-emulation" and metrics.get("kind") == "numeric" \
            and metrics["scale"] > 0:
        e = compare(ref, np.asarray(emulated), atol=atol, rtol=rtol)
        if e.get("kind") == "numeric":
            within_emulation(metrics, e, tol.factor)
    return metrics


def within_emulation(m: dict, e: dict, factor: float) -> dict:
    """The fp16-emulation rule on one checkpoint's metrics ``m`` (``e``: the emulation's against the same
    reference): max abs and relative RMS within ``factor`` times the emulation's, NaN/inf where the reference has
    them. Sets ``passed``, ``budget`` and ``over_budget`` (the larger ratio of error to budget: above 1 fails)."""
    from onnxbridge.validation import FP16_FLOOR

    b_max = factor * max(e["max_abs"], FP16_FLOOR * m["scale"])
    b_rel = factor * max(e["rel_rms"] or 0.0, FP16_FLOOR)
    over = max(m["max_abs"] / b_max, (m["rel_rms"] or 0.0) / b_rel)
    m["budget"] = {"rule": "fp16-emulation", "factor": factor, "max_abs": b_max, "rel_rms": b_rel,
                   "emulation": {"max_abs": e["max_abs"], "rel_rms": e["rel_rms"]}}
    m["over_budget"] = over
    m["passed"] = not (m.get("reason") or m.get("nan_mismatch")) and over <= 1.0
    return m
