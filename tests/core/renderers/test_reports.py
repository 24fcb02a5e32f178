"""Reports a CI can trust: JUnit, Markdown and HTML renderers over the same report, per-output tolerances,
several samples, top-1 agreement, and onnxbridge.testing.assert_roundtrip."""
from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnxbridge
from onnxbridge.testing import assert_roundtrip
from tests.conftest import EXAMPLES, assert_one_line_error, check_report
from tests.helpers.extras import require, requires

FACTORY = f"{EXAMPLES}:cnn"


@pytest.fixture(scope="module")
def good_and_bad(tmp_path_factory):
    """The example CNN at opset 17, and a copy with one initializer multiplied by 1.1."""
    require("torch")
    folder = tmp_path_factory.mktemp("reports")
    good = folder / "cnn.onnx"
    assert onnxbridge.convert(FACTORY, output=good, opset=17, dynamic=["x:0:batch"]).passed
    model = onnx.load(good)
    init = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.1, init.name))
    onnx.save(model, folder / "bad.onnx")
    return good, folder / "bad.onnx"


def _renders(tmp_path, name):
    return ["--report", tmp_path / f"{name}.json", "--junit", tmp_path / f"{name}.xml",
            "--markdown", tmp_path / f"{name}.md", "--html", tmp_path / f"{name}.html"]


@requires("torch")
def test_a_correct_conversion_passes_everywhere(cli, tmp_path):
    res = cli("convert", FACTORY, "-o", tmp_path / "m.onnx", "--opset", "17", *_renders(tmp_path, "ok"))
    assert res.exit_code == 0, res.output
    assert check_report(tmp_path / "ok.json")["status"] == "passed"
    suites = ET.parse(tmp_path / "ok.xml").getroot()
    assert [s.get("name") for s in suites] == ["models:cnn / torch -> onnx"]  # model / hop
    case = suites[0].find("testcase")
    assert suites[0].get("failures") == "0" and (case.get("classname"), case.get("name")) == (
        "models:cnn.torch->onnx", "output")
    md = (tmp_path / "ok.md").read_text()
    assert "✅ passed" in md and "| torch → onnx | `output` |" in md
    html = (tmp_path / "ok.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and 'class="histogram"' in html and 'class="hops"' in html


def test_one_scaled_initializer_fails_and_every_renderer_says_where(cli, good_and_bad, tmp_path):
    _, bad = good_and_bad
    res = cli("validate", FACTORY, bad, *_renders(tmp_path, "bad"))
    assert_one_line_error(res, 1, "torch -> onnx", "output")
    rep = check_report(tmp_path / "bad.json")
    hop = rep["hops"][0]
    assert rep["status"] == "failed" and (hop["from"], hop["to"]) == ("torch", "onnx")
    out = hop["outputs"][0]
    assert not out["passed"] and len(out["error_histogram"]) == 12
    assert sum(out["error_histogram"]) == 2 * 4 * 64 * 64 + 3 * 4 * 64 * 64  # every element of both samples
    case = ET.parse(tmp_path / "bad.xml").getroot().find("testsuite/testcase")
    assert case.get("name") == "output" and case.find("failure") is not None
    assert "max abs" in case.find("failure").get("message")
    assert "❌ failed" in (tmp_path / "bad.md").read_text()
    html = (tmp_path / "bad.html").read_text()
    assert 'id="output-output"' in html and "FAIL" in html and "torch → onnx" in html


def test_per_output_tolerance(cli, good_and_bad, tmp_path):
    _, bad = good_and_bad
    res = cli("-q", "validate", FACTORY, bad, "--atol", "output:100", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["hops"][0]["tolerance"]["per_output"] == {"output": {"atol": 100.0}}
    assert rep["hops"][0]["outputs"][0]["atol"] == 100.0
    res = cli("validate", FACTORY, bad, "--atol", "logits:100")
    assert_one_line_error(res, 2, "unknown output(s) 'logits'", "the outputs are 'output'")
    assert_one_line_error(cli("validate", FACTORY, bad, "--atol", "output:x"), 2, "not a number")


def test_several_samples(good_and_bad, tmp_path):
    good, _ = good_and_bad
    rep = onnxbridge.validate(FACTORY, good, samples=3, report=tmp_path / "r.json")
    check_report(tmp_path / "r.json")
    shapes = rep["inputs"]["samples"]
    assert rep["status"] == "passed" and rep["hops"][0]["samples"] == 4  # 3 batches + the grown batch
    assert shapes[0] == shapes[1] == shapes[2] and shapes[3]["x"][0] == shapes[0]["x"][0] + 1


def test_top1_agreement_for_classifier_outputs(tmp_path):
    from onnxbridge.compare import compare

    ref = np.array([[0.1, 0.9], [0.6, 0.4]], np.float32)
    assert compare(ref, ref, atol=1e-4, rtol=0)["top1_agreement"] == 1.0
    assert compare(ref, ref[:, ::-1], atol=1e-4, rtol=0)["top1_agreement"] == 0.0
    assert "top1_agreement" not in compare(np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), atol=1, rtol=0)


@pytest.mark.slow
def test_assert_roundtrip(models, tmp_path):
    model, sample = models.cnn()
    rep = assert_roundtrip(model, sample, opset=17, dynamic={"x": {0: "batch"}}, samples=2)
    assert rep["status"] == "passed"
    with pytest.raises(AssertionError, match="torch -> onnx: output"):
        assert_roundtrip(model, sample, opset=17, atol=0.0, rtol=0.0)


def test_blocked_adaptation_renders(cli, tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("ArgMax", ["x"], ["a"], name="am", select_last_index=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("a", TensorProto.INT64, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "b.onnx")
    res = cli("adapt", tmp_path / "b.onnx", "--opset", "11", "--check", "--junit", tmp_path / "b.xml",
              "--markdown", tmp_path / "b.md")
    assert res.exit_code == 2
    assert ET.parse(tmp_path / "b.xml").getroot().find("testsuite/testcase/failure") is not None
    assert "'am' (ArgMax)" in (tmp_path / "b.md").read_text()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
@pytest.mark.slow
def test_html_opens_in_headless_chromium(cli, good_and_bad, tmp_path):
    _, bad = good_and_bad
    cli("-q", "validate", FACTORY, bad, "--html", tmp_path / "r.html")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", (tmp_path / "r.html").as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert dom.count("<rect") >= 12 and "FAIL" in dom  # the histogram bars and hop boxes were laid out
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1200,900", (tmp_path / "r.html").as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 5_000


@pytest.mark.slow
def test_the_adapters_hop_is_reported_apart(models, monkeypatch, tmp_path):
    """When the exporter's opset is adapted, a second hop compares the exporter's model with the adapted one,
    so a difference is pinned on the exporter or on the adapters."""
    import onnxbridge.adapters as adapters

    model, sample = models.cnn()
    rep = onnxbridge.convert(model, sample, output=tmp_path / "a.onnx", opset=13, exporter="dynamo").report
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "passed"),
                                                                      ("onnx@18", "onnx@13", "passed")]
    assert rep["hops"][1]["vs_source"]["passed"] and "introduced_by" not in rep
    real = adapters.adapt

    def broken(m, opset):  # an adapter bug: the output comes out scaled by 1.1
        from onnx import helper

        out = real(m, opset)
        y = out.graph.output[0].name
        for node in out.graph.node:
            node.output[:] = [f"{y}_pre" if o == y else o for o in node.output]
        out.graph.initializer.append(numpy_helper.from_array(np.array(1.1, np.float32), "scale_bug"))
        out.graph.node.append(helper.make_node("Mul", [f"{y}_pre", "scale_bug"], [y]))
        return out

    monkeypatch.setattr(adapters, "adapt", broken)
    rep = onnxbridge.convert(model, sample, output=tmp_path / "b.onnx", opset=13, exporter="dynamo",
                             report=tmp_path / "b.json").report
    check_report(tmp_path / "b.json")
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "failed"),
                                                                      ("onnx@18", "onnx@13", "failed")]
    # the adapted model is also compared with torch's own outputs (computed once), and the adapters are named
    assert not rep["hops"][1]["vs_source"]["passed"] and rep["introduced_by"] == "onnx@18 -> onnx@13"
    assert rep["hops"][1]["vs_source"]["outputs"][0]["max_abs"] == pytest.approx(
        rep["hops"][0]["outputs"][0]["max_abs"], rel=1e-3)
    from onnxbridge.renderers import render

    html = render(rep, "html")
    assert html.count("<rect") >= 4 + 24 and "onnx@18 → onnx@13" in html


def test_latency_is_a_median_after_warm_up(good_and_bad, cli, tmp_path):
    good, _ = good_and_bad
    res = cli("validate", FACTORY, good, "--latency-runs", "5", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert "latency: torch" in res.stdout
    hop = check_report(tmp_path / "r.json")["hops"][0]
    assert hop["latency_method"] == "median of 5 warm runs after a warm-up, first sample"
    assert all(v > 0 for v in hop["latency_s"].values()) and set(hop["latency_s"]) == {"torch", "onnx"}
    # a real forward of the CNN, not a cached answer (those took well under a microsecond)
    assert hop["latency_s"]["torch"] > 2e-5
    assert hop["runtimes"]["torch"].startswith("torch 2.13") and hop["runtimes"]["onnx"].startswith("onnxruntime")


@pytest.mark.slow
@requires("torch")
def test_fail_on_warning(cli, tmp_path):
    """A sample the source cannot run is skipped with a note: fine by default, a failure with --fail-on warning."""
    from onnxbridge.report import warnings_of

    rep = {"warnings": [], "hops": [{"from": "a", "to": "b", "notes": ["sample 1 skipped"], "outputs": [
        {"name": "y", "nonfinite_reference": 0, "nonfinite_output": 2, "top1_agreement": 0.5}]}]}
    assert len(warnings_of(rep)) == 3
    fixed, dynamic = tmp_path / "fixed.onnx", tmp_path / "dynamic.onnx"
    assert cli("-q", "convert", FACTORY, "-o", fixed, "--opset", "17").exit_code == 0
    assert cli("-q", "convert", FACTORY, "-o", dynamic, "--opset", "17", "--dynamic", "x:0").exit_code == 0
    assert cli("-q", "validate", FACTORY, fixed, "--fail-on", "warning").exit_code == 0  # nothing to warn about
    # the fixed-batch model as the source cannot run the grown batch the dynamic one is checked at: the dynamic
    # axis was never exercised, so the run is incomplete (exit 5), accepted with --allow-skipped, and a warning
    assert cli("-q", "validate", fixed, dynamic).exit_code == 5
    assert cli("-q", "validate", fixed, dynamic, "--allow-skipped").exit_code == 0
    res = cli("-q", "validate", fixed, dynamic, "--allow-skipped", "--fail-on", "warning")
    assert_one_line_error(res, 1, "--fail-on warning", "skipped")


@requires("torch")
def test_dynamic_ranges_are_validated_at_both_ends(tmp_path):
    rep = onnxbridge.convert(FACTORY, output=tmp_path / "r.onnx", opset=17, dynamic=["x:0:batch:1..5"]).report
    batches = [s["x"][0] for s in rep["inputs"]["samples"]]
    assert rep["status"] == "passed" and batches == [2, 3, 1, 5]  # sample, grown by one, min, max
    from onnxbridge.errors import BadInputError

    with pytest.raises(BadInputError, match="1 <= MIN <= MAX"):
        onnxbridge.convert(FACTORY, output=tmp_path / "r.onnx", dynamic=["x:0:batch:4..2"])


@pytest.mark.slow
@requires("torch")
def test_fp16_passes_with_the_fp16_policy_and_fails_with_fp32(cli, tmp_path):
    half = tmp_path / "half.onnx"
    res = cli("convert", FACTORY, "-o", half, "--opset", "17", "--precision", "fp16", "--dynamic", "x:0",
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    # each hop is judged by what it computes: the fp32 export at fp32, the fp16 graph against its fp16 emulation
    tolerances = {h["to"]: h["tolerance"] for h in rep["hops"]}
    assert rep["status"] == "passed"
    assert (tolerances["onnx"]["precision"], tolerances["onnx"]["rule"]) == ("fp32", "fp32")
    half_hop = next(t for to, t in tolerances.items() if to.endswith(":fp16"))
    assert (half_hop["precision"], half_hop["rule"]) == ("fp16", "fp16-emulation")
    model = onnx.load(half)
    assert {t.data_type for t in model.graph.initializer if t.dims} == {onnx.TensorProto.FLOAT16}
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # the interface stays fp32
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    # the fp16 file computes in fp16 whatever --precision says: judged against the fp16 emulation of the source's
    # own fp32 export; fp32 numbers asked for explicitly (--atol/--rtol) are applied as given
    res = cli("validate", FACTORY, half, "--precision", "fp32", "--report", tmp_path / "v.json")
    assert res.exit_code == 0, res.output
    assert check_report(tmp_path / "v.json")["hops"][0]["tolerance"]["rule"] == "fp16-emulation"
    res = cli("validate", FACTORY, half, "--atol", "1e-4", "--rtol", "1e-3")
    assert_one_line_error(res, 1, "torch -> onnx", "output")


def test_fp16_keeps_fp32_where_the_schema_wants_it():
    """Resize's scales input takes float only; clamping keeps big weights finite."""
    from onnx import TensorProto, helper

    from onnxbridge.precision import to_fp16

    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest"),
             helper.make_node("Mul", ["r", "big"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
                               numpy_helper.from_array(np.array(1e6, np.float32), "big")])
    half = to_fp16(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    onnx.checker.check_model(half, full_check=True)
    types = {t.name: t.data_type for t in half.graph.initializer}
    assert types == {"scales": TensorProto.FLOAT, "big": TensorProto.FLOAT16}
    assert numpy_helper.to_array(half.graph.initializer[1]) == np.float16(65504)


def test_a_later_hop_is_compared_with_the_source_too():
    """Reference outputs are computed once per sample and shared: the source runs once per sample however many hops
    follow, and each later hop's vs_source says how far the chain has drifted."""
    from onnxbridge.specs import Sample
    from onnxbridge.records import HopKind
    from onnxbridge.validation import SourceOutputs, Tolerance, validate_hop

    calls = []

    def source(feeds):
        calls.append(1)
        return [feeds["x"] * 2]

    memo = SourceOutputs(source)
    samples = [Sample({"x": np.ones((2, 3), np.float32)}), Sample({"x": np.zeros((1, 3), np.float32)})]
    tol = Tolerance.for_precision("fp32")
    first = validate_hop(HopKind.SOURCE, "src", "a", memo, lambda f: [f["x"] * 2], samples, ["y"], tol)
    second = validate_hop(HopKind.BACKEND, "a", "b", lambda f: [f["x"] * 2], lambda f: [f["x"] * 2 + 1e-3], samples,
                          ["y"], tol, source=memo)
    assert len(calls) == 2 and first.passed and first.vs_source is None
    assert not second.passed and not second.vs_source["passed"]
    assert second.vs_source["outputs"][0]["max_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert second.to_dict()["kind"] == "backend" and second.to_dict()["vs_source"] == second.vs_source


def test_topk_agreement_for_many_classes():
    from onnxbridge.compare import compare

    ref = np.arange(20, dtype=np.float32).reshape(2, 10)
    got = ref.copy()
    got[0, 0] = 100.0  # row 0: class 0 enters the top 5 (and becomes the top 1), pushing class 5 out
    metrics = compare(ref, got, atol=1e-4, rtol=1e-3)
    assert metrics["top1_agreement"] == 0.5 and metrics["top5_agreement"] == pytest.approx(0.9)


@pytest.mark.slow
@requires("torch")
def test_validate_against_a_saved_backend_artifact_and_a_skipped_hop(cli, monkeypatch, tmp_path, native_in_process):
    """`validate SOURCE ARTIFACT` runs a saved backend artifact with its backend's runner; one that cannot run on
    this host gives a skipped hop and a skipped report (exit 5: validation incomplete; 0 with --allow-skipped),
    never passed, and --fail-on warning fails it (exit 1) even when skipping is allowed."""
    require("coremltools")
    import onnxbridge.backends.coreml as coreml
    from onnxbridge.errors import HopSkipped

    good, package = tmp_path / "m.onnx", tmp_path / "m.mlpackage"
    assert onnxbridge.convert(FACTORY, output=good, opset=17).passed
    assert onnxbridge.convert(good, output=package, to="coreml").passed
    res = cli("validate", good, package, "--report", tmp_path / "ok.json", "--markdown", tmp_path / "ok.md")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "ok.json")
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("onnx", "coreml", "passed")]
    assert rep["artifact"]["format"] == "coreml" and "opset" not in rep["artifact"]
    assert "(coreml, " in (tmp_path / "ok.md").read_text()

    def cannot(path, *, onnx_path=None):
        raise HopSkipped("no CUDA device")

    monkeypatch.setattr(coreml, "runner", cannot)
    res = cli("validate", good, package, "--report", tmp_path / "skip.json", "--markdown", tmp_path / "skip.md",
              "--junit", tmp_path / "skip.xml", "--html", tmp_path / "skip.html")
    assert res.exit_code == 5, res.output  # validation incomplete
    assert cli("-q", "validate", good, package, "--allow-skipped").exit_code == 0
    suite = ET.parse(tmp_path / "skip.xml").getroot()[0]
    assert suite.get("skipped") == "1" and suite.find("testcase/skipped").get("message") == "no CUDA device"
    assert "skipped: no CUDA device" in (tmp_path / "skip.html").read_text()
    rep = check_report(tmp_path / "skip.json")
    hop = rep["hops"][0]
    assert rep["status"] == "skipped" and (hop["status"], hop["passed"]) == ("skipped", False)
    assert hop["skipped_reason"] == "no CUDA device" and "skipped: no CUDA device" in (tmp_path / "skip.md").read_text()
    res = cli("validate", good, package, "--fail-on", "warning")  # incomplete comes first: exit 5
    assert_one_line_error(res, 5, "validation incomplete: onnx -> coreml skipped: no CUDA device", "--allow-skipped")
    res = cli("validate", good, package, "--fail-on", "warning", "--allow-skipped")  # the skip is still a warning
    assert_one_line_error(res, 1, "no CUDA device")
