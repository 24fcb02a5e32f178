"""The HTML report as a browser lays it out (issue 21): histogram y axis values and x labels that do not overlap, the
inputs as a shape/dtype table with every sample, and latency. Checked in headless Chromium where it is installed;
the markup itself is checked everywhere."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from onnxbridge.renderers.html import histogram_svg, render
from tests.conftest import EXAMPLES
from tests.helpers.extras import require

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Injected into a copy of the page (the report itself has no scripts): measures the laid-out labels and writes the
# findings into the DOM, which --dump-dom then prints.
MEASURE = """<script>
window.addEventListener('load', () => {
  const boxes = [...document.querySelectorAll('svg.histogram')].map(svg =>
    [...svg.querySelectorAll('text.xlabel')].map(t => t.getBoundingClientRect()));
  let overlaps = 0, labels = 0;
  for (const row of boxes) {
    labels += row.length;
    for (let i = 1; i < row.length; i++) {
      const a = row[i - 1], b = row[i];
      if (a.right > b.left + 0.5 && a.bottom > b.top + 0.5 && b.bottom > a.top + 0.5) overlaps++;
    }
  }
  const svg = document.querySelector('svg.histogram').getBoundingClientRect();
  const outside = [...document.querySelectorAll('svg.histogram text')].filter(t => {
    const r = t.getBoundingClientRect();
    return r.left < svg.left - 0.5 || r.right > svg.right + 0.5 || r.top < svg.top - 0.5 || r.bottom > svg.bottom + 0.5;
  }).length;
  const out = document.createElement('pre');
  out.id = 'measured';
  out.textContent = `labels=${labels} overlaps=${overlaps} outside=${outside}`;
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A validate report of the example CNN with a dynamic batch: 3 samples (2 drawn, the grown batch), warm latency
    (only timed when asked: --latency-runs)."""
    require("torch")
    from click.testing import CliRunner

    from onnxbridge.cli.main import cli

    folder = tmp_path_factory.mktemp("html")
    runner = CliRunner()
    res = runner.invoke(cli, ["convert", f"{EXAMPLES}:cnn", "-o", str(folder / "m.onnx"), "--dynamic", "x:0", "-q",
                              "--no-validate"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["validate", f"{EXAMPLES}:cnn", str(folder / "m.onnx"), "--samples", "2",
                              "--latency-runs", "3", "--html",
                              str(folder / "r.html"), "--report", str(folder / "r.json"), "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return folder


@pytest.mark.slow
def test_the_markup_has_axis_values_a_shape_table_and_latency(page):
    html = (page / "r.html").read_text()
    assert "[{" not in html and "{&#x27;x&#x27;" not in html  # no raw Python list of dicts
    table = re.search(r'<table class="inputs">.*?</table>', html).group(0)
    assert "<th>dtype</th><td>float32</td>" in table
    assert [m for m in re.findall(r"<th>sample (\d)</th><td>([^<]*)</td>", table)] == \
        [("1", "2×3×32×32"), ("2", "2×3×32×32"), ("3", "3×3×32×32")]
    assert re.search(r"<th>latency</th><td>torch [\d.]+ ms, onnx [\d.]+ ms", html)
    assert re.findall(r'class="ylabel"[^>]*>([\d,]+)<', html)[:3] == ["1", "10", "100"]


def test_histogram_counts_are_on_the_y_axis():
    svg = histogram_svg({"name": "y", "error_histogram": [0, 5, 0, 120_000, 3, 0, 0, 0, 0, 0, 0, 0], "atol": 1e-4})
    assert re.findall(r'class="ylabel"[^>]*>([\d,]+)<', svg) == ["1", "10", "100", "1,000", "10,000", "100,000"]
    assert re.findall(r'class="count"[^>]*>([\d,]+)<', svg) == ["5", "120,000", "3"]
    assert svg.count('class="xlabel"') == 12 and svg.count("rotate(-45") == 12


def test_a_report_without_inputs_or_latency_still_renders():
    rep = {"status": "blocked", "tool": {"command": "adapt"}, "source": {}, "hops": [], "notes": [], "warnings": [],
           "environment": {"python": "3", "platform": "x", "packages": {}}, "blockers": ["b"]}
    html = render(rep)
    assert 'class="inputs"' not in html and "<th>latency</th>" not in html and "<li>b</li>" in html


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_chromium_lays_the_histogram_labels_out_apart(page, tmp_path):
    measured = tmp_path / "measured.html"
    measured.write_text((page / "r.html").read_text().replace("</body>", MEASURE + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--virtual-time-budget=5000"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", measured.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    found = re.search(r'<pre id="measured">labels=(\d+) overlaps=(\d+) outside=(\d+)</pre>', dom)
    assert found, dom[-2000:]
    labels, overlaps, outside = map(int, found.groups())
    assert labels == 12 and overlaps == 0 and outside == 0, found.group(0)
    assert "sample 3" in dom and "latency" in dom
