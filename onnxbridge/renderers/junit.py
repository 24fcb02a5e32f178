"""JUnit XML: one test suite per hop, one test case per output; hop errors are failures of their own. A failed
hop's localization (the first divergent node and its source name) leads every failure message of that hop."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from onnxbridge.renderers import verdict
from onnxbridge.report import localization_summary, trace_window

MESSAGE_CHARS = 500


def _localization_text(hop: dict) -> str:
    """The localization block in words for a failure's body: summary, method, the trace around the culprit."""
    loc = hop.get("localization")
    if not loc:
        return ""
    lines = [localization_summary(hop) or "", f"method: {loc.get('method') or ''}"]
    rows, culprit = trace_window(loc)
    for at, t in rows:
        mark = "  <- first divergent" if at == culprit and loc.get("first_divergent") else ""
        lines.append(f"  #{t.get('index', at)} {'ok  ' if t.get('passed') else 'FAIL'} {t.get('node')} -> "
                     f"{t.get('output')}: max abs {_num(t.get('max_abs'))}, max rel {_num(t.get('max_rel'))}, "
                     f"cosine {_num(t.get('cosine'), '.6f')}" + (f" ({t['error']})" if t.get("error") else "") + mark)
    return "\n".join(lines)


def _num(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _message(failure: str, where: str | None) -> str:
    """The failure's message attribute: the localization line first (it names the culprit), then the verdict."""
    text = f"{where}; {failure}" if where else failure
    return text[:MESSAGE_CHARS]


def render(report: dict) -> str:
    root = ET.Element("testsuites", name="onnxbridge")
    source = report["source"].get("description") or report["source"].get("kind", "")
    for hop in report["hops"]:
        name = f"{hop['from']} -> {hop['to']}"
        where = localization_summary(hop) if hop["status"] == "failed" else None
        located = _localization_text(hop) if where else ""
        cases = [(out["name"], None if out["passed"] else verdict(out), verdict(out)) for out in hop["outputs"]]
        cases += [(f"hop check {i}", err, err) for i, err in enumerate(hop["errors"], 1)]
        failures = sum(1 for _, failure, _ in cases if failure)
        total = sum(v or 0.0 for v in hop["latency_s"].values()) * hop["samples"]
        skipped = hop["status"] == "skipped"
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(cases) or int(skipped)),
                              failures=str(failures), errors="0", skipped=str(int(skipped)), time=f"{total:.6f}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="source", value=source)
        first = (hop.get("localization") or {}).get("first_divergent") if where else None
        if first:  # machine-readable for CI dashboards
            ET.SubElement(props, "property", name="first_divergent_node", value=str(first["node"]))
            if first.get("source"):
                ET.SubElement(props, "property", name="first_divergent_source", value=str(first["source"]))
        if skipped:  # a hop that could not run here (no GPU): a skipped test case, never a passed one
            case = ET.SubElement(suite, "testcase", classname=f"onnxbridge.{hop['from']}_to_{hop['to']}",
                                 name="run", time="0")
            ET.SubElement(case, "skipped", message=hop.get("skipped_reason", "not run"))
        for case_name, failure, detail in cases:
            case = ET.SubElement(suite, "testcase", classname=f"onnxbridge.{hop['from']}_to_{hop['to']}",
                                 name=case_name, time="0")
            if failure:
                ET.SubElement(case, "failure", message=_message(failure, where),
                              type="ValidationFailed").text = "\n\n".join(filter(None, [detail, located]))
            else:
                ET.SubElement(case, "system-out").text = detail
    if report.get("status") == "blocked":
        suite = ET.SubElement(root, "testsuite", name="opset adaptation", tests="1", failures="1", errors="0",
                              skipped="0", time="0")
        case = ET.SubElement(suite, "testcase", classname="onnxbridge.adapters", name="blockers", time="0")
        ET.SubElement(case, "failure", message="blocked", type="Unsupported").text = "\n".join(report["blockers"])
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
