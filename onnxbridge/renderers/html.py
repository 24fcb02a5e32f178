"""A self-contained HTML page: status, a diagram of the hops, per hop the tolerance rule that judged it and its
warm latency with the method, per output its metrics (max abs, cosine, SNR dB, the failed check and the budget) and a
histogram of absolute errors, and per failed hop a plot of the error along the graph with the first divergent node
marked (inline SVG: no scripts, no network)."""
from __future__ import annotations

import math
from html import escape

from onnxbridge.compare import HISTOGRAM_EDGES
from onnxbridge.renderers import chains, verdict
from onnxbridge.renderers.text import xml_safe
from onnxbridge.report import (dynamic_axes_text, localization_summary, snr_cell, tolerance_text, trace_cells,
                               trace_window)

COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "skipped": "#757575", "blocked": "#c62828"}
FLOOR = -12  # the plot's lowest decade: equal tensors (max abs 0) sit there
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1 span{color:#fff;border-radius:4px;padding:2px 10px;font-size:70%}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 8px;font-size:90%}th{background:#f4f4f4}.fail{color:#c62828}
.out{display:inline-block;vertical-align:top;margin:0 1.5em 1.5em 0}code{background:#f4f4f4;padding:0 3px}"""


def _bin_label(i: int) -> str:
    if i == 0:
        return f"<{HISTOGRAM_EDGES[1]:.0e}"
    if i == len(HISTOGRAM_EDGES) - 1:
        return f"≥{HISTOGRAM_EDGES[-1]:.0e}"
    return f"{HISTOGRAM_EDGES[i]:.0e}"


def histogram_svg(out: dict) -> str:
    """Bars of |error| counts per decade (log-scaled heights) over a y axis of counts (1, 10, 100, ...; each bar's
    count also on top of it), decade labels slanted so they never overlap; a red line marks the output's atol."""
    counts = out.get("error_histogram")
    if not counts:
        return ""
    left, w, h, top_pad = 44, 420, 150, 14
    bar = w // len(counts)
    top = math.log10(max(counts) + 1) or 1.0

    def y_of(count: float) -> float:
        return top_pad + h - (math.log10(count + 1) / top) * h

    parts = [f'<svg class="histogram" xmlns="http://www.w3.org/2000/svg" width="{left + w + 10}" '
             f'height="{top_pad + h + 70}" role="img" aria-label="absolute error histogram of {escape(out["name"])}">']
    decades = int(math.floor(math.log10(max(max(counts), 1))))
    every = max(1, math.ceil((decades + 1) / 6))
    for d in range(0, decades + 1, every):  # y axis: counts at decades, on the bars' log scale
        y = y_of(10 ** d)
        parts.append(f'<line class="ytick" x1="{left - 3}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text class="ylabel" x="{left - 5}" y="{y + 3:.1f}" font-size="9" text-anchor="end">'
                     f'{10 ** d:,}</text>')
    parts.append(f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{top_pad + h}" stroke="#555"/>'
                 f'<line x1="{left}" y1="{top_pad + h}" x2="{left + w}" y2="{top_pad + h}" stroke="#555"/>')
    for i, c in enumerate(counts):
        y = y_of(c)
        x = left + i * bar
        parts.append(f'<rect x="{x + 2}" y="{y:.1f}" width="{bar - 4}" height="{top_pad + h - y:.1f}" '
                     f'fill="#1565c0"><title>{_bin_label(i)}: {c} elements</title></rect>')
        if c:
            parts.append(f'<text class="count" x="{x + bar / 2}" y="{y - 2:.1f}" font-size="8" '
                         f'text-anchor="middle">{c:,}</text>')
        lx, ly = x + bar / 2 + 3, top_pad + h + 10
        parts.append(f'<text class="xlabel" x="{lx}" y="{ly}" font-size="9" text-anchor="end" '
                     f'transform="rotate(-45 {lx} {ly})">{_bin_label(i)}</text>')
    atol = out.get("atol")
    if atol:  # bin i >= 1 starts at 10**(i - 10): place atol on that log scale
        x = left + min(max(math.log10(atol) + 10, 1), len(counts)) * bar
        parts.append(f'<line x1="{x}" y1="{top_pad}" x2="{x}" y2="{top_pad + h}" stroke="#c62828" '
                     f'stroke-dasharray="4"/><text x="{x - 3}" y="{top_pad + 10}" font-size="10" fill="#c62828" '
                     f'text-anchor="end">atol {atol:g}</text>')
    parts.append(f'<text x="{left}" y="{top_pad + h + 62}" font-size="10">|converted − reference| per element; '
                 f'elements per bin (log scale)</text></svg>')
    return "".join(parts)


def inputs_table(report: dict) -> str:
    """The validation inputs: one row per sample with every input's shape, a row of dtypes (from the source's
    input specs), and where the first sample came from."""
    info = report.get("inputs") or {}
    samples = info.get("samples") or []
    specs = {i.get("name"): i for i in (report.get("source") or {}).get("inputs") or [] if isinstance(i, dict)}
    names = list(dict.fromkeys([n for s in samples for n in s] or list(specs)))
    if not names:
        return ""
    head = "".join(f"<th><code>{escape(str(n))}</code></th>" for n in names)
    rows = ["<tr><th>dtype</th>" + "".join(f"<td>{escape(str(specs.get(n, {}).get('dtype') or '-'))}</td>"
                                              for n in names) + "</tr>"] if specs else []
    for i, sample in enumerate(samples):
        cells = "".join(f"<td>{escape('×'.join(map(str, sample[n]))) if n in sample else '-'}</td>" for n in names)
        rows.append(f"<tr><th>sample {i + 1}</th>{cells}</tr>")
    origin = f'<p>from {escape(str(info["origin"]))}</p>' if info.get("origin") else ""
    return f'<table class="inputs"><tr><th></th>{head}</tr>{"".join(rows)}</table>{origin}'


def _log_error(entry: dict) -> float | None:
    """log10 of a traced tensor's max abs error (floored at 1e``FLOOR``; inf above everything, as is a failed
    tensor with NaN/inf values: its max abs covers the finite values only); None when unknown."""
    if not entry.get("passed", True) and (entry.get("nonfinite_output") or entry.get("nonfinite_reference")):
        return math.inf
    value = entry.get("max_abs")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return math.inf if value == math.inf else math.log10(max(float(value), 10.0 ** FLOOR))


def _num(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _short(text: str, chars: int = 60) -> str:
    text = str(text)
    return text if len(text) <= chars else text[:chars - 1] + "…"


def localization_svg(hop: dict) -> str:
    """log10 max abs error per traced tensor in topological order, red where out of tolerance; a dashed line and a
    label mark the first divergent node. Every name is escaped (names come from the user's model)."""
    loc = hop.get("localization") or {}
    trace = list(loc.get("trace") or ())
    logs = [_log_error(t) for t in trace]
    known = [v for v in logs if v is not None and math.isfinite(v)]
    if not trace or not any(v is not None for v in logs):
        return ""
    lo = math.floor(min(known, default=0.0))
    hi = max(math.ceil(max(known, default=0.0)), lo + 1)
    left, top, ph = 56, 28, 170  # margins and plot height
    pw = min(max(len(trace) * 14, 440), 940)
    step = pw / max(len(trace) - 1, 1)

    def y_of(v: float) -> float:
        return top + (1 - (min(v, hi) - lo) / (hi - lo)) * ph

    first = loc.get("first_divergent")
    _, culprit = trace_window(loc)
    culprit = culprit if first else None
    parts = [(f'<svg class="localization" xmlns="http://www.w3.org/2000/svg" width="{left + pw + 20}" '
              f'height="{top + ph + 46}" role="img" aria-label="error per traced tensor of '
              f'{escape(hop["from"])} → {escape(hop["to"])}">')]
    every = max(1, math.ceil((hi - lo) / 8))
    for d in range(lo, hi + 1, every):  # decade grid lines and labels
        y = y_of(d)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e0e0e0"/>'
                     f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="9" text-anchor="end">'
                     f'{"≤" if d == FLOOR else ""}1e{d}</text>')
    points = [(left + i * step, y_of(v)) for i, v in enumerate(logs) if v is not None]
    parts.append('<polyline fill="none" stroke="#90a4ae" stroke-width="1" points="'
                 + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
    for i, (t, v) in enumerate(zip(trace, logs)):
        if v is None:
            continue
        x, y = left + i * step, y_of(v)
        colour = COLOURS["passed"] if t.get("passed") else COLOURS["failed"]
        cells = trace_cells(t)
        tip = (f"#{t.get('index', i)} {t.get('node')} → {t.get('output')}: max abs {cells[0]}, "
               f"max rel {cells[1]}, cosine {cells[2]}"
               + (f"; {t['error']}" if t.get("error") else ""))
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{5 if i == culprit else 3}" fill="{colour}"'
                     + (' stroke="#000" stroke-width="1.5"' if i == culprit else "")
                     + f"><title>{escape(tip)}</title></circle>")
    if culprit is not None:
        x = left + culprit * step
        label = f"first divergent: {_short(first['node'])}" + (f" ({_short(first['source'], 40)})"
                                                                if first.get("source") else "")
        room = len(label) * 6.2  # roughly, at font-size 11
        anchor = "start" if x + 4 + room <= left + pw + 20 else "end" if x - 4 - room >= 0 else "middle"
        x_text = {"start": x + 4, "end": x - 4, "middle": (left + pw) / 2}[anchor]
        parts.append(f'<line class="culprit" x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{top + ph}" '
                     f'stroke="{COLOURS["failed"]}" stroke-dasharray="4"/>'
                     f'<text class="culprit" x="{x_text:.1f}" y="{top - 10}" '
                     f'font-size="11" fill="{COLOURS["failed"]}" text-anchor="{anchor}">{escape(label)}</text>')
    of = f" of {loc['checkpoints']} checkpoints" if loc.get("checkpoints") else ""
    parts.append(f'<text x="{left}" y="{top + ph + 18}" font-size="10">traced tensors in topological order '
                 f'({len(trace)}{of}); red: out of tolerance</text>'
                 f'<text x="12" y="{top + ph / 2:.1f}" font-size="10" text-anchor="middle" '
                 f'transform="rotate(-90 12 {top + ph / 2:.1f})">max abs error (log)</text></svg>')
    return "".join(parts)


def localization_html(hop: dict) -> str:
    """A failed hop's localization: the line naming the first divergent node, the plot, the trace around it."""
    where = localization_summary(hop)
    if hop["status"] != "failed" or not where:
        return ""
    loc = hop["localization"]
    cls = ' class="fail"' if loc.get("first_divergent") else ""
    timing = f", {loc['seconds']:.3g} s" if loc.get("seconds") is not None else ""
    html = [f'<div class="localization"><p{cls}><b>{escape(where)}</b></p>',
            f'<p>localization: {escape(str(loc.get("method") or ""))}{escape(timing)}</p>', localization_svg(hop)]
    rows, culprit = trace_window(loc)
    if rows:
        html.append("<table><tr><th>#</th><th>node</th><th>output</th><th>max abs</th><th>max rel</th>"
                    "<th>cosine</th><th></th></tr>")
        for at, t in rows:
            mark = "ok" if t.get("passed") else '<b class="fail">FAIL</b>'
            if at == culprit and loc.get("first_divergent"):
                mark += ' <b class="fail">← first divergent</b>'
            if t.get("error"):
                mark += f" {escape(str(t['error']))}"
            html.append(f"<tr><td>{t.get('index', at)}</td><td><code>{escape(str(t.get('node')))}</code></td>"
                        f"<td><code>{escape(str(t.get('output')))}</code></td>"
                        + "".join(f"<td>{escape(cell)}</td>" for cell in trace_cells(t))
                        + f"<td>{mark}</td></tr>")
        html.append("</table>")
    return "".join(html) + "</div>"


def hop_diagram_svg(report: dict) -> str:
    """Boxes for each stage joined by arrows coloured by the hop's status, one row per chain of hops."""
    rows = chains(report["hops"])
    if not rows:
        return ""
    box, gap, height = 130, 70, 70
    width = max(len(r) + 1 for r in rows) * (box + gap) - gap
    parts = [f'<svg class="hops" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * len(rows)}" '
             'role="img" aria-label="validation hops">']
    for r, hops in enumerate(rows):
        y = r * height
        stages = [hops[0]["from"], *(h["to"] for h in hops)]
        for i, stage in enumerate(stages):
            x = i * (box + gap)
            parts.append(f'<rect x="{x}" y="{y + 10}" width="{box}" height="40" rx="6" fill="#f4f4f4" stroke="#555"/>'
                         f'<text x="{x + box / 2}" y="{y + 35}" text-anchor="middle" font-size="13">{escape(stage)}</text>')
            if i < len(hops):
                colour = COLOURS[hops[i]["status"]]
                x1, x2 = x + box, x + box + gap
                parts.append(f'<line x1="{x1}" y1="{y + 30}" x2="{x2 - 6}" y2="{y + 30}" stroke="{colour}" '
                             f'stroke-width="3"/><polygon points="{x2},{y + 30} {x2 - 8},{y + 25} {x2 - 8},{y + 35}" '
                             f'fill="{colour}"/><text x="{(x1 + x2) / 2}" y="{y + 62}" text-anchor="middle" '
                             f'font-size="10" fill="{colour}">{hops[i]["status"]}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ran(hop: dict) -> str:
    """What ran on each side of a hop and how long a run took there (latency), as a small table."""
    sides = list(dict.fromkeys([hop["from"], hop["to"], *hop.get("runtimes", {}), *hop.get("latency_s", {})]))
    rows = []
    for side in sides:
        seconds = hop.get("latency_s", {}).get(side)
        what = hop.get("runtimes", {}).get(side)
        if seconds is None and not what:
            continue
        rows.append(f"<tr><th>{escape(side)}</th><td>{escape(what or '')}</td>"
                    f"<td>{'' if seconds is None else f'{seconds * 1e3:.3g} ms'}</td></tr>")
    if not rows:
        return ""
    timed = any(v is not None for v in (hop.get("latency_s") or {}).values())
    method = hop.get("latency_method") if timed else None
    head = "latency" + (f" ({escape(method)})" if method else "") if timed else ""
    return (f'<table class="ran"><tr><th>side</th><th>what ran</th><th>{head}</th></tr>'
            + "".join(rows) + "</table>")


def _metrics(out: dict) -> str:
    """The deciding figures of a numeric output at a glance: max abs, cosine, SNR dB (and the check that failed)."""
    if out.get("kind") != "numeric" or "error" in out:
        return ""
    cells = [("max abs", _num(out.get("max_abs"))), ("cosine", _num(out.get("cosine"), ".6f")),
             ("SNR dB", snr_cell(out))]
    if out.get("rel_rms") is not None:
        cells.append(("rel rms", _num(out["rel_rms"])))
    html = ('<table class="metrics"><tr>' + "".join(f"<th>{k}</th>" for k, _ in cells) + "</tr><tr>"
            + "".join(f"<td>{escape(v)}</td>" for _, v in cells) + "</tr></table>")
    if not out["passed"] and out.get("failed_check"):
        html += f'<p class="fail failed-check">{escape(out["failed_check"])}</p>'
    return html


def _table(rows: list[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def render(report: dict) -> str:
    status = report["status"]
    src, art = report["source"], report.get("artifact")
    body = [f'<h1>onnxbridge {escape(report["tool"]["command"])} '
            f'<span style="background:{COLOURS.get(status, "#555")}">{escape(status)}</span></h1>']
    rows = [("source", escape(f"{src.get('description') or ''} ({src.get('framework')}, {src.get('kind')})"))]
    if art:
        opset = f", opset {art['opset']}" if "opset" in art else ""
        rows.append(("artifact", f"<code>{escape(art['path'])}</code> ({escape(art['format'])}{opset}, "
                                 f"{art['bytes']:,} bytes)"))
    if report.get("introduced_by"):
        rows.append(("difference introduced by", f'<b class="fail">{escape(report["introduced_by"])}</b>'))
    if report.get("inputs"):
        rows.append(("inputs", inputs_table(report)))
    if report.get("latency_s"):
        method = next((h["latency_method"] for h in report["hops"] if h.get("latency_method")
                       and any(v is not None for v in (h.get("latency_s") or {}).values())), None)
        rows.append(("latency", escape(", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in report["latency_s"].items()
                                                  if v is not None) + (f" ({method})" if method else ""))))
    env = report["environment"]
    rows.append(("environment", escape(f"Python {env['python']}, {env['platform']}, " +
                                       ", ".join(f"{k} {v}" for k, v in env["packages"].items()))))
    body += [_table(rows), hop_diagram_svg(report)]
    for hop in report["hops"]:
        tol = hop.get("tolerance") or {}
        if tol.get("rule"):
            judged = f'<span class="tolerance">{escape(tolerance_text(hop))}</span>'
        else:  # before 1.8: the precision's elementwise tolerance
            judged = (f'{escape(str(tol.get("precision", "")))} tolerance atol {tol.get("atol", 0):g}, '
                      f'rtol {tol.get("rtol", 0):g}{"; " + escape(tol["reason"]) if tol.get("reason") else ""}')
        body.append(f'<h2>{escape(hop["from"])} → {escape(hop["to"])}: '
                    f'<span style="color:{COLOURS[hop["status"]]}">{hop["status"]}</span></h2>'
                    f'<p>{hop.get("samples", 0)} sample(s); {judged}</p>')
        dyn = dynamic_axes_text(hop)
        if dyn:
            exercised = (hop.get("dynamic_axes") or {}).get("exercised")
            body.append(f'<p class="dynamic{"" if exercised else " fail"}">{escape(dyn)}</p>')
        if hop.get("status") == "skipped" and hop.get("skipped_reason") and \
                f"skipped: {hop['skipped_reason']}" not in hop.get("notes", ()):
            body.append(f"<p>skipped: {escape(hop['skipped_reason'])}</p>")
        body += [f'<p class="fail">error: {escape(e)}</p>' for e in hop["errors"]]
        body.append(localization_html(hop))
        body.append(_ran(hop))
        drift = hop.get("vs_source")
        if drift:
            worst = max((o.get("max_abs", 0.0) for o in drift["outputs"]), default=0.0)
            state = "within tolerance" if drift["passed"] else '<b class="fail">outside tolerance</b>'
            body.append(f"<p>against the source framework: {state} (max abs {worst:.3g})</p>")
        for out in hop["outputs"]:
            mark = "ok" if out["passed"] else '<b class="fail">FAIL</b>'
            body.append(f'<div class="out" id="output-{escape(out["name"])}"><h3><code>{escape(out["name"])}</code> '
                        f'{mark}</h3>{_metrics(out)}<p>{escape(verdict(out))}</p>'
                        f'<p>shape {"×".join(map(str, out["shape"]))}, {escape(str(out.get("dtype", "")))}</p>'
                        f"{histogram_svg(out)}</div>")
        body += [f"<p>note: {escape(n)}</p>" for n in hop["notes"]]
    if report.get("blockers"):
        body.append("<h2>Blockers</h2><ul>" + "".join(f"<li>{escape(b)}</li>" for b in report["blockers"]) + "</ul>")
    for title, key in (("Notes", "notes"), ("Warnings", "warnings")):
        if report[key]:
            body.append(f"<h2>{title}</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in report[key]) + "</ul>")
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>onnxbridge report: {escape(status)}'
            f"</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")
    return xml_safe(page)  # names are escaped where they are written; a control character in one is not text
