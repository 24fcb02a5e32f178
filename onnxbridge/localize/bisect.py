"""Find the first diverging checkpoint of a hop: the earliest out of tolerance, a bounded number of bytes alive.

The answer (``first_divergent``) is the earliest checkpoint, in topological order, whose output is out of
tolerance on some sample while its inputs that are checkpoints are all within tolerance: the op that introduced
the error, not where it became visible. An error can appear and be hidden again downstream (a Relu, Min or Clip,
a multiply by zero): only a look at every checkpoint before the answer can rule out an earlier one. So:

* **Ordered scan** (the default): every checkpoint is compared, in topological order, in runs whose asked tensors
  (both sides, one sample) fit ``budget_bytes``, on every sample; the scan stops after the run that holds the
  earliest out-of-tolerance checkpoint. Every checkpoint before the answer has been compared, on all samples.
* **Bisection**, when the scan would take more than ``scan_runs`` runs (a model whose intermediates are many
  times the budget): each step asks ``per_step`` tensors that split the unknown interval evenly, assuming "once
  broken, stays broken"; where it lands, the culprit's inputs are checked and the search goes on before an input
  that is out of tolerance. It takes about 1 + log_{per_step+1}(n) steps but can miss a divergence hidden again
  downstream; ``method`` says so.

Where a probe cannot estimate tensor sizes, a first step asks a few tensors spread over the graph (and the last)
to learn them. ``suspects``: nodes another check already named (the fp16 range check's "node 'X' (Op) made inf in
'Y' from finite inputs", passed by ``onnxbridge.localize.hops.attach``); they are compared first, and a suspect
whose inputs are within tolerance is the answer unless an earlier checkpoint diverges; one no probe can show is
the answer when no checkpoint diverges, so localization never says "no divergent node" after a check named one.

Checkpoints are judged the way the hop is: for a hop judged against the fp16 emulation of its reference graph
(the candidate computes in fp16), ``emulation`` is a probe of that emulation and each checkpoint is held to the hop's
factor times the emulation's own error there, so the rounding error fp16 accumulates along the graph passes and the
first checkpoint out of budget is where the candidate's error jumps past it; otherwise to the elementwise tolerance
(``onnxbridge.localize.tolerance``).

Each trace entry carries ``over_tolerance`` (the worst sample's error over what it was held to: ``required_atol /
atol``, or under the emulation's budget ``over_budget``; above 1 fails) and, where a side has NaN/inf values, how
many (``nonfinite_output``, ``nonfinite_reference``, of ``values``). The trace keeps the tensors around the answer,
the first step's, the answer's inputs and an even spread of the rest (``compared`` says how many were compared in
all). Where the earliest checkpoint out of tolerance is barely past it and its inputs are already close to theirs,
the error crept up (rounding drift, typically fp16) rather than one op introducing it: the search goes on to the
first later checkpoint where the error jumps (``JUMP`` times its tolerance and its inputs' errors, or NaN/inf from
finite inputs) and names that one, saying where the drift crossed; where none jumps, the crossing is the answer and
``method`` calls it drift. ``runs`` counts the candidate's runs per sample.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import time
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from onnxbridge.compare import merge
from onnxbridge.errors import BadInputError
from onnxbridge.localize.probe import Checkpoint, Probe
from onnxbridge.localize.tolerance import compare_checkpoint

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.specs import Sample
    from onnxbridge.validation import Tolerance

PER_STEP = 3  # tensors asked per bisection step when the budget allows: log4(n) steps
SCAN_RUNS = 16  # the most runs an ordered scan may take; beyond it, bisection
DRIFT_OVER, DRIFT_NEAR = 3.0, 0.3  # "drift": the culprit under 3x its tolerance, an input at 30% of its own
JUMP = 10.0  # after drift: an error this many times its tolerance and its inputs' errors is where a real one starts
TRACE_AROUND, TRACE_SPREAD = 8, 24  # trace entries kept either side of the answer, and spread over the rest

# nodes another check named for the hop being localized (``hops.attach`` sets it around the search): mappings with
# ``node``, ``op``, ``tensor`` (a name of the candidate's graph) and ``note`` (the check's words)
SUSPECTS: contextvars.ContextVar[tuple] = contextvars.ContextVar("onnxbridge_localize_suspects", default=())


@contextlib.contextmanager
def suspecting(suspects: Sequence[Mapping]) -> Iterator[None]:
    """Within the block, ``localize`` starts from ``suspects`` (unless given its own)."""
    token = SUSPECTS.set(tuple(suspects))
    try:
        yield
    finally:
        SUSPECTS.reset(token)


def localize(reference: Probe, candidate: Probe, checkpoints: Sequence[Checkpoint], samples: "Sequence[Sample]",
             tol: "Tolerance", *, method: str, budget_bytes: int = 256 * 2**20, per_step: int = PER_STEP,
             scan_runs: int = SCAN_RUNS, suspects: Sequence[Mapping] | None = None,
             emulation: Probe | None = None) -> dict:
    """The report's ``localization`` block for one hop (see ``docs/report-schema.md``).

    ``budget_bytes``: the most bytes of asked tensors (both sides, one sample) held at once; a run whose tensors
    would exceed it is split into several runs (a single tensor larger than the budget is still asked alone).
    Sizes are those seen so far, else a probe's optional ``estimate_bytes(names, feeds) -> {name: bytes}``
    (``OnnxProbe`` has one, from shape inference), else the largest seen. ``scan_runs``: the most runs the ordered
    scan may take (0: always bisect); ``per_step``: tensors asked per bisection step. ``suspects``: see the module
    (default: those ``suspecting`` set). ``emulation``: a probe of the fp16 emulation of the reference graph (same
    tensor names), used where ``tol.rule`` is "fp16-emulation" (its tensors count in the byte budget).
    """
    if not samples:
        raise BadInputError("localization needs at least one sample")
    started = time.perf_counter()
    emulation = emulation if tol.rule == "fp16-emulation" else None
    search = _Search(reference, candidate, list(checkpoints), samples, tol, budget_bytes, max(1, per_step),
                     max(0, scan_runs), SUSPECTS.get() if suspects is None else tuple(suspects), emulation)
    first, reasons = search.run()
    n = len(search.checkpoints)
    if search.emulation is not None:
        tolerance = (f"each tensor judged as the hop is: max abs and rel rms error within {tol.factor:g}x those of "
                     f"the fp16 emulation of the reference graph at that tensor ({emulation.what}; at least "
                     "2^-11 of its scale), NaN/inf where the reference has them")
    else:
        tolerance = ("tolerance per tensor: atol x max(1, RMS of the reference tensor), fp16 tensors held to at "
                     "least the fp16 tolerance")
    if search.mode == "scan":
        how = (f"{method}; every checkpoint up to the first divergent compared in topological order "
               f"({search.compared} of {n}, at most {_mib(search.budget)} of tensors a run) on all {len(samples)} "
               f"sample(s), {tolerance}")
    elif search.mode == "bisect":
        how = (f"{method}; bisection over {n} checkpoints in topological order (an ordered scan would take "
               f"{search.scan_estimate} runs, more than {search.scan_runs}: a divergence hidden again downstream "
               f"can be missed), up to {search.per_step} tensors a step on all {len(samples)} sample(s), {tolerance}")
    else:
        how = method
    how = "; ".join([how, *search.notes, *reasons])
    return {"first_divergent": first, "trace": search.trace(), "method": how, "runs": search.runs,
            "seconds": round(time.perf_counter() - started, 3), "checkpoints": n, "compared": search.compared}


def _mib(n: int) -> str:
    return f"{n / 2**20:.3g} MiB"


class _Search:
    def __init__(self, reference: Probe, candidate: Probe, checkpoints: list[Checkpoint], samples, tol,
                 budget_bytes: int, per_step: int, scan_runs: int, suspects: tuple, emulation: Probe | None = None):
        self.reference, self.candidate, self.emulation = reference, candidate, emulation
        self.checkpoints = checkpoints
        self.index = {cp.tensor: i for i, cp in enumerate(checkpoints)}
        self.samples, self.tol = samples, tol
        self.budget, self.per_step, self.scan_runs = budget_bytes, per_step, scan_runs
        self.suspects = suspects
        self.merged: dict[int, dict] = {}  # checkpoint -> metrics merged over samples (worst of each)
        self.worst: dict[int, dict] = {}  # checkpoint -> metrics of its worst sample
        self.step_of: dict[int, int] = {}
        self.nbytes: dict[str, int] = {}  # bytes per tensor (one side, one sample), as seen or estimated
        self.guessed: set[str] = set()  # tensors whose size no probe could tell
        self.runs = 0
        self.mode = "none"
        self.scan_estimate = 0
        self.first_step: set[int] = set()
        self.answer_at: int | None = None
        self.crossed: int | None = None  # where rounding drift crossed the tolerance, when a later jump is the answer
        self.notes: list[str] = []  # what changed on the way (the emulation could not run)
        self.unmatched: list[Mapping] = list(suspects)  # suspects no checkpoint shows (``suspected`` sets it)

    @property
    def compared(self) -> int:
        return len(self.merged)

    def inputs_of(self, i: int) -> list[int]:
        """The checkpoints among checkpoint ``i``'s inputs (all before it in topological order)."""
        return [self.index[t] for t in self.checkpoints[i].inputs if t in self.index and self.index[t] < i]

    # -- the search ---------------------------------------------------------------------------------------
    def run(self) -> tuple[dict | None, list[str]]:
        n = len(self.checkpoints)
        if n == 0:
            return self.unseen_suspect(["no checkpoints: neither side can show intermediate tensors of this graph"])
        suspected = self.suspected()
        for i in range(n):
            self.estimate(self.checkpoints[i].tensor)
        if self.guessed or suspected:  # learn the sizes no probe could tell; look at the suspects first
            start = set(self.points(0, n, include_last=True)) if self.guessed else set()
            start |= set(suspected) | {j for i in suspected for j in self.inputs_of(i)}
            self.first_step = set(start)
            self.evaluate(sorted(start))
        rest = [i for i in range(n) if i not in self.merged]
        self.scan_estimate = len(self.batches(rest))
        if self.scan_estimate <= self.scan_runs:
            self.mode = "scan"
            found = self.scan(rest)
        else:
            self.mode = "bisect"
            found = self.bisect(suspected)
        return self.conclude(self.past_drift(found), suspected)

    def scan(self, rest: list[int]) -> int | None:
        """Compare ``rest`` in topological order, a budget's worth a run, until the earliest out-of-tolerance
        checkpoint is known (everything before it compared); its index, or None."""
        while rest:
            batch = self.batches(rest)[0]  # sizes learnt in earlier runs re-plan the rest
            self.evaluate(batch)
            rest = rest[len(batch):]
            bad = self.bad()
            if bad is not None and (not rest or bad < rest[0]):
                return bad
        return self.bad()

    def bad(self) -> int | None:
        return min((i for i, m in self.merged.items() if not m["passed"]), default=None)

    def bisect(self, suspected: list[int], start: int = 0, broken=None) -> int | None:
        """Bisection under "once broken, stays broken" over the checkpoints from ``start`` on, starting before a
        suspect that is out of tolerance; ``broken(i)``: whether compared checkpoint ``i`` counts as broken
        (default: out of tolerance)."""
        broken = broken or (lambda i: not self.merged[i]["passed"])
        n = len(self.checkpoints)
        lo, hi = start, n  # unknown: [lo, hi); hi < n: checkpoint hi is broken
        lo, hi = self.narrow(lo, hi, broken)
        while True:
            while lo < hi:
                self.evaluate(self.points(lo, hi, include_last=hi == n))
                lo, hi = self.narrow(lo, hi, broken)
            if hi == n:
                return None
            inputs = [i for i in self.inputs_of(hi) if i >= start]
            self.evaluate([i for i in inputs if i not in self.merged])
            bad = [i for i in inputs if broken(i)]
            if not bad:
                return hi
            hi = min(bad)  # an input already broken: the error came in earlier
            good = [i for i in self.merged if start <= i < hi and not broken(i)]
            lo = max(good) + 1 if good else start

    # -- past rounding drift ------------------------------------------------------------------------------
    def level(self, i: int) -> float:
        """How far compared checkpoint ``i`` is past what it is held to (its worst sample; above 1 fails): inf
        where it failed on NaN/inf, shape or dtype."""
        m = self.merged[i]
        if not m["passed"] and (m.get("error") or m.get("reason") or m.get("nan_mismatch")):
            return math.inf
        return _over(self.worst[i]) or 0.0

    def jumps(self, i: int) -> bool:
        """Whether compared checkpoint ``i`` is where an error jumps: out of tolerance, at least ``JUMP`` times
        its tolerance and its compared inputs' errors (NaN/inf from finite inputs count)."""
        if self.merged[i]["passed"]:
            return False
        inherited = max((self.level(j) for j in self.inputs_of(i) if j in self.merged), default=0.0)
        return not math.isinf(inherited) and self.level(i) >= JUMP * max(1.0, inherited)

    def past_drift(self, at: int | None) -> int | None:
        """``at`` where its error is its own; where rounding drift crossed the tolerance there, the first later
        checkpoint where the error jumps (every checkpoint between compared in a scan; a bisection on ``JUMP``
        times the crossing's level otherwise), else ``at``."""
        if at is None or not self.drift(at, self.inputs_of(at)):
            return at
        n = len(self.checkpoints)
        if self.mode == "scan":
            rest = [i for i in range(at + 1, n) if i not in self.merged]
            while True:
                k = at + 1
                while k in self.merged and not self.jumps(k):
                    k += 1
                if k in self.merged or not rest:
                    found = k if k in self.merged else None
                    break
                batch = self.batches(rest)[0]
                self.evaluate(batch)
                rest = rest[len(batch):]
        else:
            bar = JUMP * max(1.0, self.level(at))
            found = self.bisect([], at + 1, lambda i: self.level(i) >= bar)
            found = found if found is not None and self.jumps(found) else None
        if found is None:
            return at
        self.crossed = at
        return found

    def conclude(self, found: int | None, suspected: list[int]) -> tuple[dict | None, list[str]]:
        """The answer: the earliest of the divergent checkpoint found and the suspects whose inputs are within
        tolerance; with the words that explain it."""
        reasons: list[str] = []
        vouched = [i for i in suspected if all(self.merged[j]["passed"] for j in self.inputs_of(i))]
        at = min([i for i in [found, *vouched] if i is not None], default=None)
        if at != found:  # a suspect before it: the jump past drift is not the answer
            self.crossed = None
        if at is None:
            n = len(self.checkpoints)
            last = self.checkpoints[-1]
            if self.mode == "scan":
                words = (f"no checkpoint is out of tolerance on any sample (all {n} compared, the last "
                         f"'{last.tensor}' included)")
            else:
                words = (f"no checkpoint is out of tolerance on any sample (the last, '{last.tensor}', agrees)")
            lost = self.lost()
            return self.unseen_suspect([words + (lost or ": where the hop's outputs differ, the divergence is where "
                                                 "the checkpoints do not reach (ops after the last checkpoint or "
                                                 "tensors the sides cannot show)")])
        self.answer_at = at
        inputs = self.inputs_of(at)
        answer = self.answer(at, all(self.merged[j]["passed"] for j in inputs if j in self.merged))
        note = self.suspect_note(at)
        if note:
            answer["named_by"] = note
            if self.merged[at]["passed"]:
                reasons.append(f"'{self.checkpoints[at].tensor}' is within tolerance here, but the check that "
                               f"named it saw its inputs finite and its output not ({note})")
        elif suspected:
            names = ", ".join(f"'{self.checkpoints[i].node}'" for i in suspected)
            reasons.append(f"the range check named {names}; '{self.checkpoints[at].node}' diverges earlier")
        drift = self.drift(at, inputs) if self.crossed is None else self.jumped(at)
        if drift:
            reasons.append(drift)
        last = len(self.checkpoints) - 1
        if last != at and last in self.merged and self.merged[last]["passed"]:
            reasons.append(f"the divergence at '{self.checkpoints[at].tensor}' is hidden again downstream: the last "
                           f"checkpoint, '{self.checkpoints[last].tensor}', is within tolerance")
        return answer, reasons

    def lost(self) -> str | None:
        """Words for the earliest compared checkpoint that fp16 itself cannot hold (its fp16 emulation errs more
        than the hop's rule can judge), where checkpoints are judged against the emulation; None otherwise."""
        from onnxbridge.validation import FP16_UNJUDGEABLE

        for i in sorted(self.merged):
            emulated = (self.worst[i].get("budget") or {}).get("emulation") or {}
            if (emulated.get("rel_rms") or 0.0) > FP16_UNJUDGEABLE:
                cp = self.checkpoints[i]
                return (f"; fp16 itself cannot hold '{cp.tensor}' (node '{cp.node}'): the fp16 emulation of the "
                        f"reference errs rel rms {emulated['rel_rms']:.2g} there, and the candidate stays within the "
                        "budget that gives: where the hop's outputs fail on that, no op of the candidate diverges")
        return None

    # -- suspects (nodes another check named) ------------------------------------------------------------
    def suspected(self) -> list[int]:
        """Checkpoints the suspects name: by tensor (the candidate's name, or the reference's), else by node."""
        own = getattr(self.candidate, "rename", None) or {}
        by_own = {v: k for k, v in own.items()}
        out, self.unmatched = [], []
        for s in self.suspects:
            tensor, node = s.get("tensor"), s.get("node")
            i = self.index.get(by_own.get(tensor, tensor)) if tensor else None
            if i is None and node:
                i = next((k for k, cp in enumerate(self.checkpoints) if node in (cp.node, cp.source)), None)
            if i is None:
                self.unmatched.append(s)
            elif i not in out:
                out.append(i)
        return sorted(out)

    def suspect_note(self, i: int) -> str | None:
        cp = self.checkpoints[i]
        own = (getattr(self.candidate, "rename", None) or {}).get(cp.tensor, cp.tensor)
        return next((s.get("note") or f"node '{s.get('node')}'" for s in self.suspects
                     if s.get("tensor") in (cp.tensor, own) or (not s.get("tensor") and s.get("node") in
                                                                   (cp.node, cp.source))), None)

    def unseen_suspect(self, reasons: list[str]) -> tuple[dict | None, list[str]]:
        """No checkpoint diverges: a suspect the probes could not show is the answer (its check saw it)."""
        for s in self.unmatched:
            if not s.get("node"):
                continue
            tensor = s.get("tensor") or ""
            reasons.append(f"'{tensor}' is not among the tensors both sides can show; the answer is the node the "
                           "check named")
            error = {"reason": s.get("note") or "named by another check", "passed": False}
            return {"node": s["node"], "op": s.get("op") or "", "output": tensor, "source": None, "error": error,
                    "inputs_ok": True, "named_by": s.get("note")}, reasons
        return None, reasons

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

    def narrow(self, lo: int, hi: int, broken) -> tuple[int, int]:
        """The unknown interval after the results so far: up to the first broken, after the last good before it."""
        bad = [i for i in range(lo, hi) if i in self.merged and broken(i)]
        hi = min(bad) if bad else hi
        good = [i for i in range(lo, hi) if i in self.merged and not broken(i)]
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
                emu = self.emulated(names, feeds)
                for i, name in zip(batch, names):
                    self.record(i, s, name, ref.get(name), got.get(name), emu.get(name))
                del ref, got, emu
            for i in batch:
                self.step_of[i] = self.runs

    def emulated(self, names: list[str], feeds) -> dict:
        """The emulation's tensors (none without one); where it cannot run, the search goes on without it, each
        tensor held to the elementwise tolerance from there on, and says so."""
        from onnxbridge.errors import TimedOut

        if self.emulation is None:
            return {}
        try:
            return self.emulation.tensors(names, feeds)
        except TimedOut:
            raise
        except Exception as exc:  # noqa: BLE001 - the yardstick, not the verdict: elementwise from here on
            self.emulation = None
            self.notes.append(f"the fp16 emulation's prefix models did not run ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:160]}): tensors held to the elementwise tolerance")
            return {}

    def batches(self, indices: list[int]) -> list[list[int]]:
        """``indices`` in runs whose tensors (both sides, and the emulation's) fit the budget, each at least one
        tensor."""
        out: list[list[int]] = []
        current: list[int] = []
        total = 0
        sides = 2 if self.emulation is None else 3
        for i in indices:
            size = sides * self.estimate(self.checkpoints[i].tensor)
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
        self.guessed.add(name)
        return max(self.nbytes.values(), default=0)

    def record(self, i: int, sample: int, name: str, ref: "np.ndarray | None", got: "np.ndarray | None",
               emulated: "np.ndarray | None" = None) -> None:
        if ref is None or got is None:
            side = "reference" if ref is None else "candidate"
            metrics = {"shape": None, "passed": False, "error": f"the {side} did not show '{name}'"}
        else:
            metrics = compare_checkpoint(self.tol, name, ref, got, emulated)
            self.nbytes[name] = max(int(getattr(ref, "nbytes", 0)), int(getattr(got, "nbytes", 0)))
            self.guessed.discard(name)
        metrics["sample"] = sample
        self.merged[i] = merge(self.merged.get(i), metrics) if i in self.merged else dict(metrics)
        if i not in self.worst or _badness(metrics) > _badness(self.worst[i]):
            self.worst[i] = metrics

    # -- the answer ---------------------------------------------------------------------------------------
    def answer(self, i: int, inputs_ok: bool) -> dict:
        cp = self.checkpoints[i]
        return {"node": cp.node, "op": cp.op, "output": cp.tensor, "source": cp.source,
                "error": self.worst[i], "inputs_ok": inputs_ok or self.crossed is not None}

    def jumped(self, i: int) -> str:
        """Words for an answer past rounding drift: where the drift crossed, and how far the error jumped at ``i``."""
        c, here = self.checkpoints[self.crossed], self.level(i)
        inherited = max((self.level(j) for j in self.inputs_of(i) if j in self.merged), default=0.0)
        size = "NaN/inf" if math.isinf(here) else f"{here:.3g}x its tolerance"
        return (f"'{c.tensor}' (node '{c.node}') is the earliest out of tolerance ({self.level(self.crossed):.1f}x) "
                "but only by rounding drift, its inputs already near theirs; the error jumps at "
                f"'{self.checkpoints[i].tensor}': {size} from inputs at most {inherited:.2g}x theirs")

    def drift(self, i: int, inputs: list[int]) -> str | None:
        """Words when the error crept up to checkpoint ``i`` (its inputs already near their tolerance, ``i`` just
        past it) rather than one op introducing it: accumulated rounding, typically in fp16."""
        here = None if math.isinf(self.level(i)) else _over(self.worst[i])
        near = [r for r in (_over(self.worst[j]) for j in inputs) if r is not None]
        if here is None or here > DRIFT_OVER or not near or max(near) < DRIFT_NEAR:
            return None
        return (f"'{self.checkpoints[i].tensor}' is {here:.1f}x its tolerance while its inputs are already at "
                f"{max(near):.0%} of theirs: the error accumulates (rounding drift) and crosses the tolerance here "
                "rather than this op introducing it")

    def kept(self) -> list[int]:
        """The compared checkpoints the trace keeps: all of them when few, else those around the answer, the first
        step's, the answer's inputs, those a bisection looked at and an even spread of the rest."""
        done = sorted(self.merged)
        if len(done) <= TRACE_SPREAD + 2 * TRACE_AROUND + 1:
            return done
        keep = set(self.first_step)
        if self.crossed is not None:
            keep.add(self.crossed)
        if self.mode == "bisect":
            keep |= {i for i, step in self.step_of.items()}
        if self.answer_at is not None and self.answer_at in self.merged:
            at = done.index(self.answer_at)
            keep |= set(done[max(at - TRACE_AROUND, 0):at + TRACE_AROUND + 1])
            keep |= {j for j in self.inputs_of(self.answer_at) if j in self.merged}
        step = (len(done) - 1) / max(TRACE_SPREAD - 1, 1)
        keep |= {done[round(k * step)] for k in range(TRACE_SPREAD)}
        return sorted(keep)

    def trace(self) -> list[dict]:
        out = []
        for i in self.kept():
            cp, m = self.checkpoints[i], self.merged[i]
            entry = {"node": cp.node, "output": cp.tensor, "max_abs": m.get("max_abs"), "max_rel": m.get("max_rel"),
                     "cosine": m.get("cosine"), "passed": bool(m["passed"]), "index": i, "step": self.step_of.get(i)}
            over = _over(self.worst[i])  # the worst sample's error over the tolerance that sample was held to
            if over is not None:
                entry["over_tolerance"] = round(over, 4)
            if m.get("nonfinite_output") or m.get("nonfinite_reference"):  # the figures above are finite-only
                entry["nonfinite_output"] = int(m.get("nonfinite_output") or 0)
                entry["nonfinite_reference"] = int(m.get("nonfinite_reference") or 0)
                entry["values"] = math.prod(m.get("shape") or ())
            if "error" in m:
                entry["error"] = m["error"]
            elif m.get("reason"):
                entry["error"] = m["reason"]
            out.append(entry)
        return out


def _over(m: Mapping) -> float | None:
    """How far the finite errors are into what the tensor was held to (``over_budget`` under the emulation's
    budget, else ``required_atol / atol``: above 1 fails); None where the comparison failed on shape, dtype or
    non-finite values."""
    if "over_budget" in m:
        ratio = m["over_budget"]
    elif "error" in m or "required_atol" not in m or not m.get("atol"):
        return None
    else:
        ratio = m["required_atol"] / m["atol"]
    return None if not m["passed"] and ratio <= 1 else ratio


def _badness(m: Mapping) -> tuple:
    """Order samples' metrics: failed before passed, then by how far past the tolerance (an error string first)."""
    if "error" in m:
        return (1, math.inf)
    need = m["over_budget"] if "over_budget" in m else m.get("required_atol", 0.0) / max(m.get("atol", 0.0), 1e-30)
    return (0 if m.get("passed") else 1, need + m.get("nan_mismatch", 0) + m.get("mismatch_fraction", 0.0))
