"""Localization consistent with the verdict (issue 29): the first divergent node is the earliest out of tolerance
with its inputs within tolerance, on any sample, even where the difference is wiped out downstream; a node the fp16
range check named is where the search starts (never "no divergent node" after it); fp16 ONNX models localize;
rows with NaN/inf say how many values are not finite; the hop's tolerance record as the search reads it."""
from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge import renderers
from onnxbridge.localize import hops as localizing
from onnxbridge.localize.bisect import localize, suspecting
from onnxbridge.localize.onnx_probe import OnnxProbe, localize_onnx_pair, onnx_checkpoints, prefix_model, value_types
from onnxbridge.localize.probe import Checkpoint
from onnxbridge.report import failure_summary, localization_summary, nonfinite_text, trace_cells
from onnxbridge.specs import Sample
from onnxbridge.validation import Tolerance
from tests.conftest import check_report
from tests.helpers.extras import require

FP32 = Tolerance.for_precision("fp32")
D = 16


# --- a divergence wiped out downstream ------------------------------------------------------------------------

def wiped_chain(*, add5: float = -100.0, add900: float = 0.5, gate: str = "relu", n: int = 40) -> onnx.ModelProto:
    """x -> add0 .. add{n-1} (each + its constant) with node ``add5`` (+ ``add5``, far below zero) followed by a
    ``gate`` that wipes whatever add5 made (Relu: both sides 0; Mul by zero; Max with -50: both sides -50), and
    node ``add900`` near the end adding ``add900``. The candidate changes add5's constant (out of tolerance, its
    inputs in tolerance, hidden by the gate) and add900's (which the outputs show)."""
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        name = "add900" if i == n - 4 else f"add{i}"
        value = add5 if i == 5 else add900 if name == "add900" else 0.01 * i
        inits.append(numpy_helper.from_array(np.full((D,), value, np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [f"t_{name}"], name=name))
        prev = f"t_{name}"
        if i == 5:
            if gate == "relu":
                nodes.append(helper.make_node("Relu", [prev], ["gated"], name="gate"))
            elif gate == "zero":
                inits.append(numpy_helper.from_array(np.zeros((D,), np.float32), "zero"))
                nodes.append(helper.make_node("Mul", [prev, "zero"], ["gated"], name="gate"))
            else:
                inits.append(numpy_helper.from_array(np.full((D,), -50.0, np.float32), "floor"))
                nodes.append(helper.make_node("Max", [prev, "floor"], ["gated"], name="gate"))
            inits.append(numpy_helper.from_array(np.ones((D,), np.float32), "one"))
            nodes.append(helper.make_node("Add", ["gated", "one"], ["restart"], name="restart"))
            prev = "restart"
    nodes.append(helper.make_node("Neg", [prev], ["y"], name="head"))
    graph = helper.make_graph(nodes, "wiped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, D])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def xs(k: int = 2, scale: float = 1.0) -> list[Sample]:
    return [Sample({"x": (np.random.default_rng(s).standard_normal((2, D)) * scale).astype(np.float32)})
            for s in range(k)]


@pytest.mark.parametrize("gate", ["relu", "zero", "max"])
def test_a_divergence_wiped_out_downstream_is_named_not_the_later_one(tmp_path, gate):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(wiped_chain(gate=gate), a)
    onnx.save(wiped_chain(gate=gate, add5=-99.0, add900=0.7), b)
    rep = onnxbridge.validate(a, b, localize="on", report=tmp_path / "r.json")
    check_report(tmp_path / "r.json")
    hop = rep["hops"][0]
    assert hop["status"] == "failed"
    loc = hop["localization"]
    first = loc["first_divergent"]
    assert (first["node"], first["output"], first["inputs_ok"]) == ("add5", "t_add5", True), loc
    passed = {t["output"]: t["passed"] for t in loc["trace"]}
    assert passed["t_add5"] is False and passed["restart"] is True  # wiped out, then back in tolerance
    assert "hidden again downstream" not in loc["method"]  # the outputs do differ (add900)
    assert "first divergent node: add5" in failure_summary(rep)
    # a search that assumes "once broken, stays broken" lands on the later divergence: the scan is what finds add5
    bisected = localize(OnnxProbe(a), OnnxProbe(b), onnx_checkpoints(onnx.load(a)), xs(), FP32, method="pair",
                        scan_runs=0)
    assert bisected["first_divergent"]["node"] == "add900" and "can be missed" in bisected["method"]


def test_only_one_sample_shows_the_divergence_and_it_is_not_the_first():
    """add5 is Max(prev, t): the candidate's t only matters where prev < t, which only the second sample has."""
    def model(threshold: float) -> onnx.ModelProto:
        m = wiped_chain()
        for node in m.graph.node:
            if node.name == "add5":
                node.op_type = "Max"
        for t in m.graph.initializer:
            if t.name == "c5":
                t.CopyFrom(numpy_helper.from_array(np.full((D,), threshold, np.float32), "c5"))
        return m

    samples = [Sample({"x": np.full((2, D), 5.0, np.float32)}), Sample({"x": np.full((2, D), -5.0, np.float32)}),
               Sample({"x": np.full((2, D), 4.0, np.float32)})]
    out = localize_onnx_pair(model(-10.0), model(0.0), samples, FP32)
    first = out["first_divergent"]
    assert first["node"] == "add5" and first["error"]["sample"] == 1, out
    assert first["inputs_ok"] is True


def test_the_scan_keeps_the_memory_bound_and_says_when_it_bisects():
    """Tensors of 1 MiB: a 5 MiB budget holds two a side per run; where the scan would take more than
    ``scan_runs`` runs, bisection runs and the method says a hidden divergence can be missed."""
    big = 1 << 18

    class Probe:
        def __init__(self, bump):
            self.bump, self.what, self.runs, self.asked = bump, "arrays", 0, []

        def tensors(self, names, feeds):
            self.runs += 1
            self.asked.append(list(names))
            return {n: np.full((big,), 1.0, np.float32) + self.bump(int(n[1:])) for n in names}

    chain = [Checkpoint(f"t{i}", f"node{i}", "Add", (f"t{i - 1}",) if i else ("x",)) for i in range(40)]
    hidden = {7: 1.0, 30: 1.0}  # 7 hidden again at 8, 30 stays
    cand = Probe(lambda i: hidden.get(i, 0.0) if i < 30 else 1.0)
    out = localize(Probe(lambda i: 0.0), cand, chain, xs(1), FP32, method="arrays", budget_bytes=5 * 2**20,
                   scan_runs=40)
    assert out["first_divergent"]["node"] == "node7"
    assert max(len(a) for a in cand.asked[1:]) <= 2  # the first run learns the size
    assert "every checkpoint up to the first divergent" in out["method"]
    cand = Probe(lambda i: hidden.get(i, 0.0) if i < 30 else 1.0)
    out = localize(Probe(lambda i: 0.0), cand, chain, xs(1), FP32, method="arrays", budget_bytes=5 * 2**20,
                   scan_runs=4)
    assert "bisection" in out["method"] and "can be missed" in out["method"]
    assert max(len(a) for a in cand.asked[1:]) <= 2


def test_a_passed_hop_names_no_first_divergent_node_and_says_why(tmp_path):
    """The difference at add5 never reaches the outputs: the hop passes, and its localization (on) agrees."""
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(wiped_chain(), a)
    onnx.save(wiped_chain(add5=-99.0), b)
    rep = onnxbridge.validate(a, b, localize="on")
    hop = rep["hops"][0]
    assert hop["status"] == "passed"
    loc = hop["localization"]
    assert loc["first_divergent"] is None and "'t_add5'" in loc["method"] and "outputs pass" in loc["method"]
    assert "found no divergent node" in localization_summary(hop)


# --- the fp16 range check's node ------------------------------------------------------------------------------

OVERFLOW = '''
import torch
from torch import nn


class Overflow(nn.Module):
    """relu(h * 60000) / 60000: exact in fp32; h * 60000 leaves fp16's range (65504) once |h| > 1.09."""

    def forward(self, h):
        return torch.relu(h * 60000) / 60000


def overflow():
    torch.manual_seed(0)
    return Overflow().eval(), (torch.rand(2, 8) * 6 - 3,)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def small():
    torch.manual_seed(0)
    return Small().eval(), (torch.randn(1, 3, 8, 8),)
'''


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    require("torch")
    path = tmp_path_factory.mktemp("consistency") / "consistency_models.py"
    path.write_text(OVERFLOW)
    return str(path)


def _fp16_noted(rep: dict) -> list[dict]:
    return [h for h in rep["hops"] if localizing.suspects_of(h)]


def test_the_node_the_fp16_range_check_named_is_the_first_divergent(factories, tmp_path):
    res = onnxbridge.convert(f"{factories}:overflow", output=tmp_path / "o.onnx", precision="fp16", localize="on",
                             report=tmp_path / "r.json")
    check_report(tmp_path / "r.json")
    noted = _fp16_noted(res.report)
    assert noted, res.report["hops"]
    for hop in noted:
        named = localizing.suspects_of(hop)[0]
        loc = hop["localization"]
        if "skipped" in loc:  # a frontend with nothing to map (a module without submodules) says why
            continue
        first = loc["first_divergent"]
        assert first is not None and first["node"] == named["node"], loc
        assert "found no divergent node" not in localization_summary(hop)
        assert "values where the reference is finite" in localization_summary(hop)  # inf values counted
    assert any("skipped" not in h["localization"] for h in noted)


def _attach(hop: dict, make) -> dict:
    """``hop`` (a report's record) as the spine's Hop, localized by ``make``: its localization block."""
    from onnxbridge.records import Hop, HopKind, OutputComparison

    typed = Hop(hop["from"], hop["to"], HopKind.PRECISION, hop["status"], 1, [], copy.deepcopy(hop["tolerance"]),
                [OutputComparison(o["name"], o["passed"]) for o in hop["outputs"]], list(hop["errors"]),
                list(hop["notes"]))
    localizing.attach(typed, "on", make)
    return typed.localization


NOTE = "fp16: node 'mul_node' (Mul) made inf in 'mul_out' from finite inputs: the intermediate left fp16's range"


def _hop(**extra) -> dict:
    return {"from": "onnx", "to": "onnx:fp16", "status": "failed", "outputs": [{"name": "y", "passed": False}],
            "errors": [NOTE], "notes": [], "tolerance": {"precision": "fp16", "atol": 1e-2, "rtol": 1e-2}, **extra}


def _ones(i, s=0):
    return np.ones(4, np.float32)


class Arrays:
    def __init__(self, value):
        self.value, self.what, self.runs, self.asked = value, "arrays", 0, []

    def tensors(self, names, feeds):
        self.runs += 1
        self.asked.append(list(names))
        return {n: self.value(n) for n in names}


def test_a_suspect_no_probe_shows_is_the_answer_not_no_divergent_node():
    """Nothing the probes show diverges (the overflow is inside a unit they see as a whole, or wiped out where
    they cannot look): the range check's node is named, with its words."""
    checkpoints = [Checkpoint(f"t{i}", f"n{i}", "Add", (f"t{i - 1}",) if i else ("x",)) for i in range(6)]
    loc = _attach(_hop(), lambda: localize(Arrays(lambda n: _ones(0)), Arrays(lambda n: _ones(0)), checkpoints,
                                           xs(1), FP32, method="arrays"))
    first = loc["first_divergent"]
    assert (first["node"], first["op"], first["output"]) == ("mul_node", "Mul", "mul_out") and first["named_by"]
    line = localization_summary(_hop(localization=loc))
    assert "first divergent node: mul_node" in line and "found no divergent node" not in line
    assert "left fp16's range" not in line or "made inf" in line


def test_a_suspect_is_compared_first_and_is_the_answer_when_its_inputs_agree():
    checkpoints = [Checkpoint(f"t{i}", f"n{i}", "Add", (f"t{i - 1}",) if i else ("x",)) for i in range(30)]
    checkpoints[20] = Checkpoint("mul_out", "mul_node", "Mul", ("t19",))

    def cand(name):
        return _ones(0) * (np.inf if name == "mul_out" else 1.0)

    candidate = Arrays(cand)
    loc = _attach(_hop(), lambda: localize(Arrays(lambda n: _ones(0)), candidate, checkpoints, xs(1), FP32,
                                           method="arrays", scan_runs=0))
    assert {"mul_out", "t19"} <= set(candidate.asked[0])  # the search starts at the suspect and its inputs
    assert loc["first_divergent"]["node"] == "mul_node" and loc["first_divergent"]["inputs_ok"] is True
    # without a hop in scope, the explicit argument does the same
    with suspecting([{"node": "mul_node", "tensor": "mul_out", "note": NOTE}]):
        out = localize(Arrays(lambda n: _ones(0)), Arrays(cand), checkpoints, xs(1), FP32, method="arrays")
    assert out["first_divergent"]["output"] == "mul_out" and "named_by" in out["first_divergent"]


# --- fp16 ONNX models localize (prefix models load) -----------------------------------------------------------

@pytest.mark.slow
def test_prefix_models_of_an_fp16_graph_declare_their_outputs_fp16(factories, tmp_path):
    """The fp16 export's Reshape reads a shape initializer: inference on a graph whose initializers had no values
    stopped there and every later tensor was declared float, which onnxruntime refused to load."""
    res = onnxbridge.convert(f"{factories}:small", output=tmp_path / "s.onnx", precision="fp16", localize="on",
                             report=tmp_path / "r.json")
    check_report(tmp_path / "r.json")
    localized = [h for h in res.report["hops"] if "localization" in h]
    assert localized
    for hop in localized:
        assert "skipped" not in hop["localization"], hop["localization"]
        assert hop["localization"]["first_divergent"] is None or hop["status"] == "failed"
    model = onnx.load(tmp_path / "s.onnx")
    types = value_types(model)
    half = [cp.tensor for cp in onnx_checkpoints(model) if types[cp.tensor][0] == TensorProto.FLOAT16]
    assert "output__fp16" in half or any(n.op_type == "Reshape" for n in model.graph.node)
    last = [n for n in model.graph.node if n.op_type == "Gemm"][0].output[0]
    out = {o.name: o.type.tensor_type.elem_type for o in prefix_model(model, [last], types).graph.output}
    assert out[last] == TensorProto.FLOAT16
    probe = OnnxProbe(tmp_path / "s.onnx")
    got = probe.tensors([cp.tensor for cp in onnx_checkpoints(model)],
                        {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)})
    assert got[last].dtype == np.float16


# --- NaN/inf in the trace and the summary ---------------------------------------------------------------------

def _nan_pair(tmp_path):
    """b.onnx takes Sqrt of a negative: NaN in every value of ``s`` and everything after it."""
    def model(shift: float) -> onnx.ModelProto:
        nodes = [helper.make_node("Add", ["x", "k"], ["a"], name="shift"),
                 helper.make_node("Sqrt", ["a"], ["s"], name="root"),
                 helper.make_node("Neg", ["s"], ["y"], name="neg")]
        graph = helper.make_graph(nodes, "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                                  [numpy_helper.from_array(np.full((8,), shift, np.float32), "k")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    onnx.save(model(10.0), tmp_path / "a.onnx")
    onnx.save(model(-100.0), tmp_path / "b.onnx")
    return tmp_path / "a.onnx", tmp_path / "b.onnx"


def test_rows_with_nan_say_how_many_values_are_not_finite(tmp_path):
    a, b = _nan_pair(tmp_path)
    rep = onnxbridge.validate(a, b, localize="on")
    hop = rep["hops"][0]
    loc = hop["localization"]
    assert loc["first_divergent"]["node"] == "shift"  # a = x - 100 is out of tolerance before the NaN
    nan_rows = [t for t in loc["trace"] if t["output"] in ("s", "y")]
    assert nan_rows and all(t["nonfinite_output"] == 16 and t["values"] == 16 for t in nan_rows)
    assert all(t["max_abs"] == 0.0 for t in nan_rows)  # what the finite-only figures say: nothing to compare
    for t in nan_rows:
        assert trace_cells(t) == ("NaN/inf in 16 of 16 values", "-", "-")
    md = renderers.render(rep, "markdown")
    row = next(line for line in md.splitlines() if "`root`" in line)
    assert "NaN/inf in 16 of 16 values" in row and "1.000000" not in row and "| 0 |" not in row
    html = renderers.render(rep, "html")
    assert "NaN/inf in 16 of 16 values" in html
    junit = renderers.render(rep, "junit")
    line = next(x for x in junit.splitlines() if "root -&gt; s" in x or "root -> s" in x)
    assert "NaN/inf in 16 of 16 values" in line and "cosine 1.0" not in line


def test_the_summary_counts_the_values_that_are_not_finite():
    hop = {"from": "onnx", "to": "onnx", "localization": {
        "first_divergent": {"node": "root", "op": "Sqrt", "output": "s", "source": None, "inputs_ok": True,
                            "error": {"shape": [2, 8], "max_abs": 0.0, "cosine": 1.0, "nonfinite_output": 16,
                                      "nonfinite_reference": 0, "passed": False,
                                      "reason": "NaN in 16 of 16 values where the reference has numbers"}},
        "trace": [], "method": "m", "runs": 1, "seconds": 0.1}}
    line = localization_summary(hop)
    assert "NaN in 16 of 16 values" in line and "max_abs 0" not in line
    hop["localization"]["first_divergent"]["error"].update(max_abs=30.0, reason=None, nonfinite_output=4)
    line = localization_summary(hop)
    assert "NaN/inf in 4 of 16 values" in line and "finite values: max_abs 3.0e+01" in line
    assert nonfinite_text({"nonfinite_output": 0, "nonfinite_reference": 3, "values": 8}) == \
        "NaN/inf in 3 of 8 reference values"
    assert nonfinite_text({"nonfinite_output": 0, "nonfinite_reference": 0}) is None


# --- the tolerance a localization uses ------------------------------------------------------------------------

@pytest.mark.parametrize("record, expected", [
    ({"precision": "fp16", "rule": "fp16-emulation", "reason": "r", "atol": 0.02, "rtol": 0.03, "factor": 4.0,
      "floor": 0.000488}, (0.02, 0.03, "fp16")),
    ({"precision": "fp16", "rule": "fp16-emulation", "reason": "r", "factor": 4.0}, (1e-2, 1e-2, "fp16")),
    ({"precision": "int8", "rule": "int8-agreement", "reason": "snr"}, (5e-2, 5e-2, "int8")),
    ({"precision": "fp32", "rule": "fp32", "atol": 1e-4, "rtol": 1e-3}, (1e-4, 1e-3, "fp32")),
    ({"precision": "bf16", "rule": "fixed"}, (1e-4, 1e-3, "fp32")),
    ({}, (1e-4, 1e-3, "fp32")),
])
def test_tolerance_of_reads_the_hop_record(record, expected):
    tol = localizing.tolerance_of({"tolerance": record})
    assert (tol.atol, tol.rtol, tol.precision) == expected


def test_tolerance_of_keeps_per_output_overrides():
    tol = localizing.tolerance_of({"tolerance": {"precision": "fp32", "rule": "user", "atol": 1e-3, "rtol": 1e-3,
                                                 "per_output": {"logits": {"atol": 0.5}}}})
    assert tol.for_output("logits") == (0.5, 1e-3) and tol.for_output("other") == (1e-3, 1e-3)
