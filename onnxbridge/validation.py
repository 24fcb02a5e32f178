"""Hop validation: run a reference and a candidate on the same samples and compare every output."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from onnxbridge.compare import TOLERANCES, compare, merge
from onnxbridge.errors import BadInputError
from onnxbridge.specs import Sample

Runner = Callable[[Mapping[str, Any]], list]  # named inputs -> outputs in order


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    precision: str = "fp32"

    @classmethod
    def for_precision(cls, precision: str = "fp32", atol: float | None = None, rtol: float | None = None):
        if precision not in TOLERANCES:
            raise BadInputError(f"unknown precision '{precision}'; known: {', '.join(TOLERANCES)}")
        a, r = TOLERANCES[precision]
        return cls(a if atol is None else atol, r if rtol is None else rtol, precision)

    def as_dict(self) -> dict:
        return {"precision": self.precision, "atol": self.atol, "rtol": self.rtol}


def validate_hop(src: str, dst: str, reference: Runner, candidate: Runner, samples: Sequence[Sample],
                 output_names: Sequence[str], tol: Tolerance) -> dict:
    """Compare ``candidate`` with ``reference`` on every sample; the hop record for the report.

    A sample the reference cannot run (e.g. a grown dynamic axis the source model does not accept)
    is skipped with a note; a sample only the candidate cannot run fails the hop.
    """
    outputs: dict[str, dict] = {}
    notes: list[str] = []
    errors: list[str] = []
    ran = 0
    t_ref = t_cand = 0.0
    for i, sample in enumerate(samples):
        t0 = time.perf_counter()
        try:
            ref = reference(sample.feeds)
        except Exception as exc:
            if i == 0:
                raise BadInputError(f"{src} model fails on the validation inputs {sample.shapes()}: "
                                    f"{' '.join(str(exc).split())[:300]}") from None
            notes.append(f"sample {i} ({sample.origin}) skipped: {src} does not run at {sample.shapes()}")
            continue
        t1 = time.perf_counter()
        try:
            got = candidate(sample.feeds)
        except Exception as exc:
            errors.append(f"{dst} fails at input shapes {sample.shapes()} where {src} runs: "
                          f"{' '.join(str(exc).split())[:300]}")
            continue
        t2 = time.perf_counter()
        t_ref, t_cand, ran = t_ref + (t1 - t0), t_cand + (t2 - t1), ran + 1
        if len(ref) != len(got):
            errors.append(f"{dst} has {len(got)} outputs, {src} has {len(ref)}")
            continue
        names = list(output_names) if len(output_names) == len(got) else [f"output_{k}" for k in range(len(got))]
        for name, r, g in zip(names, ref, got):
            outputs[name] = merge(outputs.get(name), compare(r, g, atol=tol.atol, rtol=tol.rtol))
    passed = not errors and ran > 0 and all(o["passed"] for o in outputs.values())
    return {
        "from": src, "to": dst, "status": "passed" if passed else "failed", "passed": passed,
        "samples": ran, "sample_shapes": [s.shapes() for s in samples],
        "tolerance": tol.as_dict(),
        "outputs": [{"name": k, **v} for k, v in outputs.items()],
        "errors": errors, "notes": notes,
        "latency_s": {src: t_ref / ran if ran else None, dst: t_cand / ran if ran else None},
    }
