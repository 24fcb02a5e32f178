"""Hop validation: run a reference and a candidate on the same samples and compare every output."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from onnxbridge.compare import TOLERANCES, compare, merge
from onnxbridge.errors import BadInputError, HopSkipped, NativeCrash, TimedOut, TooLargeError
from onnxbridge.plugins import described
from onnxbridge.records import Hop, HopKind, OutputComparison
from onnxbridge.specs import Sample

# errors that stop a run rather than say something of a model's numbers
STOPS = (NativeCrash, TooLargeError, TimedOut)

Runner = Callable[[Mapping[str, Any]], list]  # named inputs -> outputs in order


FP16_FACTOR = 4.0  # a reduced-precision hop may err this many times what the fp16 emulation errs
FP16_FLOOR = 2.0 ** -11  # fp16's unit roundoff: the smallest error an fp16 hop is held to (relative to scale)
FP16_UNJUDGEABLE = 0.1  # an output the emulation itself errs more than this on (rel rms) is lost to fp16: no pass
INT8_MIN_SNR_DB = 20.0  # int8: signal to error power, per output
INT8_MIN_TOP1 = 0.9  # int8: rows whose arg-max agrees, for [batch, classes] outputs


@dataclass(frozen=True)
class Tolerance:
    """How a hop is judged: a ``rule`` with its numbers, chosen by what the hop's candidate computes.

    ``fp32``: elementwise ``|got - ref| <= atol + rtol * |ref|`` with the absolute floor at most ``rtol`` times the
    output's own scale; ``fixed``: the same at a reduced precision's tolerance (no fp32 graph to emulate);
    ``fp16-emulation``: within ``factor`` times the error an fp16 emulation of the reference graph makes (``floor``:
    the least error allowed, relative to the output's scale); ``int8-agreement``: SNR and top-1 agreement; ``user``:
    ``--atol/--rtol`` as given, elementwise. Per-output tolerances (``--atol logits:1e-3``) are applied as given."""

    atol: float
    rtol: float
    precision: str = "fp32"
    per_output: tuple[tuple[str, float | None, float | None], ...] = ()
    reason: str | None = None  # why this rule applies to this hop
    rule: str = "fp32"
    user: bool = False  # a default --atol/--rtol was given: every output is judged by it as given
    factor: float = FP16_FACTOR  # fp16-emulation: how many times the emulation's error the candidate may err

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
        user = a_default is not None or r_default is not None
        return cls(a if a_default is None else a_default, r if r_default is None else r_default, precision, per,
                   rule="user" if user else "fp32" if precision == "fp32" else "fixed", user=user)

    def for_hop(self, computes: str, dst: str, emulated: bool, factor: float | None = None) -> "Tolerance":
        """This tolerance as it applies to a hop whose candidate (``dst``) computes in ``computes``: an fp32 hop
        keeps fp32 tolerances whatever the final target; a reduced-precision one is judged against an fp16
        emulation where there is a graph to emulate (``emulated``), within ``factor`` (the candidate's declared
        ``emulation_factor``; default ``FP16_FACTOR``) times its error."""
        computes = computes if computes in TOLERANCES else "fp32"
        if self.user:
            return replace(self, precision=computes, reason="--atol/--rtol given: applied as given, elementwise")
        a, r = TOLERANCES[computes]
        if computes == "fp32":
            rule, why = "fp32", f"{dst} computes in fp32"
        elif computes == "int8":
            rule, why = "int8-agreement", (f"{dst} computes in int8: SNR >= {INT8_MIN_SNR_DB:g} dB per output, "
                                           f"top-1 agreement >= {INT8_MIN_TOP1:.0%} for classifier outputs")
        elif emulated:
            rule, why = "fp16-emulation", f"{dst} computes in fp16; the emulation is of the reference graph"
            if factor is not None and factor != FP16_FACTOR:
                why += f"; {dst} declares fp16 kernels that may err {factor:g}x fp16 rounding alone"
        else:
            rule, why = "fixed", f"{dst} computes in fp16 and there is no fp32 ONNX graph to emulate"
        return Tolerance(a, r, computes, self.per_output, why, rule, factor=factor or FP16_FACTOR)

    def for_output(self, name: str) -> tuple[float, float]:
        for n, a, r in self.per_output:
            if n == name:
                return (self.atol if a is None else a, self.rtol if r is None else r)
        return self.atol, self.rtol

    def literal(self, name: str) -> bool:
        """Whether output ``name`` is judged by a tolerance the user gave, as given."""
        return self.user or any(n == name for n, _, _ in self.per_output)

    def as_dict(self) -> dict:
        out: dict = {"precision": self.precision, "rule": self.rule, "atol": self.atol, "rtol": self.rtol}
        if self.reason:
            out["reason"] = self.reason
        if self.rule == "fp16-emulation":
            out.update(factor=self.factor, floor=FP16_FLOOR)
        if self.per_output:
            out["per_output"] = {n: {k: v for k, v in (("atol", a), ("rtol", r)) if v is not None}
                                 for n, a, r in self.per_output}
        return out


def judge(name: str, ref: Any, got: Any, tol: Tolerance, emulated: Any = None) -> dict:
    """One output's metrics and verdict under ``tol``'s rule (``emulated``: the fp16 emulation's output on the
    same sample, for the fp16-emulation rule); ``budget`` says what it was held to, ``failed_check`` why it
    failed."""
    atol, rtol = tol.for_output(name)
    literal = tol.literal(name)
    m = compare(ref, got, atol=atol, rtol=rtol, scaled=not literal)
    if m.get("kind") != "numeric":
        return m
    rule = "user" if literal else tol.rule
    if rule == "fp16-emulation" and emulated is not None:
        e = compare(ref, emulated, atol=atol, rtol=rtol, scaled=True)
        if e.get("kind") == "numeric":
            return _against_emulation(m, e, tol.factor)
        rule = "fixed"
    if rule == "int8-agreement":
        return _agreement(m)
    m["budget"] = {"rule": "fixed" if rule == "fp16-emulation" else rule, "atol": m["atol"], "rtol": rtol}
    if not m["passed"]:
        m["failed_check"] = m.get("reason") or (
            f"{m['mismatch_fraction']:.1%} of values beyond atol {m['atol']:.2g} + rtol {rtol:.2g} x |ref| "
            f"(max abs {m['max_abs']:.2g})")
    return m


def _finite_mismatch(m: dict) -> str | None:
    """Why NaN/inf values disagree, if they do."""
    return m.get("reason") or (f"{m['nan_mismatch']} NaN value(s) on one side only" if m.get("nan_mismatch") else None)


def _against_emulation(m: dict, e: dict, factor: float = FP16_FACTOR) -> dict:
    """The fp16-emulation rule: max abs and relative RMS error within ``factor`` times the emulation's (at least
    ``FP16_FLOOR`` of the output's scale), NaN/inf where the reference has them."""
    scale = m["scale"]
    emu_rel = e["rel_rms"] if e["rel_rms"] is not None else 0.0
    b_max = factor * max(e["max_abs"], FP16_FLOOR * scale)
    b_rel = factor * max(emu_rel, FP16_FLOOR)
    m["budget"] = {"rule": "fp16-emulation", "max_abs": b_max, "rel_rms": b_rel,
                   "emulation": {k: e.get(k) for k in ("max_abs", "rel_rms", "snr_db", "cosine")}}
    checks = []
    bad = _finite_mismatch(m)
    if bad:
        checks.append(bad)
    if e["rel_rms"] is None or emu_rel > FP16_UNJUDGEABLE or _finite_mismatch(e):
        checks.append("fp16 cannot hold this output: its fp16 emulation alone errs " + (
            _finite_mismatch(e) or ("without a reference signal to measure against" if e["rel_rms"] is None else
                                    f"rel rms {emu_rel:.2g} (SNR {e['snr_db']:.1f} dB)")))
    if m["max_abs"] > b_max:
        checks.append(f"max abs {m['max_abs']:.2g} > budget {b_max:.2g} ({factor:g}x the emulation's "
                      f"{e['max_abs']:.2g})")
    rel = m["rel_rms"]
    if rel is None or rel > b_rel:
        checks.append("no reference signal to measure the error against" if rel is None else
                      f"rel rms {rel:.2g} > budget {b_rel:.2g} ({factor:g}x the emulation's {emu_rel:.2g})")
    m["passed"] = not checks
    if checks:
        m["failed_check"] = "; ".join(checks)
    return m


def _agreement(m: dict) -> dict:
    """The int8 rule: SNR and top-1 agreement."""
    snr, top1 = m["snr_db"], m.get("top1_agreement")
    m["budget"] = {"rule": "int8-agreement", "snr_db": INT8_MIN_SNR_DB, "top1_agreement": INT8_MIN_TOP1}
    checks = []
    bad = _finite_mismatch(m)
    if bad:
        checks.append(bad)
    if m["rel_rms"] is None:
        checks.append("no reference signal to measure the error against")
    elif snr is not None and snr < INT8_MIN_SNR_DB:
        checks.append(f"SNR {snr:.1f} dB < {INT8_MIN_SNR_DB:g} dB")
    if top1 is not None and top1 < INT8_MIN_TOP1:
        checks.append(f"top-1 agreement {top1:.0%} < {INT8_MIN_TOP1:.0%}")
    m["passed"] = not checks
    if checks:
        m["failed_check"] = "; ".join(checks)
    return m


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
    if not 0 <= number < float("inf"):
        raise BadInputError(f"{flag} '{value}' must be a finite non-negative number")
    return number


_UNTIMED = object()


def timed(run: Runner, feeds: Mapping[str, Any]) -> tuple[list, float | None]:
    """Outputs and the seconds the run took: what the runner measured itself (``last_seconds``: the time inside a
    worker process, or None for an answer it did not compute), else the wall time of the call."""
    t = time.perf_counter()
    out = run(feeds)
    wall = time.perf_counter() - t
    own = getattr(run, "last_seconds", _UNTIMED)  # the one member whose absence differs from its default (None)
    return out, (wall if own is _UNTIMED else own)


def median_latency(run: Runner, feeds: Mapping[str, Any], runs: int) -> float | None:
    """Median seconds of ``runs`` fresh runs after one warm-up (a runner's ``fresh`` form is used when it has one,
    on a copy of the feeds, so no cached answer is timed)."""
    import statistics

    import numpy as np

    fresh = described(run).fresh
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

    def fails(self, sample: Sample) -> Exception | None:
        """Compute the outputs on ``sample`` now (kept for the hop) and return the error the source raised on it,
        None when it ran; a failed sample is forgotten (its feeds are dropped, and their id may be reused)."""
        self.prefetch([sample])
        key = id(sample.feeds)
        error = self._cache[key][1]
        if error is not None:
            del self._cache[key]
            self._untold.pop(key, None)
        return error

    def _compute(self, feeds: Mapping[str, Any]) -> None:
        t = time.perf_counter()
        try:
            self._cache[id(feeds)] = (self.run(feeds), None)
        except TimedOut:  # the run's time is up: no later sample or hop may run
            raise
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


PRECISION_ORDER = ("int8", "fp16", "fp32")


def _lowest(*precisions: str | None) -> str:
    """The lowest of the precisions given (a candidate's own ``compute_precision`` and the one its build applied):
    an fp32 DLC computes in fp16 on the HTP, an int8 one in int8; fp32 when none is known."""
    known = [p for p in precisions if p in PRECISION_ORDER]
    return min(known, key=PRECISION_ORDER.index) if known else "fp32"


def fit_runner(candidate: Runner, samples: Sequence[Sample]) -> tuple[list, list[str]]:
    """The samples a candidate takes: ``static_shapes`` (a DLC) gives it only the samples at those input shapes
    (a note says so)."""
    notes = []
    static = described(candidate).static_shapes
    samples = list(samples)
    if static:
        fit = [s for s in samples if all(list(s.feeds[k].shape) == list(v) for k, v in static.items()
                                         if k in s.feeds)]
        if fit and len(fit) < len(samples):
            notes.append(f"{len(samples) - len(fit)} sample(s) at other input shapes left out: the artifact takes "
                         f"only {static}")
            samples = fit
    return samples, notes


def validate_hop(kind: HopKind, src: str, dst: str, reference: Runner, candidate: Runner, samples: Sequence[Sample],
                 output_names: Sequence[str], tol: Tolerance, latency_runs: int = 0,
                 source: Runner | None = None, emulation: Callable[[], Runner] | None = None,
                 computes: str | None = None) -> Hop:
    """Compare ``candidate`` with ``reference`` on every sample: the ``Hop`` (of ``kind``, ``src`` -> ``dst``).

    The hop is judged by what its candidate computes (the lower of its ``compute_precision`` and ``computes``, the
    precision its build applied; fp32 when neither is known):
    ``tol.for_hop`` picks the rule. ``emulation`` makes (when the rule needs it) a runner of the reference graph's
    fp16 emulation, run on the same samples: a reduced-precision candidate may err a stated factor of what it errs.
    A sample the reference cannot run (e.g. a grown dynamic axis the source model does not accept)
    is skipped with a note; a sample only the candidate cannot run fails the hop. With ``source`` (the
    source framework's outputs, for a hop after the first) the candidate is also compared with the source:
    ``vs_source`` says how far the chain has drifted by this hop, so the report can tell which hop
    introduced a difference (the first whose own comparison fails) from the ones that carried it.
    """
    samples, fitted = fit_runner(candidate, samples)
    computes = _lowest(described(candidate).compute_precision, computes)
    factor = described(candidate).emulation_factor
    given, tol = tol, tol.for_hop(computes, dst, emulated=emulation is not None, factor=factor)
    emulator = emulation() if tol.rule == "fp16-emulation" else None
    if tol.rule == "fp16-emulation" and emulator is None:  # the reference graph is not fp32: nothing to emulate
        tol = given.for_hop(computes, dst, emulated=False)
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
    seconds = {"reference": 0.0, "candidate": 0.0, "emulation": 0.0}
    for i, sample in enumerate(samples):
        try:
            t = time.perf_counter()
            ref = reference(sample.feeds)
            seconds["reference"] += time.perf_counter() - t
        except STOPS:  # not a verdict on the numbers: the run stops
            raise
        except Exception as exc:
            if i == 0:
                raise BadInputError(f"{src} model fails on the validation inputs {sample.shapes()}: "
                                    f"{' '.join(str(exc).split())[:300]}") from None
            notes.append(f"sample {i} ({sample.origin}) skipped: {src} does not run at {sample.shapes()}")
            continue
        try:
            t = time.perf_counter()
            got = candidate(sample.feeds)
            seconds["candidate"] += time.perf_counter() - t
        except STOPS:  # not a verdict on the numbers: the run stops
            raise
        except HopSkipped as exc:  # the candidate cannot be run here (an op its host evaluator lacks)
            return skipped_hop(kind, src, dst, samples, given, exc.one_line())
        except Exception as exc:
            errors.append(f"{dst} fails at input shapes {sample.shapes()} where {src} runs: "
                          f"{' '.join(str(exc).split())[:300]}")
            continue
        findings += [n for n in described(candidate).last_notes or () if n not in findings]
        ran += 1
        if len(ref) != len(got):
            errors.append(f"{dst} has {len(got)} outputs, {src} has {len(ref)}")
            continue
        emulated = [None] * len(ref)
        if emulator is not None:
            t = time.perf_counter()
            try:
                emulated = emulator(sample.feeds)
            except STOPS:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. an emulated export with fixed shapes: the fixed rule
                notes.append(f"sample {i}: the fp16 emulation does not run at {sample.shapes()} "
                             f"({' '.join(str(exc).split())[:120]}): judged by the fixed fp16 tolerance")
            seconds["emulation"] += time.perf_counter() - t
        names = list(output_names) if len(output_names) == len(got) else [f"output_{k}" for k in range(len(got))]
        for name, r, g, e in zip(names, ref, got, emulated):
            outputs[name] = merge(outputs.get(name), judge(name, r, g, tol, e))
        if source is not None:
            try:
                first = source(sample.feeds)
            except STOPS:
                raise
            except Exception:  # noqa: BLE001 - the source does not run at this sample's shapes
                continue
            for name, r, g in zip(names, first, got):
                atol, rtol = tol.for_output(name)
                vs_source[name] = merge(vs_source.get(name), compare(r, g, atol=atol, rtol=rtol,
                                                                     scaled=not tol.literal(name)))

    passed = not errors and ran > 0 and all(o["passed"] for o in outputs.values())
    if not passed and findings:  # the candidate's own account of what went wrong belongs with the failure
        errors += findings
    else:
        notes += findings
    latency: dict = {}
    if latency_runs > 0 and ran > 0 and not errors:  # same inputs for both sides: the first sample
        latency = {src: median_latency(reference, samples[0].feeds, latency_runs),
                   dst: median_latency(candidate, samples[0].feeds, latency_runs)}
    hop = Hop(src, dst, kind, "passed" if passed else "failed", ran, [s.shapes() for s in samples], tol.as_dict(),
              [OutputComparison.from_judged(k, v) for k, v in outputs.items()], errors, notes, latency,
              seconds={k: round(v, 4) for k, v in seconds.items() if v},
              runtimes={side: what for side, what in ((src, described(reference).what_ran),
                                                      (dst, described(candidate).what_ran)) if what},
              artifact_checked=described(candidate).artifact_checked or "executed",
              artifact_check=described(candidate).artifact_check or None)
    if latency:
        hop.latency_method = f"median of {latency_runs} warm runs after a warm-up, first sample"
    if emulator is not None and described(emulator).what_ran:
        hop.runtimes["fp16 emulation"] = emulator.what_ran
    if source is not None and vs_source:
        hop.vs_source = {"passed": all(o["passed"] for o in vs_source.values()),
                         "outputs": [{"name": k, **{m: v[m] for m in VS_SOURCE_KEYS if m in v}}
                                     for k, v in vs_source.items()]}
    return hop


VS_SOURCE_KEYS = ("passed", "shape", "max_abs", "max_rel", "cosine", "snr_db", "rel_rms", "mismatch_fraction",
                  "required_atol", "top1_agreement", "top5_agreement", "error")


def skipped_hop(kind: HopKind, src: str, dst: str, samples: Sequence[Sample], tol: Tolerance, reason: str) -> Hop:
    """A hop that could not run here (no GPU, no simulator): status skipped, never passed."""
    return Hop(src, dst, kind, "skipped", 0, [s.shapes() for s in samples], _would_be(tol, dst),
               notes=[f"skipped: {reason}"], skipped_reason=reason, artifact_checked="not run")


def failed_hop(kind: HopKind, src: str, dst: str, samples: Sequence[Sample], tol: Tolerance, error: str) -> Hop:
    """A hop that failed before any comparison (e.g. the artifact is not the graph it claims)."""
    return Hop(src, dst, kind, "failed", 0, [s.shapes() for s in samples], _would_be(tol, dst), errors=[error],
               artifact_checked="structure")


def _would_be(tol: Tolerance, dst: str) -> dict:
    """The tolerance a hop that compared nothing would have been judged by, for its record."""
    return tol.for_hop(tol.precision, dst, emulated=tol.precision == "fp16").as_dict()
