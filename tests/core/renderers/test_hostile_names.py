"""Names from a model are data wherever they are written (issue 30, items 9 and 10): an output name holding a
backtick, line breaks, a Markdown heading, raw HTML, an ANSI sequence, a bell and rich markup forges nothing in the
Markdown, JUnit or HTML report, nor on the terminal."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from markdown_it import MarkdownIt
from onnx import TensorProto, helper, numpy_helper

from onnxbridge import renderers
from onnxbridge.matrix.outputs import render_junit
from onnxbridge.matrix.progress import MatrixProgress
from onnxbridge.renderers.text import md_code, md_text, printable, xml_safe

EVIL = "y`\n\n## status: passed\n<img src=x onerror=alert(1)>\x1b[31m\x07[bold]|"
NODE = "add\x1b]0;pwned\x07"
RAW = ("\x1b", "\x07")  # what must never reach a terminal or a report


def _model(path: Path, shift: float) -> Path:
    """x + shift, its output and node named from EVIL and NODE, metadata with an ANSI sequence and markup."""
    c = numpy_helper.from_array(np.full((2,), shift, dtype=np.float32), "c")
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], [EVIL], name=NODE)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info(EVIL, TensorProto.FLOAT, [1, 2])], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.metadata_props.add(key="k\x1b[2J", value="v\x1b[31m[bold]")
    onnx.save(model, path)
    return path


def _onnxbridge(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped: lines as long as they need
    return subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def failed(tmp_path_factory):
    """``validate`` of two models that differ (x + 1 against x + 2), every report written."""
    d = tmp_path_factory.mktemp("hostile")
    a, b = _model(d / "a.onnx", 1.0), _model(d / "b.onnx", 2.0)
    run = _onnxbridge("validate", a, b, "--junit", d / "r.xml", "--markdown", d / "r.md", "--html", d / "r.html",
                      "--report", d / "r.json")
    return run, d


def test_the_terminal_shows_the_name_and_obeys_none_of_it(failed):
    run, _ = failed
    assert run.returncode == 1, run.stderr
    for raw in RAW:
        assert raw not in run.stdout and raw not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and run.stderr.startswith("error: validation failed")
    assert printable(EVIL) in run.stdout and printable(EVIL) in run.stderr  # every character, written out
    assert "[bold]|" in run.stdout  # rich markup in a name is text
    assert not any(line.startswith("## status") for line in run.stdout.splitlines() + run.stderr.splitlines())
    assert run.stdout.rstrip().endswith("status: failed")


def test_markdown_has_no_forged_heading_html_or_cell(failed):
    _, d = failed
    md = (d / "r.md").read_text()
    assert not any(c in md for c in RAW)
    assert [line for line in md.splitlines() if line.startswith("#")] == ["### onnxbridge validate: ❌ failed"]
    html = MarkdownIt("commonmark").enable("table").render(md)  # what a CI comment shows
    assert "<img" not in html and re.findall(r"<h\d>", html) == ["<h3>"]
    assert "<img" not in re.sub(r"(`+).*?\1", "", md)  # outside code spans, where markup is inert
    row = next(r for r in html.split("<tr>") if "<td>onnx → onnx</td>" in r)
    assert row.count("<td") == 11 and f"<code>{printable(EVIL).replace('<', '&lt;').replace('>', '&gt;')}" in row


def test_free_text_quoting_a_name_forges_nothing_either(failed):
    """Hop errors, notes, blockers and a skipped reason quote names too: each stays one inert line."""
    _, d = failed
    rep = json.loads((d / "r.json").read_text())
    quoted = f"output '{EVIL}' [x](http://e) ![i](http://e/p.png)"
    rep["hops"][0].update(errors=[quoted], status="skipped", skipped_reason=quoted)
    rep.update(notes=[EVIL, quoted], blockers=[EVIL])
    md = renderers.render(rep, "markdown")
    assert [line for line in md.splitlines() if line.startswith("#")] == ["### onnxbridge validate: ❌ failed"]
    assert not any(c in md for c in RAW)
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in html and "<a " not in html and re.findall(r"<h\d>", html) == ["<h3>"]
    shown = printable(" ".join(EVIL.split())).replace("<", "&lt;").replace(">", "&gt;")  # folded to one line
    assert html.count(shown) == 5  # the error, the skipped reason, two notes, the blocker: each the name itself


def test_junit_parses_and_names_the_output(failed):
    _, d = failed
    root = ET.parse(d / "r.xml").getroot()
    [case] = root.iter("testcase")
    assert case.get("name") == xml_safe(EVIL) and case.get("name").startswith("y`\n\n## status: passed\n<img")
    assert case.find("failure") is not None
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["first_divergent_node"] == "add\ufffd]0;pwned\ufffd"


def test_html_escapes_the_name(failed):
    _, d = failed
    html = (d / "r.html").read_text()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert not any(c in html for c in RAW)


def test_inspect_and_blockers_print_no_control_characters(tmp_path):
    model = _model(tmp_path / "m.onnx", 1.0)
    run = _onnxbridge("inspect", model)
    assert run.returncode == 0, run.stderr
    assert not any(c in run.stdout for c in RAW)
    assert printable(EVIL) in run.stdout and "k\\x1b[2J: v\\x1b[31m[bold]" in run.stdout
    node = helper.make_node("ArgMax", ["x"], ["a"], name=NODE, select_last_index=1)  # cannot move below opset 12
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("a", TensorProto.INT64, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "b.onnx")
    run = _onnxbridge("adapt", tmp_path / "b.onnx", "--opset", "11", "--check")
    assert run.returncode == 2 and printable(NODE) in run.stdout, (run.stdout, run.stderr)
    assert not any(c in run.stdout + run.stderr for c in RAW)


@pytest.mark.parametrize("name", ["y`", "``a```b`", "`", "", "a|b\\|c", "x\n# h", "<b>&amp;"])
def test_a_markdown_code_span_holds_the_name_exactly(name):
    """The span renders the name (control characters written out) and nothing else, in a table cell too."""
    md = MarkdownIt("commonmark").enable("table")
    cell = md.render(f"| a | b |\n|---|---|\n| {md_code(name)} | z |\n")
    code = re.search(r"<td><code>(.*?)</code></td>\s*<td>z</td>", cell, re.DOTALL)
    assert code, cell
    shown = code.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    assert shown.strip(" ") == printable(name).strip(" ")


def test_markdown_text_is_one_inert_line():
    text = "a | b\n# status: passed <img src=x> [x](http://e) ![i](http://e/p.png) `c` \\| &lt; \x1b[31m"
    html = MarkdownIt("commonmark").enable("table").render(f"| a |\n|---|\n| {md_text(text)} |\n")
    assert html.count("<td>") == 1 and "<img" not in html and "<a " not in html and "<code>" not in html
    assert "<h1>" not in html and "\x1b" not in html
    assert "- " + md_text("## forged") != "- ## forged" and "<h2>" not in MarkdownIt().render("- " + md_text("## x"))


def test_one_xml_sanitizer_for_every_junit_writer():
    bad = "a\x00\x08\x0b\x0c\x0e\x1f\ud800\ufffe\uffff\x1b[31m b\tc\n"
    assert xml_safe(bad) == "a" + "\ufffd" * 10 + "[31m b\tc\n"
    matrix = {"manifest": "m.toml", "executor": {"kind": "local"}, "cells": [
        {"name": f"{bad}/onnx-fp32-opset17", "model": bad, "target": "onnx", "precision": "fp32", "opset": 17,
         "status": "error", "reason": f"crashed: {bad}", "seconds": 1.0}]}
    root = ET.fromstring(render_junit(matrix).encode("utf-8"))
    assert root.find("testsuite").get("name") == xml_safe(bad)


def test_matrix_progress_lines_write_control_characters_out():
    stream = io.StringIO()
    with MatrixProgress(1, enabled=False, stream=stream) as progress:
        progress.finished({"name": "m\x1b[2J/onnx-fp32-opset17", "status": "error", "reason": "boom \x07\x1b]0;x"})
    line = stream.getvalue()
    assert "\x1b" not in line and "\x07" not in line and "m\\x1b[2J/onnx-fp32-opset17" in line
