"""The matrix's summary files (JSON, JUnit, Markdown, HTML) and its progress lines, over a matrix built here: every
status, a regression, a cached cell, and a model whose name is an HTML injection."""
from __future__ import annotations

import io
import json
import re
import threading
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from onnxbridge.matrix.outputs import (
    MATRIX_SCHEMA_VERSION,
    render_html,
    render_junit,
    render_markdown,
    write_outputs,
)
from onnxbridge.matrix.progress import MatrixProgress

HOSTILE = "<img src=x onerror=alert(1)>"


def _record(model, target, precision, status, *, opset=17, reason=None, max_abs=None, cached=False):
    name = f"{model}/{target}-{precision}-opset{opset}"
    worst = None if max_abs is None else {"hop": f"onnx -> {target}", "output": "y", "max_abs": max_abs,
                                          "max_rel": max_abs * 10, "cosine": 0.999}
    ran = status in ("passed", "failed")
    return {"name": name, "model": model, "target": target, "precision": precision, "opset": opset,
            "status": status, "reason": reason, "cached": cached, "seconds": 1.5, "worst": worst,
            "report": f"{name}/report.json" if ran else None,
            "artifact": f"{name}/model.onnx" if ran else None, "key": "ab" * 32}


@pytest.fixture()
def matrix() -> dict:
    cells = [
        _record("cnn", "onnx", "fp32", "passed", max_abs=2.4e-7, cached=True),
        _record("cnn", "coreml", "fp32", "failed", reason="validation failed: y outside tolerance", max_abs=0.31),
        _record("cnn", "onnx", "fp16", "passed", max_abs=5e-4),
        _record("cnn", "coreml", "fp16", "skipped", reason="coreml has no fp16 on this host", max_abs=7.7e-8),
        _record(HOSTILE, "onnx", "fp32", "error", reason="killed by SIGKILL"),
        _record(HOSTILE, "coreml", "fp32", "passed", max_abs=1e-6),
        _record(HOSTILE, "onnx", "fp16", "error", reason="factory raised <RuntimeError> | boom\nsecond line"),
        _record(HOSTILE, "coreml", "fp16", "passed", max_abs=2e-3),
    ]
    counts = {"passed": 4, "failed": 1, "error": 2, "skipped": 1}
    return {"schema_version": MATRIX_SCHEMA_VERSION, "tool": {"name": "onnxbridge", "version": "0.0.test"},
            "created": "2026-11-27T06:00:00Z", "manifest": "examples/matrix.toml",
            "executor": {"kind": "local", "workers": 2}, "status": "failed", "counts": counts,
            "regressions": [f"{HOSTILE}/onnx-fp32-opset17"], "cells": cells}


def test_write_outputs_json_round_trips(matrix, tmp_path):
    paths = write_outputs(matrix, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.html", "matrix.json", "matrix.md", "matrix.xml"]
    assert set(paths) == {"json", "junit", "markdown", "html"}
    loaded = json.loads((tmp_path / "matrix.json").read_text())
    assert loaded == matrix
    assert next(iter(loaded)) == "schema_version" and loaded["schema_version"] == "1.1"
    # without a schema_version the written file still carries one, first; the caller's dict is left alone
    bare = {k: v for k, v in matrix.items() if k != "schema_version"}
    write_outputs(bare, tmp_path)
    assert "schema_version" not in bare
    assert json.loads((tmp_path / "matrix.json").read_text())["schema_version"] == MATRIX_SCHEMA_VERSION
    # nothing half-written stays behind (atomic writes through staging names)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_junit_suite_per_model_case_per_cell(matrix):
    root = ET.fromstring(render_junit(matrix).encode("utf-8"))  # parses: the hostile name is escaped
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["cnn", HOSTILE]
    cases = root.findall(".//testcase")
    assert len(cases) == len(matrix["cells"]) == 8
    assert root.get("tests") == "8" and root.get("failures") == "1" and root.get("errors") == "2"
    names = {c.get("name") for c in cases}
    assert names == {"onnx-fp32-opset17", "coreml-fp32-opset17", "onnx-fp16-opset17", "coreml-fp16-opset17"}
    cnn, hostile = suites
    assert (cnn.get("tests"), cnn.get("failures"), cnn.get("errors"), cnn.get("skipped")) == ("4", "1", "0", "1")
    assert (hostile.get("failures"), hostile.get("errors"), hostile.get("skipped")) == ("0", "2", "0")
    failure = cnn.find("testcase[@name='coreml-fp32-opset17']/failure")
    assert "outside tolerance" in failure.get("message") and "max abs 0.31" in failure.get("message")
    skipped = cnn.find("testcase[@name='coreml-fp16-opset17']/skipped")
    assert "no fp16" in skipped.get("message")
    assert cnn.find("testcase[@name='onnx-fp32-opset17']/failure") is None  # passed: no element
    assert "cached" in cnn.find("testcase[@name='onnx-fp32-opset17']/system-out").text
    # the regression leads its suite and its message names it
    first = hostile.find("testcase")
    assert first.get("name") == "onnx-fp32-opset17"
    error = first.find("error")
    assert error.get("message").startswith("regression: passed in the baseline, now error: killed by SIGKILL")
    assert len(root.findall(".//failure")) == 1 and len(root.findall(".//error")) == 2
    assert len(root.findall(".//skipped")) == 1


def test_junit_skipped_regression_is_a_failure_and_control_characters_survive(matrix):
    matrix["regressions"] = ["cnn/coreml-fp16-opset17"]
    matrix["cells"][4]["reason"] = "crashed: \x00\x1b[31mSIGSEGV"
    root = ET.fromstring(render_junit(matrix).encode("utf-8"))
    case = root.find("testsuite[@name='cnn']/testcase[@name='coreml-fp16-opset17']")
    assert case.find("skipped") is None
    assert case.find("failure").get("message").startswith("regression: passed in the baseline, now skipped")
    assert "SIGSEGV" in root.find(f"testsuite[@name='{HOSTILE}']/testcase/error").get("message")


def _table(md: str, heading: str) -> list[list[str]]:
    block = md.split(f"### {heading}\n", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in block.splitlines()]


def test_markdown_tables_per_precision(matrix):
    md = render_markdown(matrix)
    assert md.startswith("## onnxbridge matrix: ❌ failed")
    assert md.index("Regressions") < md.index("### fp32") < md.index("### fp16")
    assert f"`{HOSTILE}/onnx-fp32-opset17`: now error: killed by SIGKILL" in md
    fp32 = _table(md, "fp32")
    assert fp32[0] == ["model", "onnx", "coreml"]
    assert fp32[2] == ["`cnn`", "✅ passed 2.4e-07 ♻️", "❌ failed 0.31"]
    assert fp32[3] == [f"`{HOSTILE}`", "**🔻 💥 error**", "✅ passed 1e-06"]
    fp16 = _table(md, "fp16")
    # a skipped cell's worst comes from hops before the skipped one: the grid shows no number for it
    assert len(fp16) == 4 and fp16[2] == ["`cnn`", "✅ passed 0.0005", "⏭️ skipped"]
    # a reason's pipe, HTML and newline cannot break the list or the page
    line = next(ln for ln in md.splitlines() if "factory raised" in ln)
    assert "\\| boom second line" in line and "&lt;RuntimeError>" in line and "<RuntimeError>" not in md


def test_markdown_marks_excluded_cells(matrix):
    matrix["cells"] = [c for c in matrix["cells"] if c["name"] != "cnn/coreml-fp32-opset17"]
    assert _table(render_markdown(matrix), "fp32")[2] == ["`cnn`", "✅ passed 2.4e-07 ♻️", "—"]


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.cells: list[dict] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "a":
            self.links.append(attrs["href"])
        if tag == "td" and "cell" in (attrs.get("class") or "").split():
            self.cells.append(attrs)


def test_html_grid_escapes_and_links(matrix):
    html = render_html(matrix)
    assert HOSTILE not in html and "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    page = _Page()
    page.feed(html)
    assert not {"script", "img", "link", "iframe"} & set(page.tags)
    assert "http" not in html  # self-contained: no CDN, no external fonts
    grid_cells = page.cells
    assert len(grid_cells) == 8  # two precisions x two models x two targets
    by_status = [c["class"].split()[1] for c in grid_cells]
    assert by_status.count("passed") == 4 and by_status.count("error") == 2
    assert sum("regression" in c["class"] for c in grid_cells) == 1
    assert any("killed by SIGKILL" in c["title"] for c in grid_cells)
    # each run cell links to its report, relative and percent-encoded (the hostile name cannot inject a tag)
    assert "cnn/onnx-fp32-opset17/report.json" in page.links
    hostile = quote_name(HOSTILE)
    assert f"{hostile}/coreml-fp32-opset17/report.json" in page.links
    assert all(not re.match(r"^[a-z]+:", link) for link in page.links)
    assert "0.31" in html and "2.4e-07" in html
    skipped = next(c for c in grid_cells if "skipped" in c["class"])
    assert "max abs 7.7e-08" in skipped["title"]  # in the hover text, not as the cell's number


def quote_name(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="/")


def test_html_link_cannot_become_a_scheme(matrix):
    matrix["cells"][0]["report"] = "javascript:alert(1)/onnx/report.json"
    page = _Page()
    page.feed(render_html(matrix))
    assert "javascript%3Aalert%281%29/onnx/report.json" in page.links  # a relative path, not a scheme


def test_progress_plain_prints_a_line_per_cell(matrix):
    out = io.StringIO()
    with MatrixProgress(len(matrix["cells"]), enabled=False, stream=out) as progress:
        threads = []
        for record in matrix["cells"]:
            progress.started(record)
            threads.append(threading.Thread(target=progress.finished, args=(record,)))
        assert progress.running == 8
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 8
    assert sorted(int(re.match(r"\[\s*(\d+)/8\]", ln)[1]) for ln in lines) == list(range(1, 9))
    assert progress.running == 0 and progress.done == 8 and progress.failed == 3
    assert any("cnn/onnx-fp32-opset17" in ln and "(cached)" in ln and "max abs 2.4e-07" in ln for ln in lines)
    assert any("killed by SIGKILL" in ln and " error " in ln for ln in lines)
    assert any("boom second line" in ln for ln in lines)  # a reason stays on its one line


def test_progress_bar_counts_running_and_failed(matrix):
    out = io.StringIO()
    with MatrixProgress(8, enabled=True, stream=out) as progress:
        progress.started(matrix["cells"][0])
        progress.started(matrix["cells"][1])
        progress.finished(matrix["cells"][1])
        task = progress._bar.tasks[0]
        assert (task.completed, task.total, task.fields["running"], task.fields["failed"]) == (1, 8, 1, 1)
    assert "cnn/coreml-fp32-opset17" in out.getvalue()  # a failed cell is printed above the bar


def test_example_manifest_expands():
    """examples/matrix.toml loads with the manifest's own checks: 6 models x 5 targets x 2 precisions, the pairs
    that cannot work excluded."""
    from onnxbridge.matrix.cells import expand
    from onnxbridge.matrix.manifest import load_manifest
    from tests.conftest import ROOT

    cells = expand(load_manifest(ROOT / "examples" / "matrix.toml"))
    assert len(cells) == 6 * 5 * 2 - 9
    assert {c.model for c in cells} == {"cnn", "lstm", "transformer", "keras_cnn", "paddle_convnet", "sklearn_ridge"}
    assert [c.name for c in cells if c.model == "sklearn_ridge"] == ["sklearn_ridge/onnx-fp32-opset17"]
    assert all(c.options.get("dynamic") == ["x:0:batch"] for c in cells if c.model == "cnn")


def test_example_factories_import_their_framework_lazily():
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('m', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "assert callable(m.sklearn_regressor); "
            "print(sorted(n for n in ('tensorflow', 'keras', 'paddle', 'sklearn', 'torch') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples" / "matrix_models.py")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
