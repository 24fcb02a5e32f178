"""A self-contained HTML page: status, a diagram of the hops, and per output its metrics and a histogram of
absolute errors (inline SVG: no scripts, no network)."""
from __future__ import annotations

import math
from html import escape

from onnxbridge.compare import HISTOGRAM_EDGES
from onnxbridge.renderers import chains, verdict

COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "skipped": "#757575", "blocked": "#c62828"}
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
    """Bars of |error| counts per decade (log-scaled heights); a red line marks the output's atol."""
    counts = out.get("error_histogram")
    if not counts:
        return ""
    w, h, bar = 420, 150, 420 // len(counts)
    top = math.log10(max(counts) + 1) or 1.0
    parts = [f'<svg class="histogram" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 40}" role="img" '
             f'aria-label="absolute error histogram of {escape(out["name"])}">']
    for i, c in enumerate(counts):
        bh = (math.log10(c + 1) / top) * h
        x = i * bar
        parts.append(f'<rect x="{x + 2}" y="{h - bh:.1f}" width="{bar - 4}" height="{bh:.1f}" fill="#1565c0">'
                     f"<title>{_bin_label(i)}: {c} elements</title></rect>")
        parts.append(f'<text x="{x + bar / 2}" y="{h + 14}" font-size="9" text-anchor="middle">{_bin_label(i)}</text>')
    atol = out.get("atol")
    if atol:  # bin i >= 1 starts at 10**(i - 10): place atol on that log scale
        x = min(max(math.log10(atol) + 10, 1), len(counts)) * bar
        parts.append(f'<line x1="{x}" y1="0" x2="{x}" y2="{h}" stroke="#c62828" stroke-dasharray="4"/>'
                     f'<text x="{x - 3}" y="12" font-size="10" fill="#c62828" text-anchor="end">atol {atol:g}</text>')
    parts.append(f'<text x="0" y="{h + 32}" font-size="10">|converted − reference| per element '
                 f'(log count)</text></svg>')
    return "".join(parts)


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
    method = escape(hop.get("latency_method", ""))
    return (f'<table class="ran"><tr><th>side</th><th>what ran</th><th>latency ({method})</th></tr>'
            + "".join(rows) + "</table>")


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
        rows.append(("inputs", escape(f"{report['inputs']['origin']}; shapes {report['inputs']['samples']}")))
    env = report["environment"]
    rows.append(("environment", escape(f"Python {env['python']}, {env['platform']}, " +
                                       ", ".join(f"{k} {v}" for k, v in env["packages"].items()))))
    body += [_table(rows), hop_diagram_svg(report)]
    for hop in report["hops"]:
        tol = hop["tolerance"]
        body.append(f'<h2>{escape(hop["from"])} → {escape(hop["to"])}: '
                    f'<span style="color:{COLOURS[hop["status"]]}">{hop["status"]}</span></h2>'
                    f'<p>{hop["samples"]} sample(s); {escape(tol["precision"])} tolerance atol {tol["atol"]:g}, '
                    f'rtol {tol["rtol"]:g}{"; " + escape(tol["reason"]) if tol.get("reason") else ""}</p>')
        body += [f'<p class="fail">error: {escape(e)}</p>' for e in hop["errors"]]
        body.append(_ran(hop))
        drift = hop.get("vs_source")
        if drift:
            worst = max((o.get("max_abs", 0.0) for o in drift["outputs"]), default=0.0)
            state = "within tolerance" if drift["passed"] else '<b class="fail">outside tolerance</b>'
            body.append(f"<p>against the source framework: {state} (max abs {worst:.3g})</p>")
        for out in hop["outputs"]:
            mark = "ok" if out["passed"] else '<b class="fail">FAIL</b>'
            body.append(f'<div class="out" id="output-{escape(out["name"])}"><h3><code>{escape(out["name"])}</code> '
                        f'{mark}</h3><p>{escape(verdict(out))}</p>'
                        f'<p>shape {"×".join(map(str, out["shape"]))}, {escape(out["dtype"])}</p>'
                        f"{histogram_svg(out)}</div>")
        body += [f"<p>note: {escape(n)}</p>" for n in hop["notes"]]
    if report.get("blockers"):
        body.append("<h2>Blockers</h2><ul>" + "".join(f"<li>{escape(b)}</li>" for b in report["blockers"]) + "</ul>")
    for title, key in (("Notes", "notes"), ("Warnings", "warnings")):
        if report[key]:
            body.append(f"<h2>{title}</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in report[key]) + "</ul>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>onnxbridge report: {escape(status)}'
            f"</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")
