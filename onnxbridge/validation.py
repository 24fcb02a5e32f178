"""Hop validation: run a reference and a candidate on the same samples and compare every output."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from onnxbridge.compare import TOLERANCES, compare, merge
from onnxbridge.errors import BadInputError, NativeCrash, TooLargeError
from onnxbridge.specs import Sample

Runner = Callable[[Mapping[str, Any]], list]  # named inputs -> outputs in order


@dataclass(frozen=True)
class Tolerance:
    """Default (atol, rtol) for a precision, with per-output overrides (``--atol logits:1e-3``)."""

    atol: float
    rtol: float
    precision: str = "fp32"
    per_output: tuple[tuple[str, float | None, float | None], ...] = ()
    reason: str | None = None  # why this hop's default differs from the precision's (the backend computes lower)

    @classmethod
    def for_precision(cls, precision: str = "fp32", atol: Any = None, rtol: Any = None) -> "Tolerance":
        """``atol``/``rtol``: a number, ``"NAME:X"`` strings (one output) or plain ``"X"``, a list of those, or a
        name -> number mapping."""
        if precision not in TOLERANCES:
            raise BadInputError(f"unknown precision '{precision}'; known: {', '.join(TOLERANCES)}")
        a, r = TOLERANCES[precision]
        a_default, a_named = _split("--atol", atol)
        r_default, r_named = _split("--rtol", rtol)
        names = list(dict.fromkeys([*a_named, *r_named]))
        per = tuple((n, a_named.get(n), r_named.get(n)) for n in names)
        return cls(a if a_default is None else a_default, r if r_default is None else r_default, precision, per)

    def for_output(self, name: str) -> tuple[float, float]:
        for n, a, r in self.per_output:
            if n == name:
                return (self.atol if a is None else a, self.rtol if r is None else r)
        return self.atol, self.rtol

    def as_dict(self) -> dict:
        out: dict = {"precision": self.precision, "atol": self.atol, "rtol": self.rtol}
        if self.reason:
            out["reason"] = self.reason
        if self.per_output:
            out["per_output"] = {n: {k: v for k, v in (("atol", a), ("rtol", r)) if v is not None}
                                 for n, a, r in self.per_output}
        return out


def _split(flag: str, value: Any) -> tuple[float | None, dict[str, float]]:
    """(default, {output: value}) from a number, "X", "NAME:X", a list of those, or a mapping."""
    if value is None:
        return None, {}
    if isinstance(value, Mapping):
        return None, {str(k): _number(flag, v) for k, v in value.items()}
    items = [value] if isinstance(value, (int, float, str)) else list(value)
    default, named = None, {}
    for item in items:
        if isinstance(item, str) and ":" in item:
            name, _, num = item.rpartition(":")
            named[name] = _number(flag, num)
        else:
            default = _number(flag, item)
    return default, named


def _number(flag: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{flag} '{value}' is not a number or OUTPUT:NUMBER") from None
    if not number >= 0:
        raise BadInputError(f"{flag} '{value}' must be a non-negative number")
    return number


_UNTIMED = object()


def timed(run: Runner, feeds: Mapping[str, Any]) -> tuple[list, float | None]:
    """Outputs and the seconds the run took: what the runner measured itself (``last_seconds``: the time inside a
    worker process, or None for an answer it did not compute), else the wall time of the call."""
    t = time.perf_counter()
    out = run(feeds)
    wall = time.perf_counter() - t
    own = getattr(run, "last_seconds", _UNTIMED)
    return out, (wall if own is _UNTIMED else own)


def median_latency(run: Runner, feeds: Mapping[str, Any], runs: int) -> float | None:
    """Median seconds of ``runs`` fresh runs after one warm-up (a runner's ``fresh`` form is used when it has one,
    on a copy of the feeds, so no cached answer is timed)."""
    import statistics

    import numpy as np

    fresh = getattr(run, "fresh", run)
    feeds = {k: np.array(v, copy=True) for k, v in feeds.items()}
    fresh(feeds)
    times = [s for s in (timed(fresh, feeds)[1] for _ in range(runs)) if s is not None]
    return statistics.median(times) if times else None


class SourceOutputs:
    """The source framework's outputs, computed once per sample and shared by every hop (a sample it cannot
    run raises the same error each time it is asked). ``last_seconds`` is the time of the last call when it
    computed (or of the ``prefetch`` that computed it, on the first call that asks), None when it answered from
    its cache; ``fresh`` always computes."""

    def __init__(self, run: Runner, what_ran: str | None = None):
        self.run = run
        self.fresh = run
        self.what_ran = what_ran
        self.last_seconds: float | None = None
        self._cache: dict[int, Any] = {}
        self._untold: dict[int, float] = {}  # prefetched: seconds not yet reported by a call

    def prefetch(self, samples: Sequence[Sample]) -> None:
        """Compute the outputs on every sample now (so the source model can be let go before the candidate's
        runtime loads); an error is kept for the call that asks."""
        for sample in samples:
            key = id(sample.feeds)
            if key not in self._cache:
                self._compute(sample.feeds)
                self._untold[key] = self.last_seconds

    def _compute(self, feeds: Mapping[str, Any]) -> None:
        t = time.perf_counter()
        try:
            self._cache[id(feeds)] = (self.run(feeds), None)
        except Exception as exc:  # noqa: BLE001 - re-raised for every hop that asks
            self._cache[id(feeds)] = (None, exc)
        self.last_seconds = time.perf_counter() - t

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        key = id(feeds)
        self.last_seconds = self._untold.pop(key, None)
        if key not in self._cache:
            self._compute(feeds)
        outputs, error = self._cache[key]
        if error is not None:
            raise error
        return outputs


def fit_runner(candidate: Runner, tol: Tolerance, samples: Sequence[Sample]) -> tuple[Tolerance, list, list[str]]:
    """What a candidate says of itself: ``compute_precision`` (e.g. the HTP simulator's fp16) holds it to that
    precision's default tolerance when the hop's is the default of a stricter one (user-given tolerances stand);
    ``static_shapes`` (a DLC) gives it only the samples at those input shapes (a note says so; the tolerance's
    ``reason`` says why it was raised)."""
    notes = []
    lower = getattr(candidate, "compute_precision", None)
    if lower in TOLERANCES and (tol.atol, tol.rtol) == TOLERANCES.get(tol.precision):
        a, r = TOLERANCES[lower]
        if a > tol.atol or r > tol.rtol:
            tol = Tolerance(max(a, tol.atol), max(r, tol.rtol), tol.precision, tol.per_output,
                            f"held to the {lower} tolerance: this backend computes in {lower}")
    static = getattr(candidate, "static_shapes", None)
    samples = list(samples)
    if static:
        fit = [s for s in samples if all(list(s.feeds[k].shape) == list(v) for k, v in static.items()
                                         if k in s.feeds)]
        if fit and len(fit) < len(samples):
            notes.append(f"{len(samples) - len(fit)} sample(s) at other input shapes left out: the artifact takes "
                         f"only {static}")
            samples = fit
    return tol, samples, notes


def validate_hop(src: str, dst: str, reference: Runner, candidate: Runner, samples: Sequence[Sample],
                 output_names: Sequence[str], tol: Tolerance, latency_runs: int = 0,
                 source: Runner | None = None) -> dict:
    """Compare ``candidate`` with ``reference`` on every sample; the hop record for the report.

    A sample the reference cannot run (e.g. a grown dynamic axis the source model does not accept)
    is skipped with a note; a sample only the candidate cannot run fails the hop. With ``source`` (the
    source framework's outputs, for a hop after the first) the candidate is also compared with the source:
    ``vs_source`` says how far the chain has drifted by this hop, so the report can tell which hop
    introduced a difference (the first whose own comparison fails) from the ones that carried it.
    """
    tol, samples, fitted = fit_runner(candidate, tol, samples)
    unknown = [n for n, _, _ in tol.per_output if n not in output_names]
    if unknown:
        raise BadInputError(f"tolerance given for unknown output(s) {', '.join(map(repr, unknown))}; "
                            f"the outputs are {', '.join(map(repr, output_names))}")
    outputs: dict[str, dict] = {}
    vs_source: dict[str, dict] = {}
    notes: list[str] = list(fitted)
    errors: list[str] = []
    findings: list[str] = []  # what the candidate found worth saying of a run (e.g. where fp16 overflowed)
    ran = 0
    seconds: dict[str, list[float]] = {src: [], dst: []}
    for i, sample in enumerate(samples):
        try:
            ref, t_ref = timed(reference, sample.feeds)
        except (NativeCrash, TooLargeError):  # not a verdict on the numbers: the run stops
            raise
        except Exception as exc:
            if i == 0:
                raise BadInputError(f"{src} model fails on the validation inputs {sample.shapes()}: "
                                    f"{' '.join(str(exc).split())[:300]}") from None
            notes.append(f"sample {i} ({sample.origin}) skipped: {src} does not run at {sample.shapes()}")
            continue
        try:
            got, t_cand = timed(candidate, sample.feeds)
        except (NativeCrash, TooLargeError):  # not a verdict on the numbers: the run stops
            raise
        except Exception as exc:
            errors.append(f"{dst} fails at input shapes {sample.shapes()} where {src} runs: "
                          f"{' '.join(str(exc).split())[:300]}")
            continue
        findings += [n for n in getattr(candidate, "last_notes", None) or () if n not in findings]
        ran += 1
        for side, t in ((src, t_ref), (dst, t_cand)):
            if t is not None:
                seconds[side].append(t)
        if len(ref) != len(got):
            errors.append(f"{dst} has {len(got)} outputs, {src} has {len(ref)}")
            continue
        names = list(output_names) if len(output_names) == len(got) else [f"output_{k}" for k in range(len(got))]
        for name, r, g in zip(names, ref, got):
            atol, rtol = tol.for_output(name)
            outputs[name] = merge(outputs.get(name), {**compare(r, g, atol=atol, rtol=rtol), "atol": atol,
                                                      "rtol": rtol})
        if source is not None:
            try:
                first = source(sample.feeds)
            except Exception:  # noqa: BLE001 - the source does not run at this sample's shapes
                continue
            for name, r, g in zip(names, first, got):
                atol, rtol = tol.for_output(name)
                vs_source[name] = merge(vs_source.get(name), compare(r, g, atol=atol, rtol=rtol))

    passed = not errors and ran > 0 and all(o["passed"] for o in outputs.values())
    if not passed and findings:  # the candidate's own account of what went wrong belongs with the failure
        errors += findings
    else:
        notes += findings
    if latency_runs > 0 and ran > 0 and not errors:  # same inputs for both sides: the first sample
        latency = {src: median_latency(reference, samples[0].feeds, latency_runs),
                   dst: median_latency(candidate, samples[0].feeds, latency_runs)}
        method = f"median of {latency_runs} fresh runs after a warm-up, first sample"
    else:
        latency = {side: sum(t) / len(t) if t else None for side, t in seconds.items()}
        method = "mean of the validation runs that computed"
    record = {
        "from": src, "to": dst, "status": "passed" if passed else "failed", "passed": passed,
        "samples": ran, "sample_shapes": [s.shapes() for s in samples],
        "tolerance": tol.as_dict(),
        "outputs": [{"name": k, **v} for k, v in outputs.items()],
        "errors": errors, "notes": notes,
        "latency_s": latency,
        "latency_method": method,
        "runtimes": {side: what for side, what in ((src, getattr(reference, "what_ran", None)),
                                                   (dst, getattr(candidate, "what_ran", None))) if what},
        "artifact_checked": getattr(candidate, "artifact_checked", None) or "executed",
    }
    if getattr(candidate, "artifact_check", None):
        record["artifact_check"] = candidate.artifact_check
    if source is not None and vs_source:
        record["vs_source"] = {"passed": all(o["passed"] for o in vs_source.values()),
                               "outputs": [{"name": k, **{m: v[m] for m in VS_SOURCE_KEYS if m in v}}
                                           for k, v in vs_source.items()]}
    return record


VS_SOURCE_KEYS = ("passed", "shape", "max_abs", "max_rel", "cosine", "mismatch_fraction", "required_atol",
                  "top1_agreement", "top5_agreement", "error")


def skipped_hop(src: str, dst: str, samples: Sequence[Sample], tol: Tolerance, reason: str) -> dict:
    """The record of a hop that could not run here (no GPU, no simulator): status skipped, never passed."""
    return {"from": src, "to": dst, "status": "skipped", "passed": False, "samples": 0,
            "sample_shapes": [s.shapes() for s in samples], "tolerance": tol.as_dict(), "outputs": [],
            "errors": [], "notes": [f"skipped: {reason}"], "skipped_reason": reason, "latency_s": {},
            "artifact_checked": "not run"}


def failed_hop(src: str, dst: str, samples: Sequence[Sample], tol: Tolerance, error: str) -> dict:
    """The record of a hop that failed before any comparison (e.g. the artifact is not the graph it claims)."""
    return {"from": src, "to": dst, "status": "failed", "passed": False, "samples": 0,
            "sample_shapes": [s.shapes() for s in samples], "tolerance": tol.as_dict(), "outputs": [],
            "errors": [error], "notes": [], "latency_s": {}, "artifact_checked": "structure"}
