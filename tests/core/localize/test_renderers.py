"""A failed hop's localization in every rendering: the one-line error, the terminal, JUnit, Markdown and the HTML
plot (names escaped), with and without localization, and when it was skipped."""
from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET

import jsonschema
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge import renderers
from onnxbridge.report import SCHEMA_VERSION, failure_summary, localization_summary, render, trace_window
from tests.conftest import check_report

CULPRIT = 7


def _chain(path, scale: float, blocks: int = 3, scaled: int = 1) -> None:
    """x -> ``blocks`` x (MatMul, Tanh) -> y, block ``scaled``'s weight multiplied by ``scale``."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(blocks):
        w = (rng.standard_normal((8, 8)) / 3).astype(np.float32) * (scale if i == scaled else 1.0)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"blocks.{i}/MatMul"),
                  helper.make_node("Tanh", [f"m{i}"], [f"r{i}" if i < blocks - 1 else "y"], name=f"blocks.{i}/Tanh")]
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def failed(tmp_path_factory) -> dict:
    """A real failed ONNX -> ONNX report (one weight x1.05), without localization."""
    folder = tmp_path_factory.mktemp("localize_renderers")
    _chain(folder / "a.onnx", 1.0)
    _chain(folder / "b.onnx", 1.5)
    rep = onnxbridge.validate(folder / "a.onnx", folder / "b.onnx", localize="off")
    assert rep["status"] == "failed" and rep["schema_version"] == SCHEMA_VERSION
    return rep


def _trace(node=lambda i: f"blocks.{i}/MatMul", n: int = 24) -> list[dict]:
    """Errors rising from the culprit on: tiny before it, 10 ** (i - CULPRIT) from it."""
    trace = [{"node": node(i), "output": f"t{i}", "passed": i < CULPRIT, "index": 3 * i, "step": 1,
              "max_abs": 1e-7 * (i + 1) if i < CULPRIT else 32.0 * 10 ** (i - CULPRIT),
              "max_rel": 1e-6 if i < CULPRIT else 0.5, "cosine": 1.0 if i < CULPRIT else 0.9} for i in range(n)]
    trace[CULPRIT + 2]["error"] = "inf in 2 of 16 values where the reference is finite"
    return trace


def _localized(rep: dict, node=lambda i: f"blocks.{i}/MatMul", source: str | None = "blocks.7",
               hop_from: str | None = None) -> dict:
    rep = copy.deepcopy(rep)
    hop = rep["hops"][0]
    if hop_from:
        hop["from"] = hop_from
    trace = _trace(node)
    hop["localization"] = {
        "first_divergent": {"node": node(CULPRIT), "op": "MatMul", "output": f"t{CULPRIT}", "source": source,
                            "error": {"max_abs": 32.0, "max_rel": 0.5, "cosine": 0.9, "mismatch_fraction": 0.75,
                                      "passed": False},
                            "inputs_ok": True},
        "trace": trace, "method": "torch forward hooks matched through the exporter's name scopes", "runs": 11,
        "seconds": 0.8}
    return rep


def _skipped(rep: dict) -> dict:
    rep = copy.deepcopy(rep)
    rep["hops"][0]["localization"] = {"skipped": "the backend cannot show intermediate tensors",
                                      "method": "prefix models through the backend"}
    return rep


def _failures(xml: str) -> list[ET.Element]:
    return ET.fromstring(xml.split("\n", 1)[1]).findall(".//failure")


def test_the_summary_line():
    hop = {"from": "torch", "to": "onnx", "localization": _localized(
        {"hops": [{"from": "torch", "to": "onnx"}]})["hops"][0]["localization"]}
    assert localization_summary(hop) == ("first divergent node: blocks.7/MatMul (MatMul, output t7; torch module "
                                         "blocks.7), max_abs 3.2e+01; 11 runs")
    hop["from"], hop["to"] = "onnx", "coreml"
    assert "MIL op blocks.7" in localization_summary(hop)
    hop["from"], hop["to"] = "onnx@13", "onnx@17"
    assert "adapted node blocks.7" in localization_summary(hop)
    hop["localization"]["first_divergent"].update(source=None, inputs_ok=False,
                                                  error={"max_abs": 0.0, "reason": "inf in 2 of 16 values"})
    line = localization_summary(hop)
    assert "blocks.7" not in line.split("(MatMul")[1] and "inputs already differ" in line
    assert "inf in 2 of 16 values" in line
    hop["localization"]["first_divergent"] = None
    assert localization_summary(hop) == "localization found no divergent node among 24 traced tensor(s); 11 runs"
    assert localization_summary({"from": "onnx", "to": "onnx"}) is None
    assert localization_summary(_skipped({"hops": [{}]})["hops"][0]) == \
        "localization skipped: the backend cannot show intermediate tensors"
    hop["localization"]["first_divergent"] = {"node": "n|1", "op": "Add", "output": "t", "source": None,
                                              "error": {"error": "shape [3] where the reference is [2]"}}
    assert localization_summary(hop, quote=lambda s: f"`{s}`") == \
        "first divergent node: `n|1` (Add, output `t`), shape [3] where the reference is [2]; 11 runs"


def test_trace_window_centres_the_culprit():
    loc = {"trace": _trace(), "first_divergent": {"output": f"t{CULPRIT}"}}
    rows, at = trace_window(loc, around=2)
    assert at == CULPRIT and [i for i, _ in rows] == [5, 6, 7, 8, 9]
    rows, at = trace_window({"trace": _trace()[:3]})
    assert at is None and len(rows) == 3
    rows, at = trace_window({"trace": _trace(), "first_divergent": None})  # no culprit: the first failed entry
    assert at == CULPRIT


def test_without_localization_nothing_changes(failed):
    check_report(failed)
    assert "first divergent" not in failure_summary(failed)
    msg = _failures(renderers.render(failed, "junit"))[0].get("message")
    assert "max abs" in msg and "localization" not in msg and "first divergent" not in msg
    assert "🔎" not in renderers.render(failed, "markdown")
    html = renderers.render(failed, "html")
    assert 'class="localization"' not in html and "first divergent" not in html


def test_a_localized_failure_is_named_everywhere(failed):
    rep = _localized(failed, hop_from="torch")
    check_report(rep)
    line = localization_summary(rep["hops"][0])
    summary = failure_summary(rep)
    assert "\n" not in summary and summary.endswith(line) and "y (max abs" in summary

    from rich.console import Console

    console = Console(record=True, width=300, color_system=None)
    render(rep, console)
    text = console.export_text()
    assert line in text and "torch forward hooks matched" in text

    xml = renderers.render(rep, "junit")
    [failure] = _failures(xml)
    assert failure.get("message").startswith("first divergent node: blocks.7/MatMul (MatMul, output t7; "
                                             "torch module blocks.7)")
    assert "max abs" in failure.get("message")  # the verdict follows
    assert "#21 FAIL blocks.7/MatMul -> t7" in failure.text and "<- first divergent" in failure.text
    assert "(inf in 2 of 16 values" in failure.text
    props = {p.get("name"): p.get("value") for p in ET.fromstring(xml.split("\n", 1)[1]).iter("property")}
    assert props["first_divergent_node"] == "blocks.7/MatMul" and props["first_divergent_source"] == "blocks.7"

    md = renderers.render(rep, "markdown")
    assert "- 🔎 torch → onnx: first divergent node: `blocks.7/MatMul` (MatMul, output `t7`; torch module " \
           "`blocks.7`)" in md
    rows = [r for r in md.splitlines() if r.startswith("| ") and "blocks." in r]
    assert [r.split(" | ")[0] for r in rows] == [f"| {3 * i}" for i in range(4, 11)]  # three either side
    [marked] = [r for r in rows if "first divergent" in r]
    assert "`blocks.7/MatMul`" in marked and "❌" in marked
    assert "inf in 2 of 16 values" in rows[5]

    html = renderers.render(rep, "html")
    assert "<script" not in html and "first divergent node: blocks.7/MatMul" in html
    assert "<td>21</td><td><code>blocks.7/MatMul</code>" in html and "inf in 2 of 16 values" in html


def _plot(html: str) -> ET.Element:
    svg = re.search(r'<svg class="localization".*?</svg>', html, re.DOTALL).group(0)
    return ET.fromstring(svg)  # well-formed XML, so every name was escaped


def test_the_html_plot_marks_the_culprit(failed):
    plot = _plot(renderers.render(_localized(failed), "html"))
    ns = "{http://www.w3.org/2000/svg}"
    circles = plot.findall(f"{ns}circle")
    assert len(circles) == 24
    ys = [float(c.get("cy")) for c in circles]
    assert ys[-1] == min(ys) and ys[0] == max(ys)  # higher error plots higher
    assert all(a >= b for a, b in zip(ys[CULPRIT:], ys[CULPRIT + 1:]))
    fills = [c.get("fill") for c in circles]
    assert len(set(fills[:CULPRIT])) == 1 and set(fills[CULPRIT:]) == {"#c62828"} != set(fills[:CULPRIT])
    assert circles[CULPRIT].get("r") == "5" and {c.get("r") for i, c in enumerate(circles) if i != CULPRIT} == {"3"}
    line = next(e for e in plot if e.tag == f"{ns}line" and e.get("class") == "culprit")
    assert line.get("x1") == circles[CULPRIT].get("cx")
    label = next(e for e in plot if e.tag == f"{ns}text" and e.get("class") == "culprit")
    assert label.text == "first divergent: blocks.7/MatMul (blocks.7)"
    assert circles[3].find(f"{ns}title").text.startswith("#9 blocks.3/MatMul → t3: max abs 4e-07")


def test_names_from_the_model_are_escaped(failed):
    evil = "<script>alert(1)</script>"
    rep = _localized(failed, node=lambda i: f'{evil}|`{i}"', source='<img src=x onerror="a()">')
    check_report(rep)
    html = renderers.render(rep, "html")
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    label = next(e for e in _plot(html).iter() if e.get("class") == "culprit" and e.text)
    assert label.text.startswith(f"first divergent: {evil}")  # escaped in the file, the name itself when read
    md = renderers.render(rep, "markdown")
    table = [r for r in md.splitlines() if r.startswith("| ") and "alert" in r]
    assert len(table) == 7 and all(len(re.findall(r"(?<!\\)\|", r)) == 8 for r in table)  # pipes escaped
    msg = _failures(renderers.render(rep, "junit"))[0].get("message")
    assert msg.startswith(f'first divergent node: {evil}|`7"')  # XML escaping is ElementTree's


def test_a_skipped_localization_says_why(failed):
    rep = _skipped(failed)
    check_report(rep)
    why = "localization skipped: the backend cannot show intermediate tensors"
    assert failure_summary(rep).endswith(why)
    [failure] = _failures(renderers.render(rep, "junit"))
    assert failure.get("message").startswith(why) and "method: prefix models through the backend" in failure.text
    assert f"- 🔎 onnx → onnx: {why} (prefix models through the backend)" in renderers.render(rep, "markdown")
    html = renderers.render(rep, "html")
    assert why in html and 'class="localization"' in html and '<svg class="localization"' not in html


def test_the_schema_holds_the_block(failed):
    assert failed["schema_version"] == SCHEMA_VERSION and tuple(map(int, SCHEMA_VERSION.split("."))) >= (1, 6)
    rep = _localized(failed)
    rep["hops"][0]["localization"] = {"method": "x"}  # neither a result nor a reason
    with pytest.raises(jsonschema.ValidationError):
        check_report(rep)
    rep = _localized(failed)
    del rep["hops"][0]["localization"]["first_divergent"]["inputs_ok"]
    with pytest.raises(jsonschema.ValidationError):
        check_report(rep)


def test_the_engine_s_block_fits_the_schema_and_renders(tmp_path):
    """End to end with onnxbridge.localize: a 24-block chain, block 7's weight doubled."""
    import json

    from onnxbridge.localize.onnx_probe import localize_onnx_pair
    from onnxbridge.specs import Sample
    from onnxbridge.validation import Tolerance

    _chain(tmp_path / "b.onnx", 1.0, blocks=24, scaled=7)
    _chain(tmp_path / "c.onnx", 2.0, blocks=24, scaled=7)
    rep = onnxbridge.validate(tmp_path / "b.onnx", tmp_path / "c.onnx")
    assert rep["status"] == "failed"
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)}
    loc = localize_onnx_pair(tmp_path / "b.onnx", tmp_path / "c.onnx", [Sample(feeds=feeds)],
                             Tolerance.for_precision("fp32", None, None))
    rep["hops"][0]["localization"] = json.loads(json.dumps(loc))  # as written to the JSON report
    check_report(rep)
    assert "first divergent node: blocks.7/MatMul (MatMul, output m7; source node blocks.7/MatMul)" \
        in failure_summary(rep)
    plot = _plot(renderers.render(rep, "html"))
    assert next(e for e in plot.iter() if e.get("class") == "culprit" and e.text).text.startswith(
        "first divergent: blocks.7/MatMul")
    assert "**← first divergent**" in renderers.render(rep, "markdown")
