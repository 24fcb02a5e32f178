"""Compare one output against its reference: the metrics a person and a CI need."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# (atol, rtol) per precision; a pass needs |got - ref| <= atol + rtol * |ref| everywhere.
TOLERANCES = {"fp32": (1e-4, 1e-3), "fp16": (1e-2, 1e-2), "int8": (5e-2, 5e-2)}
# |got - ref| histogram bins: [0, 1e-9), [1e-9, 1e-8), ..., [1, 10), [10, inf)
HISTOGRAM_EDGES = [0.0] + [10.0 ** e for e in range(-9, 2)]


def error_histogram(diff: "np.ndarray") -> list[int]:
    """Counts of absolute errors per decade (``HISTOGRAM_EDGES``; the last bin is open)."""
    import numpy as np

    counts = np.histogram(diff, bins=[*HISTOGRAM_EDGES, np.inf])[0] if diff.size else \
        np.zeros(len(HISTOGRAM_EDGES), int)
    return [int(c) for c in counts]


def top1_agreement(ref: "np.ndarray", got: "np.ndarray") -> float | None:
    """Fraction of rows whose arg-max agrees, for classifier-like outputs ([batch, classes], classes >= 2)."""
    import numpy as np

    if ref.ndim != 2 or ref.shape[1] < 2 or ref.shape[0] == 0:
        return None
    return float((np.argmax(ref, axis=1) == np.argmax(got, axis=1)).mean())


def topk_agreement(ref: "np.ndarray", got: "np.ndarray", k: int = 5) -> float | None:
    """Mean overlap of the top-``k`` classes per row (1.0: the same k classes), for ``[batch, classes]`` outputs
    with more than ``k`` classes."""
    import numpy as np

    if ref.ndim != 2 or ref.shape[1] <= k or ref.shape[0] == 0:
        return None
    top_r = np.argpartition(-ref, k - 1, axis=1)[:, :k]
    top_g = np.argpartition(-got, k - 1, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top_r.tolist(), top_g.tolist())]))


def compare(ref: "np.ndarray", got: "np.ndarray", *, atol: float, rtol: float) -> dict:
    """Metrics for one output pair; ``passed`` uses numpy.allclose semantics with NaNs compared too."""
    import numpy as np

    ref, got = np.asarray(ref), np.asarray(got)
    res: dict = {"shape": list(got.shape), "reference_shape": list(ref.shape), "dtype": str(got.dtype),
                 "reference_dtype": str(ref.dtype)}
    if _kind(ref) != _kind(got):
        return {**res, "passed": False, "error": f"dtype {got.dtype} where the reference is {ref.dtype}"}
    if ref.shape != got.shape:
        return {**res, "passed": False, "error": f"shape {list(got.shape)} where the reference is {list(ref.shape)}"}
    exact = not (np.issubdtype(ref.dtype, np.floating) or np.issubdtype(got.dtype, np.floating)
                 or np.issubdtype(ref.dtype, np.complexfloating))
    if exact:
        equal = ref == got
        frac = float(1.0 - equal.mean()) if equal.size else 0.0
        return {**res, "kind": "exact", "mismatch_fraction": frac,
                "passed": bool(equal.all())}
    r, g = ref.astype(np.float64), got.astype(np.float64)
    nan_r, nan_g = np.isnan(r), np.isnan(g)
    inf_mismatch = (np.isinf(r) != np.isinf(g)) | (np.isinf(r) & np.isinf(g) & (np.sign(r) != np.sign(g)))
    nan_mismatch = int((nan_r != nan_g).sum())
    both = ~(nan_r | nan_g | np.isinf(r) | np.isinf(g))
    diff = np.abs(r - g)[both]
    mag = np.abs(r)[both]
    bad = (diff > atol + rtol * mag)
    n = max(int(r.size), 1)
    out_of_tol = int(bad.sum()) + nan_mismatch + int(inf_mismatch.sum())
    rf, gf = r[both].ravel(), g[both].ravel()
    denom = float(np.linalg.norm(rf) * np.linalg.norm(gf))
    cosine = float(rf @ gf / denom) if denom > 0 else (1.0 if np.array_equal(rf, gf) else 0.0)
    metrics = {
        "kind": "numeric",
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "max_rel": float((diff / np.maximum(mag, 1e-12)).max()) if diff.size else 0.0,
        "cosine": cosine,
        "mismatch_fraction": out_of_tol / n,
        "nan_mismatch": nan_mismatch,
        "nonfinite_reference": int((~np.isfinite(r)).sum()),
        "nonfinite_output": int((~np.isfinite(g)).sum()),
        # the smallest atol that would pass at this rtol (Polygraphy's "minimum required tolerance")
        "required_atol": float(np.maximum(diff - rtol * mag, 0).max()) if diff.size else 0.0,
        "error_histogram": error_histogram(diff),
    }
    top1 = top1_agreement(r, g)
    if top1 is not None:
        metrics["top1_agreement"] = top1
    top5 = topk_agreement(r, g, 5)
    if top5 is not None:
        metrics["top5_agreement"] = top5
    reason = nonfinite_reason(r, g)
    if reason:
        metrics["reason"] = reason
    return {**res, **metrics, "passed": out_of_tol == 0}


def _kind(a: "np.ndarray") -> str:
    """Numbers compare across widths (int64 labels vs int32, fp16 vs fp32); a float against a non-float, or text
    against numbers, does not."""
    return {"f": "float", "c": "float", "U": "text", "S": "text", "O": "text"}.get(a.dtype.kind, "integer")


def nonfinite_reason(r: "np.ndarray", g: "np.ndarray") -> str | None:
    """Words for NaN/inf values on one side only (the metrics above cover finite values alone)."""
    import numpy as np

    parts = []
    nan_g, nan_r = np.isnan(g) & ~np.isnan(r), np.isnan(r) & ~np.isnan(g)
    inf_g = np.isinf(g) & np.isfinite(r)
    inf_r = np.isinf(r) & np.isfinite(g)
    wrong_sign = np.isinf(g) & np.isinf(r) & (np.sign(g) != np.sign(r))
    n = r.size
    if nan_g.any():
        parts.append(f"NaN in {int(nan_g.sum())} of {n} values where the reference has numbers")
    if inf_g.any():
        parts.append(f"inf in {int(inf_g.sum())} of {n} values where the reference is finite")
    if nan_r.any():
        parts.append(f"the reference has NaN in {int(nan_r.sum())} values where this output has numbers")
    if inf_r.any():
        parts.append(f"the reference has inf in {int(inf_r.sum())} values where this output is finite")
    if wrong_sign.any():
        parts.append(f"{int(wrong_sign.sum())} infinities of the opposite sign")
    return "; ".join(parts) or None


def merge(worst: dict | None, new: dict) -> dict:
    """Keep the worst value of each metric across samples."""
    if worst is None:
        return dict(new)
    out = dict(worst)
    for key in ("max_abs", "mean_abs", "max_rel", "mismatch_fraction", "required_atol", "nan_mismatch",
                "nonfinite_reference", "nonfinite_output"):
        if key in new:
            out[key] = max(out.get(key, 0), new[key])
    for key in ("cosine", "top1_agreement", "top5_agreement"):
        if key in new:
            out[key] = min(out.get(key, 1.0), new[key])
    if "error_histogram" in new:
        old = out.get("error_histogram") or [0] * len(new["error_histogram"])
        out["error_histogram"] = [a + b for a, b in zip(old, new["error_histogram"])]
    for key in ("error", "reason"):
        if key in new:
            out.setdefault(key, new[key])
    out["passed"] = bool(worst.get("passed", True) and new["passed"])
    out["shape"] = new["shape"]
    return out
