"""Compare one output against its reference: the metrics a person and a CI need."""
from __future__ import annotations

import math
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


def compare(ref: "np.ndarray", got: "np.ndarray", *, atol: float, rtol: float, scaled: bool = False) -> dict:
    """Metrics for one output pair; ``passed`` uses numpy.allclose semantics with NaNs compared too.

    ``scaled``: the absolute floor is at most ``rtol`` times the output's own scale (its largest finite |value|),
    so an output whose values are all far below ``atol`` is still judged, relative to itself (``atol`` in the
    result is the one applied). Floating outputs are read in chunks of ``CHUNK`` values (float64 there, so every
    per-value figure is what a float64 computation gives; sums accumulate in float64): no full-size float64 copy or
    temporary is made."""
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
    flat_r, flat_g = ref.reshape(-1), got.reshape(-1)
    scale = largest(flat_r)
    if scaled and scale > 0:
        atol = min(atol, rtol * scale)
    acc = _Accumulator(atol, rtol)
    for start in range(0, flat_r.size, CHUNK):
        acc.add(flat_r[start:start + CHUNK], flat_g[start:start + CHUNK])
    n = max(int(ref.size), 1)
    out_of_tol = acc.bad + acc.nan_mismatch + acc.inf_mismatch
    metrics = {
        "kind": "numeric",
        "max_abs": acc.max_abs,
        "mean_abs": acc.sum_abs / acc.count if acc.count else 0.0,
        "max_rel": acc.max_rel if acc.count else 0.0,
        "cosine": acc.cosine(),
        "mismatch_fraction": out_of_tol / n,
        "nan_mismatch": acc.nan_mismatch,
        "nonfinite_reference": acc.nonfinite_ref,
        "nonfinite_output": acc.nonfinite_out,
        # the smallest atol that would pass at this rtol (Polygraphy's "minimum required tolerance")
        "required_atol": acc.required_atol,
        "error_histogram": acc.histogram,
        "scale": scale,
        "rel_rms": math.sqrt(acc.sum_sq / acc.norm_r) if acc.norm_r > 0 else (0.0 if acc.sum_sq == 0 else None),
        "snr_db": 10 * math.log10(acc.norm_r / acc.sum_sq) if acc.sum_sq > 0 and acc.norm_r > 0 else None,
        "atol": atol,
        "rtol": rtol,
    }
    if ref.ndim == 2 and ref.shape[1] >= 2 and ref.shape[0]:  # [batch, classes]: small enough to widen whole
        r, g = ref.astype(np.float64), got.astype(np.float64)
        metrics["top1_agreement"] = top1_agreement(r, g)
        top5 = topk_agreement(r, g, 5)
        if top5 is not None:
            metrics["top5_agreement"] = top5
    reason = _reason_text(acc.one_sided, int(ref.size))
    if reason:
        metrics["reason"] = reason
    return {**res, **metrics, "passed": out_of_tol == 0}


CHUNK = 1 << 15  # values per chunk: a few float64 chunk temporaries stay in the CPU's cache


def largest(flat: "np.ndarray") -> float:
    """The largest finite |value| of a flat float array (0.0 for none), read in chunks."""
    import numpy as np

    top = 0.0
    for start in range(0, flat.size, CHUNK):
        chunk = np.abs(flat[start:start + CHUNK].astype(np.float64))
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            top = max(top, float(chunk.max()))
    return top


class _Accumulator:
    """Running metrics over chunks of a (reference, output) pair; every per-value figure is computed in float64."""

    def __init__(self, atol: float, rtol: float):
        self.atol, self.rtol = atol, rtol
        self.below = [0] * len(HISTOGRAM_EDGES)  # values under each edge (the histogram's cumulative counts)
        self.count = self.bad = self.nan_mismatch = self.inf_mismatch = 0
        self.nonfinite_ref = self.nonfinite_out = 0
        self.one_sided = [0] * 5  # NaN in output only, inf in output only, NaN/inf in reference only, wrong sign
        self.max_abs = self.max_rel = self.required_atol = 0.0
        self.sum_abs = self.dot = self.norm_r = self.norm_g = self.sum_sq = 0.0
        self.work: list | None = None  # the chunk buffers

    def add(self, rc: "np.ndarray", gc: "np.ndarray") -> None:
        """Take in one chunk (at most ``CHUNK`` values of each side), in float64 buffers reused from chunk to
        chunk (fresh temporaries per chunk would each be a fresh mapping of memory, page-faulted anew)."""
        import numpy as np

        if self.work is None or len(self.work[0]) < rc.size:
            self.work = [np.empty(max(rc.size, 1)) for _ in range(5)] + [np.empty(max(rc.size, 1), bool)
                                                                         for _ in range(2)]
        r, g, d, mag, tm, fin_r, fin_g = (w[:rc.size] for w in self.work)
        np.copyto(r, rc, casting="unsafe")
        np.copyto(g, gc, casting="unsafe")
        np.isfinite(r, out=fin_r)
        np.isfinite(g, out=fin_g)
        if not (fin_r.all() and fin_g.all()):
            self._nonfinite(r, g, fin_r, fin_g)
            both = fin_r & fin_g
            r, g = r[both], g[both]
            d, mag, tm, flags = d[:r.size], mag[:r.size], tm[:r.size], fin_r[:r.size]
        else:
            flags = fin_r
        if not r.size:
            return
        np.abs(np.subtract(r, g, out=d), out=d)
        np.abs(r, out=mag)
        lo, hi = float(d.min()), float(d.max())
        self.count += d.size
        self.sum_abs += float(d.sum())
        self.max_abs = max(self.max_abs, hi)
        self.max_rel = max(self.max_rel, float(np.divide(d, np.maximum(mag, 1e-12, out=tm), out=tm).max()))
        np.multiply(mag, self.rtol, out=mag)  # |r| is not needed again: rtol * |r| from here on
        self.required_atol = max(self.required_atol, float(np.subtract(d, mag, out=tm).max()), 0.0)
        self.bad += int(np.count_nonzero(np.greater(d, np.add(mag, self.atol, out=tm), out=flags)))
        # products summed by numpy (pairwise), not BLAS: its threads cost more than they give on a chunk
        self.dot += float(np.multiply(r, g, out=tm).sum())
        self.norm_r += float(np.multiply(r, r, out=tm).sum())
        self.norm_g += float(np.multiply(g, g, out=tm).sum())
        self.sum_sq += float(np.multiply(d, d, out=tm).sum())
        for i, edge in enumerate(HISTOGRAM_EDGES):  # only the edges inside [lo, hi] need a count
            self.below[i] += 0 if edge <= lo else d.size if edge > hi else \
                int(np.count_nonzero(np.less(d, edge, out=flags)))

    def _nonfinite(self, r: "np.ndarray", g: "np.ndarray", fin_r: "np.ndarray", fin_g: "np.ndarray") -> None:
        import numpy as np

        nan_r, nan_g, inf_r, inf_g = np.isnan(r), np.isnan(g), np.isinf(r), np.isinf(g)
        wrong_sign = inf_r & inf_g & (np.sign(r) != np.sign(g))
        self.nan_mismatch += int(np.count_nonzero(nan_r != nan_g))
        self.inf_mismatch += int(np.count_nonzero((inf_r != inf_g) | wrong_sign))
        self.nonfinite_ref += int(r.size - np.count_nonzero(fin_r))
        self.nonfinite_out += int(g.size - np.count_nonzero(fin_g))
        for i, mask in enumerate((nan_g & ~nan_r, inf_g & fin_r, nan_r & ~nan_g, inf_r & fin_g, wrong_sign)):
            self.one_sided[i] += int(np.count_nonzero(mask))

    def cosine(self) -> float:
        import math

        denom = math.sqrt(self.norm_r) * math.sqrt(self.norm_g)
        return self.dot / denom if denom > 0 else (1.0 if self.max_abs == 0 else 0.0)

    @property
    def histogram(self) -> list[int]:
        cumulative = [*self.below, self.count]
        return [b - a for a, b in zip(cumulative, cumulative[1:])]


def _kind(a: "np.ndarray") -> str:
    """Numbers compare across widths (int64 labels vs int32, fp16 vs fp32); a float against a non-float, or text
    against numbers, does not."""
    return {"f": "float", "c": "float", "U": "text", "S": "text", "O": "text"}.get(a.dtype.kind, "integer")


def nonfinite_reason(r: "np.ndarray", g: "np.ndarray") -> str | None:
    """Words for NaN/inf values on one side only (the metrics above cover finite values alone)."""
    import numpy as np

    r, g = np.asarray(r), np.asarray(g)
    acc = _Accumulator(0.0, 0.0)
    acc._nonfinite(r, g, np.isfinite(r), np.isfinite(g))
    return _reason_text(acc.one_sided, r.size)


def _reason_text(counts: list[int], n: int) -> str | None:
    """``nonfinite_reason``'s words from its counts: NaN and inf in the output only, in the reference only, and
    infinities of opposite signs."""
    nan_g, inf_g, nan_r, inf_r, wrong_sign = counts
    parts = []
    if nan_g:
        parts.append(f"NaN in {nan_g} of {n} values where the reference has numbers")
    if inf_g:
        parts.append(f"inf in {inf_g} of {n} values where the reference is finite")
    if nan_r:
        parts.append(f"the reference has NaN in {nan_r} values where this output has numbers")
    if inf_r:
        parts.append(f"the reference has inf in {inf_r} values where this output is finite")
    if wrong_sign:
        parts.append(f"{wrong_sign} infinities of the opposite sign")
    return "; ".join(parts) or None


def merge(worst: dict | None, new: dict) -> dict:
    """Keep the worst value of each metric across samples."""
    if worst is None:
        return dict(new)
    out = dict(worst)
    for key in ("max_abs", "mean_abs", "max_rel", "mismatch_fraction", "required_atol", "nan_mismatch",
                "nonfinite_reference", "nonfinite_output", "scale"):
        if key in new:
            out[key] = max(out.get(key, 0), new[key])
    for key in ("cosine", "top1_agreement", "top5_agreement"):
        if key in new:
            out[key] = min(out.get(key, 1.0), new[key])
    for key, worse in (("rel_rms", max), ("snr_db", min)):  # None: not measurable (no error, or no signal)
        if new.get(key) is not None:
            out[key] = new[key] if out.get(key) is None else worse(out[key], new[key])
    if not new["passed"] and worst.get("passed", True):  # the budget and check of the first failing sample
        for key in ("budget", "failed_check", "atol", "rtol"):
            if key in new:
                out[key] = new[key]
    if "error_histogram" in new:
        old = out.get("error_histogram") or [0] * len(new["error_histogram"])
        out["error_histogram"] = [a + b for a, b in zip(old, new["error_histogram"])]
    for key in ("error", "reason"):
        if key in new:
            out.setdefault(key, new[key])
    out["passed"] = bool(worst.get("passed", True) and new["passed"])
    out["shape"] = new["shape"]
    return out
