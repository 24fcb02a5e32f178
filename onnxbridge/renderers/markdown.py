"""A Markdown summary for CI comments: status, the chain of hops, one table row per output."""
from __future__ import annotations

from onnxbridge.renderers import chains, output_rows

MARK = {"passed": "✅", "failed": "❌", "skipped": "⏭️", "blocked": "⛔"}


def _cell(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def render(report: dict) -> str:
    src, art = report["source"], report.get("artifact") or {}
    lines = [f"### onnxbridge {report['tool']['command']}: {MARK.get(report['status'], '')} {report['status']}", ""]
    lines.append(f"**Source:** {src.get('description') or src.get('kind')} ({src.get('framework')})  ")
    if art:
        opset = f", opset {art['opset']}" if "opset" in art else ""
        lines.append(f"**Artifact:** `{art['path']}` ({art['format']}{opset}, {art['bytes']:,} bytes)  ")
    if report["hops"]:
        runs = [" → ".join([run[0]["from"], *(f"{h['to']} {MARK[h['status']]}" for h in run)])
                for run in chains(report["hops"])]
        lines.append(f"**Hops:** {'; '.join(runs)}  ")
    if report.get("latency_s"):
        lines.append("**Latency:** " + ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in report["latency_s"].items())
                     + "  ")
    if report.get("introduced_by"):
        lines.append(f"**Difference introduced by:** {report['introduced_by']}")
    lines.append("")
    if report["hops"]:
        lines += ["| hop | output | shape | max abs | max rel | cosine | out of tol | needs atol | top-1 | |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for hop, out in output_rows(report):
            numeric = out.get("kind") == "numeric"
            lines.append("| " + " | ".join([
                f"{hop['from']} → {hop['to']}", f"`{out['name']}`", "×".join(map(str, out["shape"])),
                _cell(out["max_abs"]) if numeric else "-", _cell(out["max_rel"]) if numeric else "-",
                f"{out['cosine']:.6f}" if numeric else "-", f"{out.get('mismatch_fraction', 0):.2%}",
                _cell(out["required_atol"]) if numeric else "-",
                f"{out['top1_agreement']:.2%}" if "top1_agreement" in out else "-",
                "✅" if out["passed"] else "❌ " + (out.get("error") or out.get("reason") or "")]) + " |")
        for hop in report["hops"]:
            lines += [f"- ❌ {hop['from']} → {hop['to']}: {e}" for e in hop["errors"]]
            if hop["status"] == "skipped":
                lines.append(f"- ⏭️ {hop['from']} → {hop['to']}: skipped: {hop.get('skipped_reason', 'not run')}")
            drift = hop.get("vs_source")
            if drift and not drift["passed"]:
                worst = max((o.get("max_abs", 0.0) for o in drift["outputs"]), default=0.0)
                lines.append(f"- {hop['to']} against the source: outside tolerance (max abs {worst:.3g})")
    if report.get("blockers"):
        lines += ["", "**Blockers:**", *(f"- {b}" for b in report["blockers"])]
    if report["notes"]:
        lines += ["", "<details><summary>Notes</summary>", "", *(f"- {n}" for n in report["notes"]), "", "</details>"]
    return "\n".join(lines).rstrip() + "\n"
