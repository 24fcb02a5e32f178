"""The bisection engine on probes made of arrays: steps, inputs_ok, samples, mismatches, budget, tolerances."""
from __future__ import annotations

import math

import numpy as np
import pytest

from onnxbridge.localize.bisect import localize
from onnxbridge.localize.probe import Checkpoint, Probe
from onnxbridge.localize.tolerance import checkpoint_tolerance
from onnxbridge.specs import Sample
from onnxbridge.validation import Tolerance

FP32 = Tolerance.for_precision("fp32")


class ArrayProbe:
    """A side whose checkpoint i on sample s is ``value(i, s)``; records what each run asked for."""

    def __init__(self, value, what: str = "arrays"):
        self.value, self.what, self.runs, self.asked = value, what, 0, []

    def tensors(self, names, feeds):
        self.runs += 1
        self.asked.append(list(names))
        s = int(feeds["s"][0])
        return {n: self.value(int(n[1:]), s) for n in names}


def chain(n: int, skip: dict[int, int] | None = None) -> list[Checkpoint]:
    skip = skip or {}
    return [Checkpoint(f"t{i}", f"node{i}", "Add", ((f"t{i - 1}",) if i else ("x",)) +
                       ((f"t{skip[i]}",) if i in skip else ())) for i in range(n)]


def samples(k: int = 2) -> list[Sample]:
    return [Sample({"s": np.array([s])}) for s in range(k)]


def good(i, s):
    return np.full((4,), float(i % 5 + s), np.float32)


def bad_from(first: int, also: tuple[int, ...] = (), sample: int | None = None):
    def value(i, s):
        v = good(i, s)
        if (i >= first or i in also) and (sample is None or s == sample):
            v = v + 1.0
        return v
    return value


@pytest.mark.parametrize("first", [0, 1, 613, 998, 999])
def test_finds_the_first_bad_checkpoint_in_log_steps(first):
    """Bisection (what runs when an ordered scan would take more than ``scan_runs`` runs)."""
    n = 1000
    ref, cand = ArrayProbe(good), ArrayProbe(bad_from(first))
    out = localize(ref, cand, chain(n), samples(2), FP32, method="arrays", scan_runs=0)
    assert "bisection" in out["method"] and "can be missed" in out["method"]
    assert out["first_divergent"]["node"] == f"node{first}"
    assert out["first_divergent"]["inputs_ok"] is True
    assert out["runs"] <= 2 + math.ceil(math.log(n, 4))
    assert cand.runs == out["runs"] * 2  # each run of the search: once per sample
    assert max(len(a) for a in cand.asked) <= 4
    idx = [t["index"] for t in out["trace"]]
    assert idx == sorted(idx) and len(out["trace"]) < 30
    assert {t["output"] for t in out["trace"] if not t["passed"]} >= {f"t{first}"}


@pytest.mark.parametrize("first", [0, 1, 613, 999])
def test_the_ordered_scan_compares_everything_before_the_answer_in_few_runs(first):
    n = 1000
    ref, cand = ArrayProbe(good), ArrayProbe(bad_from(first))
    out = localize(ref, cand, chain(n), samples(2), FP32, method="arrays")
    assert out["first_divergent"]["node"] == f"node{first}" and out["first_divergent"]["inputs_ok"] is True
    assert "every checkpoint up to the first divergent compared" in out["method"]
    # a first run learns the sizes (the array probes estimate none), the next holds all that fits the budget
    assert out["runs"] <= 2 and cand.runs == out["runs"] * 2
    seen = {name for names in cand.asked for name in names}
    assert {f"t{i}" for i in range(first + 1)} <= seen and out["compared"] >= first + 1
    idx = [t["index"] for t in out["trace"]]
    assert idx == sorted(idx) and len(out["trace"]) <= 60 and first in idx


@pytest.mark.parametrize("scan_runs", [0, 16])
def test_an_input_out_of_tolerance_sends_the_search_earlier(scan_runs):
    """The error appears at 300, hides, and is visible again from 700 on, where node 700 reads t300."""
    ref, cand = ArrayProbe(good), ArrayProbe(bad_from(700, also=(300,)))
    out = localize(ref, cand, chain(1000, skip={700: 300}), samples(1), FP32, method="arrays", scan_runs=scan_runs)
    assert out["first_divergent"]["node"] == "node300"
    assert out["first_divergent"]["inputs_ok"] is True
    if scan_runs == 0:  # the bisection saw 700 first and walked back through its inputs
        assert any(t["output"] == "t700" and not t["passed"] for t in out["trace"])


def test_a_divergence_on_one_sample_counts():
    ref, cand = ArrayProbe(good), ArrayProbe(bad_from(40, sample=2))
    out = localize(ref, cand, chain(100), samples(3), FP32, method="arrays")
    assert out["first_divergent"]["output"] == "t40"
    assert out["first_divergent"]["error"]["sample"] == 2


def test_no_divergence_says_so():
    out = localize(ArrayProbe(good), ArrayProbe(good), chain(50), samples(), FP32, method="arrays")
    assert out["first_divergent"] is None
    assert "no checkpoint is out of tolerance" in out["method"] and "t49" in out["method"]
    assert all(t["passed"] for t in out["trace"])
    empty = localize(ArrayProbe(good), ArrayProbe(good), [], samples(), FP32, method="arrays")
    assert empty["first_divergent"] is None and "no checkpoints" in empty["method"]


def test_shape_dtype_and_integer_mismatches_diverge():
    def wrong_shape(i, s):
        return np.zeros((5,), np.float32) if i >= 7 else good(i, s)

    out = localize(ArrayProbe(good), ArrayProbe(wrong_shape), chain(20), samples(), FP32, method="arrays")
    assert out["first_divergent"]["output"] == "t7" and "shape" in out["first_divergent"]["error"]["error"]

    def ints(i, s):
        return np.arange(4, dtype=np.int64) + i

    def off_by_one(i, s):
        return ints(i, s) + (i >= 3)

    out = localize(ArrayProbe(ints), ArrayProbe(off_by_one), chain(10), samples(), FP32, method="arrays")
    assert out["first_divergent"]["output"] == "t3" and out["first_divergent"]["error"]["kind"] == "exact"

    def as_float(i, s):
        return ints(i, s).astype(np.float32) if i >= 5 else ints(i, s)

    out = localize(ArrayProbe(ints), ArrayProbe(as_float), chain(10), samples(), FP32, method="arrays")
    assert out["first_divergent"]["output"] == "t5" and "dtype" in out["first_divergent"]["error"]["error"]


def test_budget_bounds_the_tensors_asked_at_once():
    big = 1 << 18  # 1 MiB of float32 per tensor

    def value(i, s):
        return np.full((big,), 1.0, np.float32) + (i >= 123)

    ref, cand = ArrayProbe(lambda i, s: np.full((big,), 1.0, np.float32)), ArrayProbe(value)
    out = localize(ref, cand, chain(200), samples(1), FP32, method="arrays", budget_bytes=5 * 2**20)
    assert out["first_divergent"]["output"] == "t123"
    # the first run learns the size; later runs hold at most 2 tensors a side (2 sides x 2 x 1 MiB <= 5 MiB)
    assert max(len(a) for a in cand.asked[1:]) <= 2


def test_tolerance_scales_with_the_tensors_magnitude():
    big = np.array([1e4, -1e4, 0.0, 1e-3], np.float32)
    noise = np.array([0, 0, 1e-2, 0], np.float32)  # cancellation error on a near-zero element
    assert checkpoint_tolerance(FP32, "t", big, big)[0] == pytest.approx(1e-4 * np.sqrt(5e7), rel=1e-3)

    def ref_value(i, s):
        return big if i == 1 else np.ones(4, np.float32)

    def cand_value(i, s):
        return ref_value(i, s) + noise

    out = localize(ArrayProbe(ref_value), ArrayProbe(cand_value), chain(3), samples(1), FP32, method="arrays")
    assert out["first_divergent"]["output"] == "t0"  # the same error on a tensor of ones is out of tolerance
    only_big = localize(ArrayProbe(ref_value), ArrayProbe(lambda i, s: ref_value(i, s) + noise * (i == 1)),
                        chain(3), samples(1), FP32, method="arrays")
    assert only_big["first_divergent"] is None
    half = localize(ArrayProbe(good), ArrayProbe(lambda i, s: good(i, s).astype(np.float16)), chain(3), samples(1),
                    FP32, method="arrays")
    assert half["first_divergent"] is None  # fp16 tensors are held to fp16's tolerance


def test_an_error_that_creeps_up_is_called_drift():
    """Each checkpoint adds a little rounding error; the first past the tolerance is named, as drift."""
    def ones(i, s):
        return np.ones(4, np.float32)

    def creeping(i, s):
        return ones(i, s) + np.float32(1.1e-3 * (i + 1) / 500)

    out = localize(ArrayProbe(ones), ArrayProbe(creeping), chain(1000), samples(1), FP32, method="arrays")
    assert out["first_divergent"]["output"] in ("t499", "t500")
    assert "drift" in out["method"]
    assert [t["passed"] for t in out["trace"]] == [t["over_tolerance"] <= 1 for t in out["trace"]]
    sudden = localize(ArrayProbe(good), ArrayProbe(bad_from(500)), chain(1000), samples(1), FP32, method="arrays")
    assert "drift" not in sudden["method"] and sudden["first_divergent"]["output"] == "t500"


def test_array_probe_is_a_probe():
    assert isinstance(ArrayProbe(good), Probe)
