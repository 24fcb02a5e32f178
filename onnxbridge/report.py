"""The report: one plain dict per run, versioned, written as JSON and rendered for the terminal."""
from __future__ import annotations

import datetime as _dt
import math
import platform
from collections.abc import Callable, Iterable
from pathlib import Path

from onnxbridge._version import __version__
from onnxbridge.registry import dist_version

SCHEMA_VERSION = "1.10"  # 1.1: status "blocked", blockers, command "check"; 1.2: histograms, top-1, per-output tol;
# 1.3: hops compared with the source too (vs_source), introduced_by, skipped hops with skipped_reason, check
# --targets (targets), backend artifacts without opset/ir_version; 1.4: artifact.precision (what was applied), hop
# runtimes (what ran) and artifact_checked/artifact_check, output reason (NaN/inf) and reference_dtype; 1.5: check
# --targets hints (per blocker) and rewrites (legalization rules a build applies); 1.6: hop localization (the
# first divergent node of a failed hop, the trace of compared intermediates); 1.7: artifact.optimization (--optimize)
# 1.8: a tolerance per hop by what that hop computes (tolerance.rule/reason, factor/floor for fp16-emulation),
# per output snr_db, rel_rms, scale, budget and failed_check; hop dynamic_axes (the sizes that exercised them);
# 1.9: hop kind (source, adapters, optimizer, precision, backend); seconds and runtimes on every hop
# 1.10: --split-tail: the report's split (where the model was cut and why), hop kind pipeline, timings split_s
# latency_s only from timed warm runs (--latency-runs, latency_method says how); status skipped is never success
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
    both failing puts the difference on the adapters, the first alone on the exporter. The fp16 model's hop
    (``onnx@N -> onnx@N:fp16``) comes after the first, which checks the fp32 graph it was made from."""
    if hop.get("kind") in ("adapters", "optimizer") or (  # reports before 1.9 say it in the sides' names
            "kind" not in hop and hop["from"].startswith("onnx@") and not hop["to"].endswith((":fp16", ":int8"))):
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


def incomplete(report: dict) -> bool:
    """Whether validation ran and did not finish: status ``skipped`` with hops (a hop, or a required check such as
    the dynamic axes, did not run). Never a pass; a run that validated nothing (``--no-validate``) is not one."""
    return report["status"] == "skipped" and bool(report["hops"])


def skipped_summary(report: dict) -> str:
    """One line naming what did not run in a ``skipped`` report: each skipped hop and why, and the dynamic axes a
    hop could not exercise."""
    parts = []
    for h in report["hops"]:
        if h["status"] == "skipped":
            reason = " ".join(str(h.get("skipped_reason") or "it did not run").split())
            parts.append(f"{h['from']} -> {h['to']} skipped: {reason[:300]}")
        dyn = h.get("dynamic_axes") or {}
        if dyn.get("exercised") is False:
            axes = ", ".join(dyn.get("axes") or ()) or "the dynamic axes"
            why = " ".join(str(dyn.get("reason") or "").split())[:300]
            parts.append(f"{h['from']} -> {h['to']}: {axes} not exercised" + (f" ({why})" if why else ""))
    return "validation incomplete: " + ("; ".join(parts) or "not every check ran")


def source_kind(hop: dict) -> str:
    """What the ``source`` of a hop's first divergent node is, in words: what the plugin of the hop's target
    (``to``), else of its source framework (``from``), calls a node (``Plugin.node_kind``: ``MIL op``, ``torch
    module``, ...); ONNX -> ONNX hops (adapters, ``validate a.onnx b.onnx``) name the converted model's node."""
    from onnxbridge.plugins import node_kind

    for side in (hop.get("to"), hop.get("from")):
        kind = node_kind(str(side)) if side else None
        if kind:
            return kind
    side = str(hop.get("from", ""))
    if side == "onnx":  # an ONNX source (validate a.onnx b.onnx): the source model's node
        return "source node"
    return "adapted node" if side.startswith("onnx@") else "source"


def localization_summary(hop: dict, quote: Callable[[str], str] = str,
                         text: Callable[[str], str] = str) -> str | None:
    """One line on a hop's ``localization``: the first divergent node, its source name and error, the runs it
    took; or why localization was skipped. None when the hop has no localization. ``quote`` formats the names
    that come from the user's model (node, output, source), e.g. as Markdown code spans; ``text`` the free text
    around them (op type, error, reason), e.g. escaped for Markdown."""
    loc = hop.get("localization")
    if not loc:
        return None
    if "skipped" in loc:
        return f"localization skipped: {text(loc['skipped'])}"
    runs = loc.get("runs")
    cost = f"{runs} run{'s' if runs != 1 else ''}" if runs is not None else None
    first = loc.get("first_divergent")
    if first is None:
        traced = loc.get("compared", len(loc.get("trace") or ()))
        return "; ".join(filter(None, [f"localization found no divergent node among {traced} traced tensor(s)", cost]))
    output = f"output {quote(first['output'])}" if first.get("output") else None
    where = [", ".join(filter(None, [first.get("op") and text(first["op"]), output]))]
    if first.get("source"):
        where.append(f"{source_kind(hop)} {quote(first['source'])}")
    err = first.get("error") or {}
    if err.get("error"):  # not comparable (shape or dtype)
        error = err["error"]
    elif nonfinite_text(err):  # the figures cover the finite values only: the count of the others leads
        finite = f"finite values: max_abs {err['max_abs']:.1e}" if err.get("max_abs") else None
        error = ", ".join(filter(None, [err.get("reason") or nonfinite_text(err), finite]))
    elif err.get("max_abs") is not None:
        error = f"max_abs {err['max_abs']:.1e}" + (f" ({err['reason']})" if err.get("reason") else "")
    else:
        error = err.get("reason")
    line = f"first divergent node: {quote(first['node'])} ({'; '.join(filter(None, where))})"
    if first.get("inputs_ok") is False:
        line += " (its inputs already differ)"
    return "; ".join(filter(None, [", ".join(filter(None, [line, error and text(error)])), cost]))


def nonfinite_text(m: dict) -> str | None:
    """How many values of a compared tensor are NaN/inf (``nonfinite_output``, ``nonfinite_reference``; of
    ``values`` or the shape's size), e.g. "NaN/inf in 4 of 16 values, 0 in the reference"; None when all are
    finite (or the counts are not there)."""
    out, ref = int(m.get("nonfinite_output") or 0), int(m.get("nonfinite_reference") or 0)
    if not out and not ref:
        return None
    n = m.get("values")
    if n is None and m.get("shape") is not None:
        n = 1
        for d in m["shape"]:
            n *= int(d)
    of = f" of {n}" if n is not None else ""
    if not out:
        return f"NaN/inf in {ref}{of} reference values"
    return f"NaN/inf in {out}{of} values" + (f", {ref} in the reference" if ref else "")


def trace_cells(entry: dict) -> tuple[str, str, str]:
    """A trace entry's max abs, max rel and cosine as table cells. Those figures cover the values finite on both
    sides, so where a side has NaN/inf they would read as agreement (max abs 0, cosine 1) beside FAIL: the max
    abs cell says how many values are not finite instead, the others "-"."""
    bad = nonfinite_text(entry)
    if bad:
        return bad, "-", "-"

    def num(key: str, spec: str) -> str:
        value = entry.get(key)
        return "-" if value is None else format(float(value), spec)

    return num("max_abs", ".3g"), num("max_rel", ".3g"), num("cosine", ".6f")


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
    """What ``--fail-on warning`` fails on: exporter warnings, hop notes (samples a hop skipped...), hops skipped,
    outputs with non-finite values on either side, and top-1 disagreements that stayed within tolerance."""
    found = list(report["warnings"])
    for hop in report["hops"]:
        found += [f"{hop['from']} -> {hop['to']}: {n}" for n in hop["notes"]]
        if hop.get("status") == "skipped" and hop.get("skipped_reason") and \
                f"skipped: {hop['skipped_reason']}" not in hop["notes"]:
            found.append(f"{hop['from']} -> {hop['to']} skipped: {hop['skipped_reason']}")
        for out in hop["outputs"]:
            if out.get("nonfinite_reference") or out.get("nonfinite_output"):
                found.append(f"{hop['from']} -> {hop['to']}: {out['name']} has NaN/Inf values")
            if out.get("top1_agreement", 1.0) < 1.0:
                found.append(f"{hop['from']} -> {hop['to']}: {out['name']} top-1 agrees on "
                             f"{out['top1_agreement']:.2%} of rows")
    return found


def num(value) -> str:
    """A compact figure for a person: two significant digits, ``4.9e-4`` rather than ``0.00049``; ``-`` for None."""
    if value is None:
        return "-"
    v = float(value)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    if 1e-3 <= abs(v) < 1e4:
        return f"{v:.2g}"
    mantissa, exp = f"{v:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exp)}"


def tolerance_text(hop: dict) -> str | None:
    """The rule that judged a hop, its parameters and why it applies: ``tolerance: fp16-emulation (4x the
    emulation's error, floor 4.9e-4): qnn-htp-simulator computes in fp16``. Records before 1.8 have no ``rule``:
    their precision's elementwise tolerance is named instead."""
    tol = hop.get("tolerance") or {}
    if not tol:
        return None
    rule = tol.get("rule")
    if rule == "fp16-emulation":
        detail = f"{tol.get('factor', 4.0):g}x the emulation's error, floor {num(tol.get('floor'))}"
    elif rule == "int8-agreement":
        detail = (f"SNR >= {tol.get('min_snr_db', 20):g} dB per output, top-1 agreement >= "
                  f"{tol.get('min_top1', 0.9):.0%} for classifier outputs")
    else:
        detail = f"atol {num(tol.get('atol'))}, rtol {num(tol.get('rtol'))}"
        if rule in ("fp32", "fixed"):
            detail += ", atol at most rtol x the output's scale"
        for name, over in (tol.get("per_output") or {}).items():
            detail += f"; {name}: " + ", ".join(f"{k} {num(v)}" for k, v in over.items())
    label = rule or tol.get("precision") or "default"
    if rule == "fixed" and tol.get("precision"):
        label = f"fixed {tol['precision']}"
    return f"tolerance: {label} ({detail})" + (f": {tol['reason']}" if tol.get("reason") else "")


def snr_cell(out: dict) -> str:
    """An output's SNR in dB as a table cell: ``inf`` when the error is exactly 0 (``snr_db`` null), ``-`` when the
    record has none (exact comparisons, reports before 1.8)."""
    if "snr_db" not in out:
        return "-"
    return "inf" if out["snr_db"] is None else f"{out['snr_db']:.1f}"


_BUDGET_WORDS = {"max_abs": "max abs", "rel_rms": "rel rms", "snr_db": "SNR dB >=", "min_snr_db": "SNR dB >=",
                 "top1_agreement": "top-1 >=", "min_top1": "top-1 >=", "atol": "atol", "rtol": "rtol"}


def budget_text(out: dict) -> str | None:
    """What an output was held to (its ``budget``), in words; for fp16-emulation with the emulation's own error."""
    budget = out.get("budget")
    if not budget:
        return None
    rule = budget.get("rule", "?")
    items = [f"{_BUDGET_WORDS.get(k, k.replace('_', ' '))} {num(v)}" for k, v in budget.items()
             if k not in ("rule", "emulation") and isinstance(v, (int, float)) and not isinstance(v, bool)]
    text = f"budget ({rule}): " + ", ".join(items)
    emu = budget.get("emulation") or {}
    if emu:
        parts = [f"max abs {num(emu['max_abs'])}" if "max_abs" in emu else None,
                 f"rel rms {num(emu['rel_rms'])}" if "rel_rms" in emu else None,
                 f"SNR {snr_cell(emu)} dB" if "snr_db" in emu else None]
        text += "; the fp16 emulation's own error: " + ", ".join(filter(None, parts))
    return text


def latency_text(hop: dict) -> str | None:
    """``latency: torch 1.02 ms, onnx 0.51 ms (median of 20 warm runs after a warm-up, first sample)``; None
    unless the hop timed something (1.8 times only with ``--latency-runs``)."""
    figures = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in (hop.get("latency_s") or {}).items() if v is not None)
    if not figures:
        return None
    return f"latency: {figures}" + (f" ({hop['latency_method']})" if hop.get("latency_method") else "")


def dynamic_axes_text(hop: dict) -> str | None:
    """Which dynamic axes the hop checked and at which input sizes, or why they were not exercised."""
    dyn = hop.get("dynamic_axes")
    if not dyn:
        return None
    axes = ", ".join(map(str, dyn.get("axes") or ())) or "-"
    sizes = "; ".join(", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in s.items())
                      for s in dyn.get("sizes") or ())
    text = f"dynamic axes {axes}: " + ("exercised" if dyn.get("exercised") else "NOT exercised")
    if sizes:
        text += f" (sizes {sizes})"
    return text + (f": {dyn['reason']}" if dyn.get("reason") else "")


def render(report: dict, console) -> None:
    """A terminal summary of the hops (rich): per hop its tolerance rule, per output max abs, cosine and SNR, on a
    failure the check that failed and the budget, warm latency only when it was timed."""
    from rich.table import Table

    from onnxbridge.renderers.text import console_markup as escape  # control characters shown, not sent

    for hop in report["hops"]:
        tol = hop.get("tolerance") or {}
        if tol.get("rule"):  # 1.8: the rule line says what judged the hop
            title = f"{hop['from']} -> {hop['to']}: {hop['status']} ({hop.get('samples', 0)} sample(s))"
            rule_line = tolerance_text(hop)
        else:
            title = (f"{hop['from']} -> {hop['to']}: {hop['status']} ({hop.get('samples', 0)} sample(s), "
                     f"atol {tol.get('atol', 0):g}, rtol {tol.get('rtol', 0):g}"
                     + (f"; {tol['reason']}" if tol.get("reason") else "") + ")")
            rule_line = None
        console.print(escape(title))
        if rule_line:
            console.print(escape(rule_line))
        if hop.get("status") == "skipped" and hop.get("skipped_reason") and \
                f"skipped: {hop['skipped_reason']}" not in hop.get("notes", ()):
            console.print(f"skipped: {escape(hop['skipped_reason'])}")
        if hop["outputs"]:  # skipped, or failed before any comparison: the reason follows, not an empty table
            table = Table()
            for col in ("output", "shape", "max abs", "max rel", "cosine", "SNR dB", "out of tol", "needs atol", ""):
                table.add_column(col, justify="right" if col not in ("output", "") else "left")
            for o in hop["outputs"]:
                mark = "[green]ok[/]" if o["passed"] else "[red]FAIL[/]"
                if o.get("kind") == "numeric" and nonfinite_text(o):  # finite-only figures would read as agreement
                    table.add_row(escape(o["name"]), "x".join(map(str, o["shape"])), nonfinite_text(o), "-", "-", "-",
                                  _fmt(o.get("mismatch_fraction"), ".2%"), "-", mark)
                elif o.get("kind") == "numeric":
                    table.add_row(escape(o["name"]), "x".join(map(str, o["shape"])), _fmt(o.get("max_abs"), ".2e"),
                                  _fmt(o.get("max_rel"), ".2e"), _fmt(o.get("cosine"), ".6f"), snr_cell(o),
                                  _fmt(o.get("mismatch_fraction"), ".2%"), _fmt(o.get("required_atol"), ".2e"), mark)
                else:
                    table.add_row(escape(o["name"]), "x".join(map(str, o["shape"])), "-", "-", "-", "-",
                                  f"{o.get('mismatch_fraction', 1):.2%}", "-",
                                  mark if "error" not in o else escape(o["error"]))
            console.print(table)
        for o in hop["outputs"]:
            if o.get("reason"):
                console.print(f"[red]{escape(o['name'])}:[/] {escape(o['reason'])}")
            if not o["passed"] and o.get("failed_check") and o.get("failed_check") != o.get("reason"):
                console.print(f"[red]{escape(o['name'])}:[/] {escape(o['failed_check'])}")
            if not o["passed"] and budget_text(o):
                console.print(f"[dim]{escape(o['name'])}: {escape(budget_text(o))}[/]")
        dyn = dynamic_axes_text(hop)
        if dyn:
            console.print(escape(dyn) if (hop.get("dynamic_axes") or {}).get("exercised")
                          else f"[red]{escape(dyn)}[/]")
        drift = hop.get("vs_source")
        if drift:
            worst = max((o.get("max_abs", 0.0) for o in drift["outputs"]), default=0.0)
            state = "within tolerance" if drift["passed"] else "[red]outside tolerance[/]"
            console.print(f"[dim]against the source framework:[/] {state} (max abs {worst:.2e})")
        lat = latency_text(hop)
        if lat:
            console.print(f"[dim]{escape(lat)}[/]")
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


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)
