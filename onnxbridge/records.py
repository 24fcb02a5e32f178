"""What a hop found, typed: ``Hop`` (one comparison between two sides of a run), its ``OutputComparison`` per
output, and ``HopKind`` (which step of the journey the hop checks). The spine and localization work on these; the
report holds ``Hop.to_dict()`` (docs/report-schema.md, ``hops[]``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypedDict


class HopKind(str, Enum):
    """Which step a hop checks (``hops[].kind``): the source against the first model (``source``), the exporter's
    model against the adapted one (``adapters``), the graph before ``--optimize`` against the optimized one
    (``optimizer``), the fp32 graph against the reduced-precision file (``precision``), the ONNX model against a
    backend's artifact (``backend``; with ``--split-tail``, the head it was built from), and the source against the
    artifact feeding onnxruntime on the tail it could not take (``pipeline``, ``--split-tail``)."""

    SOURCE = "source"
    ADAPTERS = "adapters"
    OPTIMIZER = "optimizer"
    PRECISION = "precision"
    BACKEND = "backend"
    PIPELINE = "pipeline"


class Metrics(TypedDict, total=False):
    """What ``compare.compare`` measures of one output pair and ``validation.judge`` adds (docs/report-schema.md,
    ``outputs[]``): the keys present depend on the output's kind (numeric, exact, string...)."""

    kind: str
    shape: list
    dtype: str
    reference_shape: list
    reference_dtype: str
    max_abs: float
    max_rel: float
    mean_abs: float
    cosine: float | None
    snr_db: float | None
    rel_rms: float | None
    scale: float
    mismatch_fraction: float
    required_atol: float
    atol: float
    rtol: float
    top1_agreement: float
    top5_agreement: float
    error_histogram: dict
    nan_mismatch: int
    nonfinite_reference: int
    nonfinite_output: int
    budget: dict
    failed_check: str
    reason: str
    error: str


@dataclass
class OutputComparison:
    """One output of a hop over every sample it ran: ``passed`` and the ``metrics`` measured (merged across
    samples: the worst of each)."""

    name: str
    passed: bool
    metrics: Metrics = field(default_factory=dict)  # type: ignore[assignment]

    @classmethod
    def from_judged(cls, name: str, judged: dict) -> "OutputComparison":
        """From ``validation.judge``'s (merged) dict."""
        metrics = {k: v for k, v in judged.items() if k != "passed"}
        return cls(name, bool(judged["passed"]), metrics)  # type: ignore[arg-type]

    def to_dict(self) -> dict:
        return {"name": self.name, **self.metrics, "passed": self.passed}


@dataclass
class Hop:
    """One hop: ``src`` -> ``dst`` (the report's ``from``/``to``, e.g. ``torch -> onnx``, ``onnx@18 -> onnx@13``,
    ``onnx -> qnn-htp-simulator``), of ``kind``, judged by ``tolerance`` (``validation.Tolerance.as_dict()``).

    ``status`` is passed, failed or skipped; a hop that did not run here is skipped (``skipped_reason``), never
    passed. ``samples``: how many samples both sides ran; ``sample_shapes``: the samples it was given.
    ``artifact_checked``: "executed" (the artifact's numbers), "structure" (failed before running), "not run", or
    what the runner says it checked. Set after the comparison: ``dynamic_axes`` (the second size the first hop ran
    at), ``localization`` (the first diverging node)."""

    src: str
    dst: str
    kind: HopKind
    status: str
    samples: int
    sample_shapes: list
    tolerance: dict
    outputs: list[OutputComparison] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    latency_s: dict = field(default_factory=dict)
    latency_method: str | None = None
    seconds: dict = field(default_factory=dict)
    runtimes: dict = field(default_factory=dict)
    artifact_checked: str = "executed"
    artifact_check: Any = None
    vs_source: dict | None = None
    skipped_reason: str | None = None
    dynamic_axes: dict | None = None
    localization: dict | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def fail(self, *errors: str) -> None:
        """Add ``errors``; any error fails the hop."""
        self.errors += errors
        if self.errors:
            self.status = "failed"

    def skip(self, reason: str) -> None:
        """The hop did not check what it must (it did not run here, or ran too little): skipped, saying why."""
        self.status, self.skipped_reason = "skipped", reason

    def to_dict(self) -> dict:
        """The report's record (``hops[]``)."""
        out = {"from": self.src, "to": self.dst, "kind": self.kind.value, "status": self.status,
               "passed": self.passed, "samples": self.samples, "sample_shapes": self.sample_shapes,
               "tolerance": self.tolerance, "outputs": [o.to_dict() for o in self.outputs], "errors": self.errors,
               "notes": self.notes, "latency_s": self.latency_s, "seconds": self.seconds, "runtimes": self.runtimes,
               "artifact_checked": self.artifact_checked}
        optional = {"latency_method": self.latency_method, "artifact_check": self.artifact_check,
                    "vs_source": self.vs_source, "skipped_reason": self.skipped_reason,
                    "dynamic_axes": self.dynamic_axes, "localization": self.localization}
        out.update({k: v for k, v in optional.items() if v is not None})
        return out
