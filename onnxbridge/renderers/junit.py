"""JUnit XML: one test suite per hop, one test case per output; hop errors are failures of their own."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from onnxbridge.renderers import verdict


def render(report: dict) -> str:
    root = ET.Element("testsuites", name="onnxbridge")
    source = report["source"].get("description") or report["source"].get("kind", "")
    for hop in report["hops"]:
        name = f"{hop['from']} -> {hop['to']}"
        cases = [(out["name"], None if out["passed"] else verdict(out), verdict(out)) for out in hop["outputs"]]
        cases += [(f"hop check {i}", err, err) for i, err in enumerate(hop["errors"], 1)]
        failures = sum(1 for _, failure, _ in cases if failure)
        total = sum(v or 0.0 for v in hop["latency_s"].values()) * hop["samples"]
        skipped = hop["status"] == "skipped"
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(cases) or int(skipped)),
                              failures=str(failures), errors="0", skipped=str(int(skipped)), time=f"{total:.6f}")
        ET.SubElement(ET.SubElement(suite, "properties"), "property", name="source", value=source)
        if skipped:  # a hop that could not run here (no GPU): a skipped test case, never a passed one
            case = ET.SubElement(suite, "testcase", classname=f"onnxbridge.{hop['from']}_to_{hop['to']}",
                                 name="run", time="0")
            ET.SubElement(case, "skipped", message=hop.get("skipped_reason", "not run"))
        for case_name, failure, detail in cases:
            case = ET.SubElement(suite, "testcase", classname=f"onnxbridge.{hop['from']}_to_{hop['to']}",
                                 name=case_name, time="0")
            if failure:
                ET.SubElement(case, "failure", message=failure[:500], type="ValidationFailed").text = detail
            else:
                ET.SubElement(case, "system-out").text = detail
    if report.get("status") == "blocked":
        suite = ET.SubElement(root, "testsuite", name="opset adaptation", tests="1", failures="1", errors="0",
                              skipped="0", time="0")
        case = ET.SubElement(suite, "testcase", classname="onnxbridge.adapters", name="blockers", time="0")
        ET.SubElement(case, "failure", message="blocked", type="Unsupported").text = "\n".join(report["blockers"])
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
