"""The report: one plain dict per run, versioned, written as JSON and rendered for the terminal."""
from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable, Iterable
from pathlib import Path

from onnxbridge._version import __version__
from onnxbridge.registry import dist_version

SCHEMA_VERSION = "1.7"  # 1.1: status "blocked", blockers, command "check"; 1.2: histograms, top-1, per-output tol;
# 1.3: hops compared with the source too (vs_source), introduced_by, skipped hops with skipped_reason, check
# --targets (targets), backend artifacts without opset/ir_version; 1.4: artifact.precision (what was applied), hop
# runtimes (what ran) and artifact_checked/artifact_check, output reason (NaN/inf) and reference_dtype; 1.5: check
# --targets hints (per blocker) and rewrites (legalization rules a build applies); 1.6: hop localization (the
# first divergent node of a failed hop, the trace of compared intermediates); 1.7: artifact.optimization (--optimize)
SCHEMA_PATH = Path(__file__).with_name("schemas") / "report.schema.json"


def environment(frameworks: Iterable[str] = ()) -> dict:
    """Versions that decide the numbers: Python, platform, onnx stack and the source framework."""
    dists = ["onnx", "onnxruntime", "onnx-ir", "numpy", *frameworks]
    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "onnxbridge": __version__,
        "packages": {d: dist_version(d) for d in dict.fromkeys(dists)},
    }


def new_report(command: str, *, source: dict, frameworks: Iterable[str] = ()) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "onnxbridge", "version": __version__, "command": command},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "status": "running",
        "source": source,
        "artifact": None,
        "inputs": None,
        "hops": [],
        "timings": {},
        "environment": environment(frameworks),
        "notes": [],
        "warnings": [],
    }


def finish(report: dict, *, validated: bool) -> dict:
    """Set ``status``: failed if any hop failed, passed if all passed, skipped if nothing was compared."""
    hops = report["hops"]
    latency: dict[str, float] = {}  # one figure per runtime along the chain (source, onnxruntime, backend)
    for hop in hops:
        for runtime, seconds in hop["latency_s"].items():
            if seconds is not None:
                latency.setdefault(runtime, seconds)
    if latency:
        report["latency_s"] = latency
    failed = sorted((h for h in hops if h["status"] == "failed"), key=lambda h: _chain_position(h, hops))
    if failed:  # the first failing hop along the chain introduced the difference; later ones carried it
        report["status"] = "failed"
        report["introduced_by"] = f"{failed[0]['from']} -> {failed[0]['to']}"
    elif validated and hops and all(h["status"] == "passed" for h in hops):
        report["status"] = "passed"
    else:
        report["status"] = "skipped"
    return report


def _chain_position(hop: dict, hops: list[dict]) -> int:
    """Where a hop's comparison sits along source -> exported ONNX -> adapted ONNX -> backend. The first hop
    spans source -> adapted ONNX, so the adapters' own hop (``onnx@N -> onnx@M``) lies inside it and comes first:
    both failing puts the difference on the adapters, the first alone on the exporter."""
    if hop["from"].startswith("onnx@"):
        return 0
    return 1 if hop is hops[0] else 2


def failure_summary(report: dict) -> str:
    """One line naming the failing hop and outputs, and where localization found the difference start."""
    parts = []
    for h in report["hops"]:
        if h["status"] != "failed":
            continue
        bad = [o for o in h["outputs"] if not o["passed"]]
        detail = ", ".join(f"{o['name']} ({o['reason']})" if o.get("reason") else
                           f"{o['name']} (max abs {o['max_abs']:.3g}, needs atol {o['required_atol']:.3g})"
                           if "max_abs" in o else f"{o['name']} ({o.get('error') or 'values differ'})" for o in bad)
        parts.append(f"{h['from']} -> {h['to']}: " + "; ".join(filter(None, [detail, "; ".join(h["errors"])[:300],
                                                                           localization_summary(h)])))
    return "validation failed: " + "; ".join(parts)


# What a first divergent node's ``source`` names, by the hop's target (``to``) or source framework (``from``);
# ONNX -> ONNX hops (adapters, ``validate a.onnx b.onnx``) name the converted model's node.
SOURCE_KINDS = {"coreml": "MIL op", "qnn-htp-simulator": "ONNX node", "tensorrt": "ONNX node",
                "openvino": "ONNX node", "torch": "torch module", "tensorflow": "Keras layer", "paddle": "Paddle op"}


def source_kind(hop: dict) -> str:
    """What the ``source`` of a hop's first divergent node is, in words (``torch module``, ``MIL op``, ...)."""
    for side in (hop.get("to"), hop.get("from")):
        if side in SOURCE_KINDS:
            return SOURCE_KINDS[side]
    side = str(hop.get("from", ""))
    if side == "onnx":  # an ONNX source (validate a.onnx b.onnx): the source model's node
        return "source node"
    return "adapted node" if side.startswith("onnx@") else "source"


def localization_summary(hop: dict, quote: Callable[[str], str] = str) -> str | None:
    """One line on a hop's ``localization``: the first divergent node, its source name and error, the runs it
    took; or why localization was skipped. None when the hop has no localization. ``quote`` formats the names
    that come from the user's model (node, output, source), e.g. as Markdown code spans."""
    loc = hop.get("localization")
    if not loc:
        return None
    if "skipped" in loc:
        return f"localization skipped: {loc['skipped']}"
    runs = loc.get("runs")
    cost = f"{runs} run{'s' if runs != 1 else ''}" if runs is not None else None
    first = loc.get("first_divergent")
    if first is None:
        traced = len(loc.get("trace") or ())
        return "; ".join(filter(None, [f"localization found no divergent node among {traced} traced tensor(s)", cost]))
    output = f"output {quote(first['output'])}" if first.get("output") else None
    where = [", ".join(filter(None, [first.get("op"), output]))]
    if first.get("source"):
        where.append(f"{source_kind(hop)} {quote(first['source'])}")
    err = first.get("error") or {}
    if err.get("error"):  # not comparable (shape or dtype)
        error = err["error"]
    elif err.get("max_abs") is not None:
        error = f"max_abs {err['max_abs']:.1e}" + (f" ({err['reason']})" if err.get("reason") else "")
    else:
        error = err.get("reason")
    line = f"first divergent node: {quote(first['node'])} ({'; '.join(filter(None, where))})"
    if first.get("inputs_ok") is False:
        line += " (its inputs already differ)"
    return "; ".join(filter(None, [", ".join(filter(None, [line, error])), cost]))


def trace_window(loc: dict, around: int = 3) -> tuple[list[tuple[int, dict]], int | None]:
    """The trace entries around the culprit, ``around`` either side, as (position in the trace, entry), and the
    culprit's position: the entry with the first divergent node's output, else the first failed one. With
    neither, the first ``2 * around + 1`` entries and None."""
    trace = list(loc.get("trace") or ())
    first = loc.get("first_divergent") or {}
    at = next((i for i, t in enumerate(trace) if first and t.get("output") == first.get("output")), None)
    if at is None:
        at = next((i for i, t in enumerate(trace) if t.get("passed") is False), None)
    lo = 0 if at is None else max(at - around, 0)
    hi = 2 * around + 1 if at is None else at + around + 1
    return list(enumerate(trace))[lo:hi], at


def warnings_of(report: dict) -> list[str]:
    """What ``--fail-on warning`` fails on: exporter warnings, samples a hop skipped, outputs with
    non-finite values on either side, and top-1 disagreements that stayed within tolerance."""
    found = list(report["warnings"])
    for hop in report["hops"]:
        found += [f"{hop['from']} -> {hop['to']}: {n}" for n in hop["notes"]]
        for out in hop["outputs"]:
            if out.get("nonfinite_reference") or out.get("nonfinite_output"):
                found.append(f"{hop['from']} -> {hop['to']}: {out['name']} has NaN/Inf values")
            if out.get("top1_agreement", 1.0) < 1.0:
                found.append(f"{hop['from']} -> {hop['to']}: {out['name']} top-1 agrees on "
                             f"{out['top1_agreement']:.2%} of rows")
    return found


def render(report: dict, console) -> None:
    """A terminal summary of the hops (rich)."""
    from rich.markup import escape
    from rich.table import Table

    for hop in report["hops"]:
        tol = hop["tolerance"]
        title = (f"{hop['from']} -> {hop['to']}: {hop['status']} ({hop['samples']} sample(s), atol {tol['atol']:g}, "
                 f"rtol {tol['rtol']:g}" + (f"; {tol['reason']}" if tol.get("reason") else "") + ")")
        if not hop["outputs"]:  # skipped, or failed before any comparison: the reason follows, not an empty table
            console.print(escape(title))
        else:
            table = Table(title=escape(title), title_justify="left")
            for col in ("output", "shape", "max abs", "max rel", "cosine", "out of tol", "needs atol", ""):
                table.add_column(col, justify="right" if col not in ("output", "") else "left")
            for o in hop["outputs"]:
                mark = "[green]ok[/]" if o["passed"] else "[red]FAIL[/]"
                if o.get("kind") == "numeric":
                    table.add_row(escape(o["name"]), "x".join(map(str, o["shape"])), f"{o['max_abs']:.2e}",
                                  f"{o['max_rel']:.2e}", f"{o['cosine']:.6f}", f"{o['mismatch_fraction']:.2%}",
                                  f"{o['required_atol']:.2e}", mark)
                else:
                    table.add_row(escape(o["name"]), "x".join(map(str, o["shape"])), "-", "-", "-",
                                  f"{o.get('mismatch_fraction', 1):.2%}", "-",
                                  mark if "error" not in o else escape(o["error"]))
            console.print(table)
        for o in hop["outputs"]:
            if o.get("reason"):
                console.print(f"[red]{escape(o['name'])}:[/] {escape(o['reason'])}")
        drift = hop.get("vs_source")
        if drift:
            worst = max((o.get("max_abs", 0.0) for o in drift["outputs"]), default=0.0)
            state = "within tolerance" if drift["passed"] else "[red]outside tolerance[/]"
            console.print(f"[dim]against the source framework:[/] {state} (max abs {worst:.2e})")
        lat = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in hop["latency_s"].items() if v is not None)
        if lat:
            console.print(f"[dim]latency: {escape(lat)} ({hop.get('latency_method', 'mean of the validation runs')})[/]")
        what = hop.get("runtimes", {}).get(hop["to"])
        if what:
            console.print(f"[dim]{escape(hop['to'])}: {escape(what)}[/]")
        for line in hop["errors"]:
            console.print(f"[red]error:[/] {escape(line)}")
        where = localization_summary(hop)
        if where:
            loc = hop["localization"]
            console.print(f"[red]{escape(where)}[/]" if loc.get("first_divergent") else escape(where))
            timing = f", {loc['seconds']:.3g} s" if loc.get("seconds") is not None else ""
            console.print(f"[dim]localization: {escape(str(loc.get('method') or ''))}{timing}[/]")
        for line in hop["notes"]:
            console.print(f"[dim]note: {escape(line)}[/]")
