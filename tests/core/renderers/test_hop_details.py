"""Schema 1.8 in every rendering: each hop's tolerance rule, per output cosine and SNR dB beside max abs, the check
that failed with its budget, warm latency only when it was timed (with its method), the dynamic axes checked; JUnit
test cases named model / hop / output so several models in one CI job do not collide; the JSON schema holds the
record. Hand-built hop records, so nothing is converted here."""
from __future__ import annotations

import copy
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from rich.console import Console

from onnxbridge import renderers
from onnxbridge.report import SCHEMA_VERSION, new_report, render
from tests.conftest import check_report

FAILED_CHECK = "rel rms 0.021 > budget 0.0031 (4x the emulation's 0.00077)"
METHOD = "median of 20 warm runs after a warm-up, first sample"
HTP_RULE = ("tolerance: fp16-emulation (4x the emulation's error, floor 4.9e-4): qnn-htp-simulator computes in "
            "fp16")


def _output(name: str = "logits", **extra) -> dict:
    out = {"name": name, "shape": [1, 1000], "reference_shape": [1, 1000], "dtype": "float32",
           "reference_dtype": "float32", "kind": "numeric", "passed": True, "max_abs": 3.1e-6, "mean_abs": 4e-7,
           "max_rel": 2e-5, "cosine": 0.99999999, "mismatch_fraction": 0.0, "nan_mismatch": 0,
           "nonfinite_reference": 0, "nonfinite_output": 0, "required_atol": 0.0, "atol": 1e-4, "rtol": 1e-3,
           "snr_db": 92.34, "rel_rms": 2.4e-5, "scale": 7.5, "top1_agreement": 1.0,
           "budget": {"rule": "fp32", "atol": 1e-4, "rtol": 1e-3}, "error_histogram": [0] * 12}
    out.update(extra)
    return out


def _hop(src: str, dst: str, status: str, tolerance: dict, outputs: list[dict], **extra) -> dict:
    hop = {"from": src, "to": dst, "kind": "backend" if src == "onnx" else "source", "status": status,
           "passed": status == "passed", "samples": 0 if status == "skipped" else 2,
           "sample_shapes": [{"x": [1, 3, 64, 64]}, {"x": [1, 3, 96, 96]}], "tolerance": tolerance, "outputs": outputs,
           "errors": [], "notes": [], "latency_s": {}, "seconds": {}, "runtimes": {}}
    hop.update(extra)
    return hop


def report_1_8(path: str = "/models/resnet50.onnx") -> dict:
    """A run in the 1.8 shape: an fp32 hop timed warm (dynamic axes exercised), an fp16 HTP hop that failed its
    emulation budget, and a TensorRT hop that could not run here."""
    rep = new_report("convert", source={"frontend": "onnx", "framework": "onnx", "kind": "ONNX", "path": path,
                                        "description": f"ONNX model {path.rsplit('/', 1)[-1]}",
                                        "inputs": [{"name": "x", "shape": [1, 3, "h", "w"], "dtype": "float32"}],
                                        "dynamic": []})
    fp32 = _hop("torch", "onnx", "passed",
                {"precision": "fp32", "rule": "fp32", "atol": 1e-4, "rtol": 1e-3, "reason": "onnx computes in fp32"},
                [_output()], latency_s={"torch": 1.02e-3, "onnx": 5.1e-4}, latency_method=METHOD,
                dynamic_axes={"axes": ["x:2", "x:3"], "sizes": [{"x": [1, 3, 64, 64]}, {"x": [1, 3, 96, 96]}],
                              "exercised": True, "reason": "96 changes the 16-pixel patch grid"},
                seconds={"reference": 0.02, "candidate": 0.004})
    emu = {"max_abs": 1.2e-3, "rel_rms": 7.7e-4, "snr_db": 62.3, "cosine": 0.9999997}
    htp = _hop("onnx", "qnn-htp-simulator", "failed",
               {"precision": "fp16", "rule": "fp16-emulation", "atol": 1e-2, "rtol": 1e-2, "factor": 4.0,
                "floor": 2.0 ** -11, "reason": "qnn-htp-simulator computes in fp16"},
               [_output(passed=False, max_abs=0.21, max_rel=0.4, cosine=0.99978, snr_db=33.56, rel_rms=0.021,
                        mismatch_fraction=0.3, required_atol=0.2,
                        budget={"rule": "fp16-emulation", "max_abs": 4.8e-3, "rel_rms": 3.1e-3, "emulation": emu},
                        failed_check=FAILED_CHECK),
                _output("exact_zero", shape=[1, 4], reference_shape=[1, 4], snr_db=None, rel_rms=0.0, max_abs=0.0,
                        budget={"rule": "fp16-emulation", "max_abs": 4.8e-3, "rel_rms": 3.1e-3, "emulation": emu})],
               seconds={"reference": 0.004, "candidate": 0.01, "emulation": 0.006})
    trt = _hop("onnx", "tensorrt", "skipped", {"precision": "fp32", "rule": "fp32", "atol": 1e-4, "rtol": 1e-3},
               [], skipped_reason="no CUDA device", artifact_checked="not run")
    rep.update(status="failed", introduced_by="onnx -> qnn-htp-simulator", hops=[fp32, htp, trt],
               inputs={"origin": "sample inputs", "samples": [{"x": [1, 3, 64, 64]}, {"x": [1, 3, 96, 96]}]},
               artifact={"path": "/out/resnet50.dlc", "format": "dlc", "bytes": 1000, "external_data": [],
                         "opset": 17, "ir_version": 8},
               latency_s={"torch": 1.02e-3, "onnx": 5.1e-4})
    return rep


def _row(text: str, output: str) -> list[str]:
    """The cells of the terminal table row of ``output``."""
    line = next(line for line in text.splitlines() if line.startswith(f"│ {output} "))
    return [cell.strip() for cell in line.split("│")[1:-1]]


def _terminal(rep: dict) -> str:
    console = Console(record=True, width=250, color_system=None)
    render(rep, console)
    return console.export_text()


def test_the_schema_holds_a_1_8_record():
    rep = report_1_8()
    assert rep["schema_version"] == SCHEMA_VERSION == "1.10"
    check_report(rep)
    for broken in (lambda r: r["hops"][1]["tolerance"].update(rule="lenient"),
                   lambda r: r["hops"][1]["outputs"][0].update(snr_db="high"),
                   lambda r: r["hops"][1]["outputs"][0]["budget"].pop("rule"),
                   lambda r: r["hops"][0]["dynamic_axes"].pop("exercised"),
                   lambda r: r["hops"][1]["tolerance"].update(factor=0),
                   lambda r: r.update(schema_version="1.7")):
        bad = copy.deepcopy(rep)
        broken(bad)
        with pytest.raises(jsonschema.ValidationError):
            check_report(bad)


def test_the_terminal_shows_rule_cosine_snr_budget_and_warm_latency():
    text = _terminal(report_1_8())
    assert "tolerance: fp32 (atol 1e-4, rtol 0.001, atol at most rtol x the output's scale): onnx computes in fp32" \
        in text
    assert HTP_RULE in text
    header = next(line for line in text.splitlines() if "max abs" in line and "SNR dB" in line)
    assert header.index("max abs") < header.index("cosine") < header.index("SNR dB")
    row = next(line for line in text.splitlines() if "logits" in line and "FAIL" in line)
    assert "0.999780" in row and "33.6" in row and "2.10e-01" in row
    assert _row(text, "exact_zero")[5] == "inf"  # the error is exactly 0
    assert f"logits: {FAILED_CHECK}" in text
    assert "logits: budget (fp16-emulation): max abs 0.0048, rel rms 0.0031; the fp16 emulation's own error: " \
           "max abs 0.0012, rel rms 7.7e-4, SNR 62.3 dB" in text
    assert f"latency: torch 1.02 ms, onnx 0.51 ms ({METHOD})" in text
    assert text.count("latency:") == 1  # the untimed hops print none
    assert "dynamic axes x:2, x:3: exercised (sizes x 1x3x64x64; x 1x3x96x96): 96 changes" in text
    assert "onnx -> tensorrt: skipped (0 sample(s))\ntolerance: fp32" in text and "skipped: no CUDA device" in text


def test_the_terminal_still_renders_a_1_7_hop():
    hop = {"from": "torch", "to": "onnx", "status": "passed", "samples": 2, "errors": [], "notes": [],
           "tolerance": {"precision": "fp32", "atol": 1e-4, "rtol": 1e-3},
           "latency_s": {"torch": 2e-3, "onnx": None}, "latency_method": "mean of the validation runs that computed",
           "outputs": [{"name": "y", "shape": [2, 3], "kind": "numeric", "passed": True, "max_abs": 1e-6,
                        "max_rel": 1e-5, "cosine": 1.0, "mismatch_fraction": 0.0, "required_atol": 0.0}]}
    text = _terminal({"hops": [hop]})
    assert text.splitlines()[0].rstrip() == "torch -> onnx: passed (2 sample(s), atol 0.0001, rtol 0.001)"
    assert "tolerance:" not in text and "latency: torch 2 ms (mean of the validation runs that computed)" in text
    assert _row(text, "y")[5] == "-"  # no SNR recorded


def _cases(xml: str) -> list[ET.Element]:
    return list(ET.fromstring(xml.split("\n", 1)[1]).iter("testcase"))


def test_junit_names_model_hop_output_and_several_models_do_not_collide():
    resnet, vit = report_1_8("/models/resnet50.onnx"), report_1_8("/models/vit_b16.onnx")
    xml = renderers.render(resnet, "junit")
    cases = _cases(xml)
    ids = [(c.get("classname"), c.get("name")) for c in cases]
    assert ids == [("resnet50.torch->onnx", "logits"), ("resnet50.onnx->qnn-htp-simulator", "logits"),
                   ("resnet50.onnx->qnn-htp-simulator", "exact_zero"), ("resnet50.onnx->tensorrt", "run")]
    failure = cases[1].find("failure")
    assert failure.get("message").startswith(FAILED_CHECK) and "SNR 33.6 dB" in failure.get("message")
    # the emulation rule does not judge element by element: no atol verdict beside it; the fp32 hop keeps one
    assert "out of tolerance" not in failure.get("message")
    assert "0.00% out of tolerance, needs atol 0" in cases[0].find("system-out").text
    assert HTP_RULE in failure.text and "budget (fp16-emulation): max abs 0.0048" in failure.text
    assert cases[3].find("skipped").get("message") == "no CUDA device"
    root = ET.fromstring(xml.split("\n", 1)[1])
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites][0] == "resnet50 / torch -> onnx"
    assert suites[2].get("skipped") == "1" and suites[1].get("failures") == "1"
    props = {p.get("name"): p.get("value") for p in suites[0].iter("property")}
    assert props["model"] == "resnet50" and props["tolerance_rule"] == "fp32"
    assert props["latency"] == f"latency: torch 1.02 ms, onnx 0.51 ms ({METHOD})"
    assert "latency" not in {p.get("name") for p in suites[1].iter("property")}  # not timed

    # two models' reports in one CI job: merged into one file, no test case or suite shares a name
    other = _cases(renderers.render(vit, "junit"))
    assert not set(ids) & {(c.get("classname"), c.get("name")) for c in other}
    assert other[0].get("classname") == "vit_b16.torch->onnx"
    suite_names = [s.get("name") for x in (xml, renderers.render(vit, "junit"))
                   for s in ET.fromstring(x.split("\n", 1)[1]).findall("testsuite")]
    assert len(suite_names) == len(set(suite_names)) == 6


def test_junit_model_names_from_factories_and_in_memory_sources():
    rep = report_1_8()
    rep["source"].update(path="examples/models.py:cnn")
    assert _cases(renderers.render(rep, "junit"))[0].get("classname") == "models:cnn.torch->onnx"
    rep["source"].update(path=None, kind="nn.Module", description="nn.Module ResNet")
    assert _cases(renderers.render(rep, "junit"))[0].get("classname") == "ResNet.torch->onnx"


def test_markdown_shows_rule_snr_failed_check_and_latency_method():
    md = renderers.render(report_1_8(), "markdown")
    assert "| hop | output | shape | max abs | max rel | cosine | SNR dB |" in md
    row = next(line for line in md.splitlines() if "qnn-htp-simulator | `logits`" in line)
    assert "| 0.21 |" in row and "| 0.999780 | 33.6 |" in row and row.endswith(f"❌ {FAILED_CHECK} |")
    assert "| 92.3 |" in next(line for line in md.splitlines() if line.startswith("| torch → onnx |"))
    assert f"- ⚖️ onnx → qnn-htp-simulator: {HTP_RULE}" in md
    assert "- ⚖️ torch → onnx: tolerance: fp32 (atol 1e-4" in md
    assert "- ❌ onnx → qnn-htp-simulator: `logits` budget (fp16-emulation): max abs 0.0048" in md
    assert f"**Latency:** torch 1.02 ms, onnx 0.51 ms ({METHOD})" in md
    assert "exercised (sizes x 1x3x64x64; x 1x3x96x96)" in md
    untimed = report_1_8()
    untimed.pop("latency_s")
    for hop in untimed["hops"]:
        hop["latency_s"] = {}
        hop.pop("latency_method", None)
    assert "Latency" not in renderers.render(untimed, "markdown")


def test_html_shows_rule_snr_failed_check_and_latency_method():
    html = renderers.render(report_1_8(), "html")
    assert "<script" not in html
    assert HTP_RULE.replace("'", "&#x27;") in html
    assert "<th>SNR dB</th>" in html and "<td>33.6</td>" in html and "<td>0.999780</td>" in html
    assert "<td>inf</td>" in html  # the output whose error is exactly 0
    assert FAILED_CHECK.replace(">", "&gt;").replace("'", "&#x27;") in html
    assert f"latency ({METHOD})" in html and "1.02 ms" in html
    assert html.count(METHOD) == 2  # the run's latency row and the timed hop's table, not the untimed hops
    assert "dynamic axes x:2, x:3: exercised" in html
    assert "<p>skipped: no CUDA device</p>" in html


def test_an_output_with_nan_or_inf_shows_the_count_not_agreement():
    """The finite-only figures (max abs 0, cosine 1) would read as agreement beside FAIL."""
    rep = report_1_8()
    rep["hops"][0]["outputs"] = [_output(passed=False, max_abs=0.0, cosine=1.0, nonfinite_output=4,
                                         reason="inf in 4 of 1000 values where the reference is finite")]
    row = _row(_terminal(rep), "logits")
    assert row[2] == "NaN/inf in 4 of 1000 values" and row[4] == "-" and row[-1] == "FAIL", row
