"""Find the first diverging checkpoint of a hop by bisection, a few tensors alive at a time.

Checkpoints are in topological order. The search assumes "once broken, stays broken": if checkpoint i is out of
tolerance, so is every later one that depends on it. Each step asks both probes for ``per_step`` tensors that
split the unknown interval evenly (the first step also asks for the last checkpoint: if it agrees there is nothing
to find), on every sample (a divergence on any sample counts), compares them and drops them. So n checkpoints take
about 1 + log_{per_step+1}(n) steps of the candidate side, each holding only the tensors it asked for.

When the search lands on checkpoint f, f's inputs that are checkpoints are checked too: if one is out of tolerance
(the assumption did not hold: an error appeared and was hidden again), the search goes on before it. The answer
is the earliest out-of-tolerance checkpoint found whose inputs all agree (``inputs_ok``): the op that introduced
the error, not where it became visible. Tolerances per checkpoint: ``onnxbridge.localize.tolerance``.

Each trace entry carries ``over_tolerance`` (the worst sample's ``required_atol / atol``: above 1 fails). Where the
culprit is barely past its tolerance and its inputs are already close to theirs, ``method`` says the error crept
up (rounding drift, typically fp16) rather than one op introducing it. ``runs`` counts the candidate's runs per
sample: one per step, more where the byte budget split a step.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Mapping, Sequence

from onnxbridge.compare import merge
from onnxbridge.errors import BadInputError
from onnxbridge.localize.probe import Checkpoint, Probe
from onnxbridge.localize.tolerance import compare_checkpoint

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.specs import Sample
    from onnxbridge.validation import Tolerance

PER_STEP = 3  # tensors asked per step when the budget allows: log4(n) steps
DRIFT_OVER, DRIFT_NEAR = 3.0, 0.3  # "drift": the culprit under 3x its tolerance, an input at 30% of its own


def localize(reference: Probe, candidate: Probe, checkpoints: Sequence[Checkpoint], samples: "Sequence[Sample]",
             tol: "Tolerance", *, method: str, budget_bytes: int = 256 * 2**20, per_step: int = PER_STEP) -> dict:
    """The report's ``localization`` block for one hop (see ``docs/report-schema.md``).

    ``budget_bytes``: the most bytes of asked tensors (both sides, one sample) held at once; a step whose tensors
    would exceed it is split into several runs (a single tensor larger than the budget is still asked alone).
    Sizes are those seen so far, else a probe's optional ``estimate_bytes(names, feeds) -> {name: bytes}``
    (``OnnxProbe`` has one, from shape inference), else the largest seen. ``per_step``: tensors asked per step.
    """
    if not samples:
        raise BadInputError("localization needs at least one sample")
    started = time.perf_counter()
    search = _Search(reference, candidate, list(checkpoints), samples, tol, budget_bytes, max(1, per_step))
    first, reason = search.run()
    n = len(search.checkpoints)
    how = (f"{method}; bisection over {n} checkpoints in topological order, up to {search.per_step} tensors a "
           f"step on all {len(samples)} sample(s), tolerance per tensor: atol x max(1, RMS of the reference "
           f"tensor), fp16 tensors held to at least the fp16 tolerance")
    if reason:
        how += f"; {reason}"
    return {"first_divergent": first, "trace": search.trace(), "method": how, "runs": search.runs,
            "seconds": round(time.perf_counter() - started, 3), "checkpoints": n}


class _Search:
    def __init__(self, reference: Probe, candidate: Probe, checkpoints: list[Checkpoint], samples, tol,
                 budget_bytes: int, per_step: int):
        self.reference, self.candidate = reference, candidate
        self.checkpoints = checkpoints
        self.index = {cp.tensor: i for i, cp in enumerate(checkpoints)}
        self.samples, self.tol = samples, tol
        self.budget, self.per_step = budget_bytes, per_step
        self.merged: dict[int, dict] = {}  # checkpoint -> metrics merged over samples (worst of each)
        self.worst: dict[int, dict] = {}  # checkpoint -> metrics of its worst sample
        self.step_of: dict[int, int] = {}
        self.nbytes: dict[str, int] = {}  # bytes per tensor (one side, one sample), as seen or estimated
        self.runs = 0

    # -- the search ---------------------------------------------------------------------------------------
    def run(self) -> tuple[dict | None, str | None]:
        n = len(self.checkpoints)
        if n == 0:
            return None, "no checkpoints: neither side can show intermediate tensors of this graph"
        lo, hi = 0, n  # unknown: [lo, hi); hi < n: checkpoint hi is out of tolerance
        while True:
            while lo < hi:
                self.evaluate(self.points(lo, hi, include_last=hi == n))
                lo, hi = self.narrow(lo, hi)
            if hi == n:
                last = self.checkpoints[-1]
                return None, (f"no checkpoint is out of tolerance on any sample (the last, '{last.tensor}', agrees): "
                              "the divergence is where the checkpoints do not reach (ops after the last checkpoint "
                              "or tensors the sides cannot show)")
            inputs = [self.index[t] for t in self.checkpoints[hi].inputs if t in self.index and self.index[t] < hi]
            self.evaluate([i for i in inputs if i not in self.merged])
            bad = [i for i in inputs if not self.merged[i]["passed"]]
            if not bad:
                return self.answer(hi, True), self.drift(hi, inputs)
            hi = min(bad)  # an input already diverged: the error came in earlier
            good = [i for i, m in self.merged.items() if i < hi and m["passed"]]
            lo = max(good) + 1 if good else 0

    def points(self, lo: int, hi: int, *, include_last: bool) -> list[int]:
        """Up to ``per_step`` checkpoints splitting [lo, hi) evenly (all of them when it is that small)."""
        span = hi - lo
        k = self.per_step
        if span <= k + include_last:
            pts = list(range(lo, hi))
        else:
            pts = [lo + math.ceil(j * span / (k + 1)) - 1 for j in range(1, k + 1)]
            if include_last:
                pts.append(hi - 1)
        return sorted({p for p in pts if p not in self.merged})

    def narrow(self, lo: int, hi: int) -> tuple[int, int]:
        """The unknown interval after the results so far: up to the first bad, after the last good before it."""
        bad = [i for i in range(lo, hi) if i in self.merged and not self.merged[i]["passed"]]
        hi = min(bad) if bad else hi
        good = [i for i in range(lo, hi) if i in self.merged and self.merged[i]["passed"]]
        return (max(good) + 1 if good else lo), hi

    # -- running the probes -------------------------------------------------------------------------------
    def evaluate(self, indices: list[int]) -> None:
        """Compare the checkpoints ``indices`` on every sample, in as many runs as the byte budget needs."""
        for batch in self.batches(indices):
            self.runs += 1
            names = [self.checkpoints[i].tensor for i in batch]
            for s, sample in enumerate(self.samples):
                feeds = sample.feeds
                ref = self.reference.tensors(names, feeds)
                got = self.candidate.tensors(names, feeds)
                for i, name in zip(batch, names):
                    self.record(i, s, name, ref.get(name), got.get(name))
                del ref, got
            for i in batch:
                self.step_of[i] = self.runs

    def batches(self, indices: list[int]) -> list[list[int]]:
        """``indices`` in runs whose tensors (both sides) fit the budget, each at least one tensor."""
        out: list[list[int]] = []
        current: list[int] = []
        total = 0
        for i in indices:
            size = 2 * self.estimate(self.checkpoints[i].tensor)
            if current and total + size > self.budget:
                out.append(current)
                current, total = [], 0
            current.append(i)
            total += size
        if current:
            out.append(current)
        return out

    def estimate(self, name: str) -> int:
        """Bytes of one side's tensor: as seen, else the probes' estimate, else the largest seen so far."""
        if name in self.nbytes:
            return self.nbytes[name]
        for probe in (self.reference, self.candidate):
            hint = getattr(probe, "estimate_bytes", None)
            if callable(hint):
                size = hint([name], self.samples[0].feeds).get(name)
                if size is not None:
                    self.nbytes[name] = int(size)
                    return int(size)
        return max(self.nbytes.values(), default=0)

    def record(self, i: int, sample: int, name: str, ref: "np.ndarray | None", got: "np.ndarray | None") -> None:
        if ref is None or got is None:
            side = "reference" if ref is None else "candidate"
            metrics = {"shape": None, "passed": False, "error": f"the {side} did not show '{name}'"}
        else:
            metrics = compare_checkpoint(self.tol, name, ref, got)
            self.nbytes[name] = max(int(getattr(ref, "nbytes", 0)), int(getattr(got, "nbytes", 0)))
        metrics["sample"] = sample
        self.merged[i] = merge(self.merged.get(i), metrics) if i in self.merged else dict(metrics)
        if i not in self.worst or _badness(metrics) > _badness(self.worst[i]):
            self.worst[i] = metrics

    # -- the answer ---------------------------------------------------------------------------------------
    def answer(self, i: int, inputs_ok: bool) -> dict:
        cp = self.checkpoints[i]
        return {"node": cp.node, "op": cp.op, "output": cp.tensor, "source": cp.source,
                "error": self.worst[i], "inputs_ok": inputs_ok}

    def drift(self, i: int, inputs: list[int]) -> str | None:
        """Words when the error crept up to checkpoint ``i`` (its inputs already near their tolerance, ``i`` just
        past it) rather than one op introducing it: accumulated rounding, typically in fp16."""
        here = _over(self.worst[i])
        near = [r for r in (_over(self.worst[j]) for j in inputs) if r is not None]
        if here is None or here > DRIFT_OVER or not near or max(near) < DRIFT_NEAR:
            return None
        return (f"'{self.checkpoints[i].tensor}' is {here:.1f}x its tolerance while its inputs are already at "
                f"{max(near):.0%} of theirs: the error accumulates (rounding drift) and crosses the tolerance here "
                "rather than this op introducing it")

    def trace(self) -> list[dict]:
        out = []
        for i in sorted(self.merged):
            cp, m = self.checkpoints[i], self.merged[i]
            entry = {"node": cp.node, "output": cp.tensor, "max_abs": m.get("max_abs"), "max_rel": m.get("max_rel"),
                     "cosine": m.get("cosine"), "passed": bool(m["passed"]), "index": i, "step": self.step_of.get(i)}
            over = _over(self.worst[i])  # the worst sample's error over the tolerance that sample was held to
            if over is not None:
                entry["over_tolerance"] = round(over, 4)
            if "error" in m:
                entry["error"] = m["error"]
            elif m.get("reason"):
                entry["error"] = m["reason"]
            out.append(entry)
        return out


def _over(m: Mapping) -> float | None:
    """How far the finite errors are into the tolerance (``required_atol / atol``: above 1 fails); None where the
    comparison failed on shape, dtype or non-finite values."""
    if "error" in m or "required_atol" not in m or not m.get("atol"):
        return None
    ratio = m["required_atol"] / m["atol"]
    return None if not m["passed"] and ratio <= 1 else ratio


def _badness(m: Mapping) -> tuple:
    """Order samples' metrics: failed before passed, then by how far past the tolerance (an error string first)."""
    if "error" in m:
        return (1, math.inf)
    need = m.get("required_atol", 0.0) / max(m.get("atol", 0.0), 1e-30)
    return (0 if m.get("passed") else 1, need + m.get("nan_mismatch", 0) + m.get("mismatch_fraction", 0.0))
