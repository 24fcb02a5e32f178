"""A Markdown summary for CI comments: status, the chain of hops, warm latency with its method, one table row per
output (max abs, cosine, SNR dB, the failed check), per hop the tolerance rule that judged it, and per failed hop
its first divergent node with the trace around it."""
from __future__ import annotations

from onnxbridge.renderers import chains, output_rows
from onnxbridge.renderers.text import md_code, md_text
from onnxbridge.report import (budget_text, dynamic_axes_text, localization_summary, snr_cell, tolerance_text,
                               trace_cells, trace_window)

MARK = {"passed": "✅", "failed": "❌", "skipped": "⏭️", "blocked": "⛔"}


def _num(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def localization_lines(hop: dict) -> list[str]:
    """A failed hop's localization: one line naming the first divergent node, and the trace around it (``#``: the
    tensor's position among the hop's checkpoints where the engine gives it)."""
    where = localization_summary(hop, quote=md_code, text=md_text)
    if hop["status"] != "failed" or not where:
        return []
    loc = hop["localization"]
    lines = [f"- 🔎 {hop['from']} → {hop['to']}: {where} ({md_text(loc.get('method') or '')})"]
    rows, culprit = trace_window(loc)
    if not rows:
        return lines
    lines += ["", "| # | node | output | max abs | max rel | cosine | |", "|---:|---|---|---:|---:|---:|---|"]
    for at, t in rows:
        mark = "✅" if t.get("passed") else "❌"
        if at == culprit and loc.get("first_divergent"):
            mark += " **← first divergent**"
        if t.get("error"):  # not comparable, or NaN/inf on one side, in words
            mark += " " + md_text(t["error"])
        lines.append("| " + " | ".join([str(t.get("index", at)), md_code(t.get("node")), md_code(t.get("output")),
                                        *trace_cells(t), mark]) + " |")
    return lines + [""]


def render(report: dict) -> str:
    src, art = report["source"], report.get("artifact") or {}
    lines = [f"### onnxbridge {report['tool']['command']}: {MARK.get(report['status'], '')} {report['status']}", ""]
    lines.append(f"**Source:** {md_text(src.get('description') or src.get('kind'))} "
                 f"({md_text(src.get('framework'))})  ")
    if art:
        opset = f", opset {art['opset']}" if "opset" in art else ""
        lines.append(f"**Artifact:** {md_code(art['path'])} ({md_text(art['format'])}{opset}, "
                     f"{art['bytes']:,} bytes)  ")
    if report["hops"]:
        runs = [" → ".join([run[0]["from"], *(f"{h['to']} {MARK[h['status']]}" for h in run)])
                for run in chains(report["hops"])]
        lines.append(f"**Hops:** {'; '.join(runs)}  ")
    if report.get("latency_s"):
        method = next((h["latency_method"] for h in report["hops"] if h.get("latency_method")
                       and any(v is not None for v in (h.get("latency_s") or {}).values())), None)
        lines.append("**Latency:** " + ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in report["latency_s"].items()
                                                 if v is not None)
                     + (f" ({method})" if method else "") + "  ")
    if report.get("introduced_by"):
        lines.append(f"**Difference introduced by:** {report['introduced_by']}")
    lines.append("")
    if report["hops"]:
        lines += ["| hop | output | shape | max abs | max rel | cosine | SNR dB | out of tol | needs atol | top-1 | |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for hop, out in output_rows(report):
            numeric = out.get("kind") == "numeric"
            why = out.get("error") or out.get("failed_check") or out.get("reason") or ""
            lines.append("| " + " | ".join([
                f"{hop['from']} → {hop['to']}", md_code(out["name"]), "×".join(map(str, out["shape"])),
                _num(out.get("max_abs")) if numeric else "-", _num(out.get("max_rel")) if numeric else "-",
                _num(out.get("cosine"), ".6f") if numeric else "-", snr_cell(out) if numeric else "-",
                f"{out.get('mismatch_fraction', 0):.2%}",
                _num(out.get("required_atol")) if numeric else "-",
                f"{out['top1_agreement']:.2%}" if "top1_agreement" in out else "-",
                "✅" if out["passed"] else "❌ " + md_text(why)]) + " |")
        lines.append("")
        for hop in report["hops"]:
            rule = tolerance_text(hop)
            if rule:
                lines.append(f"- ⚖️ {hop['from']} → {hop['to']}: {md_text(rule)}")
            dyn = dynamic_axes_text(hop)
            if dyn:
                lines.append(f"- {'↔️' if (hop.get('dynamic_axes') or {}).get('exercised') else '⚠️'} "
                             f"{hop['from']} → {hop['to']}: {md_text(dyn)}")
            for out in hop["outputs"]:
                if not out["passed"] and budget_text(out):
                    lines.append(f"- ❌ {hop['from']} → {hop['to']}: {md_code(out['name'])} "
                                 f"{md_text(budget_text(out))}")
            lines += [f"- ❌ {hop['from']} → {hop['to']}: {md_text(e)}" for e in hop["errors"]]
            if hop["status"] == "skipped":
                lines.append(f"- ⏭️ {hop['from']} → {hop['to']}: skipped: "
                             f"{md_text(hop.get('skipped_reason', 'not run'))}")
            drift = hop.get("vs_source")
            if drift and not drift["passed"]:
                worst = max((o.get("max_abs", 0.0) for o in drift["outputs"]), default=0.0)
                lines.append(f"- {hop['to']} against the source: outside tolerance (max abs {worst:.3g})")
            lines += localization_lines(hop)
    if report.get("blockers"):
        lines += ["", "**Blockers:**", *(f"- {md_text(b)}" for b in report["blockers"])]
    if report["notes"]:
        lines += ["", "<details><summary>Notes</summary>", "", *(f"- {md_text(n)}" for n in report["notes"]), "",
                  "</details>"]
    return "\n".join(lines).rstrip() + "\n"
