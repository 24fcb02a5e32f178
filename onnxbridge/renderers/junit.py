"""JUnit XML: one test suite per hop, one test case per output; hop errors are failures of their own. Test cases
are named model / hop / output (classname ``resnet50.torch->onnx``, name ``logits``; the suite ``resnet50 / torch ->
onnx``), so several models in one CI job never collide. A failure's message leads with the check that failed
(``failed_check``); a skipped hop is a ``<skipped/>`` test case with its reason. A failed hop's localization (the
first divergent node and its source name) leads every failure message of that hop."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from onnxbridge.renderers import model_name, verdict
from onnxbridge.renderers.text import xml_safe
from onnxbridge.report import (dynamic_axes_text, latency_text, localization_summary, tolerance_text, trace_cells,
                               trace_window)

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
        max_abs, max_rel, cosine = trace_cells(t)
        lines.append(f"  #{t.get('index', at)} {'ok  ' if t.get('passed') else 'FAIL'} {t.get('node')} -> "
                     f"{t.get('output')}: max abs {max_abs}, max rel {max_rel}, "
                     f"cosine {cosine}" + (f" ({t['error']})" if t.get("error") else "") + mark)
    return "\n".join(lines)


def _message(failure: str, where: str | None) -> str:
    """The failure's message attribute: the localization line first (it names the culprit), then the verdict."""
    text = f"{where}; {failure}" if where else failure
    return text[:MESSAGE_CHARS]


def render(report: dict) -> str:
    root = ET.Element("testsuites", name="onnxbridge")
    source = report["source"].get("description") or report["source"].get("kind", "")
    model = model_name(report)
    for hop in report["hops"]:
        name = f"{model} / {hop['from']} -> {hop['to']}"
        classname = f"{model}.{hop['from']}->{hop['to']}"
        where = localization_summary(hop) if hop["status"] == "failed" else None
        located = _localization_text(hop) if where else ""
        about = "\n".join(filter(None, [tolerance_text(hop), dynamic_axes_text(hop), latency_text(hop)]))
        cases = [(out["name"], None if out["passed"] else verdict(out), verdict(out)) for out in hop["outputs"]]
        cases += [(f"hop check {i}", err, err) for i, err in enumerate(hop["errors"], 1)]
        failures = sum(1 for _, failure, _ in cases if failure)
        skipped = hop["status"] == "skipped"
        # time: the samples' compute at the warm latency when it was timed (--latency-runs), else 0
        total = sum(v or 0.0 for v in (hop.get("latency_s") or {}).values()) * hop.get("samples", 0)
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(cases) or int(skipped)),
                              failures=str(failures), errors="0", skipped=str(int(skipped)), time=f"{total:.6f}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="model", value=model)
        ET.SubElement(props, "property", name="source", value=source)
        tol = hop.get("tolerance") or {}
        if tol.get("rule"):
            ET.SubElement(props, "property", name="tolerance_rule", value=str(tol["rule"]))
        if tolerance_text(hop):
            ET.SubElement(props, "property", name="tolerance", value=tolerance_text(hop))
        if latency_text(hop):
            ET.SubElement(props, "property", name="latency", value=latency_text(hop))
        first = (hop.get("localization") or {}).get("first_divergent") if where else None
        if first:  # machine-readable for CI dashboards
            ET.SubElement(props, "property", name="first_divergent_node", value=str(first["node"]))
            if first.get("source"):
                ET.SubElement(props, "property", name="first_divergent_source", value=str(first["source"]))
        if skipped:  # a hop that could not run here (no GPU): a skipped test case, never a passed one
            case = ET.SubElement(suite, "testcase", classname=classname, name="run", time="0")
            ET.SubElement(case, "skipped", message=hop.get("skipped_reason", "not run"))
        for case_name, failure, detail in cases:
            case = ET.SubElement(suite, "testcase", classname=classname, name=case_name, time="0")
            if failure:
                ET.SubElement(case, "failure", message=_message(failure, where),
                              type="ValidationFailed").text = "\n\n".join(filter(None, [detail, about, located]))
            else:
                ET.SubElement(case, "system-out").text = "\n".join(filter(None, [detail, about]))
    if report.get("status") == "blocked":
        suite = ET.SubElement(root, "testsuite", name=f"{model} / opset adaptation", tests="1", failures="1",
                              errors="0", skipped="0", time="0")
        case = ET.SubElement(suite, "testcase", classname=f"{model}.adapters", name="blockers", time="0")
        ET.SubElement(case, "failure", message="blocked", type="Unsupported").text = "\n".join(report["blockers"])
    ET.indent(root)  # names come from the user's model: ElementTree escapes markup, xml_safe what XML cannot hold
    return xml_safe('<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")
