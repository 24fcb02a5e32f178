"""The matrix's summary files in OUTDIR: matrix.json (the matrix dict itself), matrix.xml (JUnit: a test suite per
model, a test case per cell), matrix.md (per precision a model x target table) and matrix.html (the same grids
coloured by status, each cell linking to its report.json; no scripts, no network). Regressions come first in each.

Every name is escaped: model names come from user manifests. Each file is written atomically.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path
from urllib.parse import quote

from onnxbridge.renderers.text import md_code as _code
from onnxbridge.renderers.text import md_text as _md
from onnxbridge.renderers.text import xml_safe as _xml

MATRIX_SCHEMA_VERSION = "1.1"  # 1.1: status "skipped" when a cell was skipped and none failed
STATUSES = ("passed", "failed", "error", "skipped")
MARK = {"passed": "✅", "failed": "❌", "error": "💥", "skipped": "⏭️"}
COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "error": "#e65100", "skipped": "#757575"}
FILLS = {"passed": "#e8f5e9", "failed": "#ffebee", "error": "#fff3e0", "skipped": "#f4f4f4"}
MESSAGE_CHARS = 500
OUTPUTS = {"json": "matrix.json", "junit": "matrix.xml", "markdown": "matrix.md", "html": "matrix.html"}  # in OUTDIR
OUTPUT_NAMES = tuple(OUTPUTS.values())


def opset_label(opset: int | None) -> str:
    """``opset17``, or ``opsetdefault`` when the cell leaves the opset to the backend."""
    return f"opset{'default' if opset is None else opset}"


def case_name(record: dict) -> str:
    """A cell's name within its model: ``<target>-<precision>-opset<N>`` (its JUnit test case, its folder)."""
    return f"{record['target']}-{record['precision']}-{opset_label(record.get('opset'))}"


def counts(matrix: dict) -> dict[str, int]:
    """Cells per status (every status present, zeros included): the matrix's own ``counts`` when it has them."""
    if matrix.get("counts"):
        return {s: int(matrix["counts"].get(s, 0)) for s in STATUSES} | dict(matrix["counts"])
    found = {s: 0 for s in STATUSES}
    for cell in matrix["cells"]:
        found[cell["status"]] = found.get(cell["status"], 0) + 1
    return found


def summary(matrix: dict) -> str:
    """One line: ``16 cells: 8 passed, 4 failed, 4 error, 0 skipped; 1 regression (3 cached)``."""
    n = counts(matrix)
    text = f"{len(matrix['cells'])} cells: " + ", ".join(f"{n.get(s, 0)} {s}" for s in STATUSES)
    regressions = len(matrix.get("regressions") or ())
    if regressions:
        text += f"; {regressions} regression{'s' * (regressions != 1)}"
    cached = sum(1 for c in matrix["cells"] if c.get("cached"))
    return text + (f" ({cached} cached)" if cached else "")


def worst_text(worst: dict | None) -> str:
    """The worst output of a cell in words: ``max abs 1.2e-06, max rel 3e-05, cosine 1.000000 (onnx -> coreml:
    y)`` (hop: output); empty when the cell has no metrics."""
    if not worst or worst.get("max_abs") is None:
        return ""
    parts = [f"max abs {_num(worst.get('max_abs'))}"]
    if worst.get("max_rel") is not None:
        parts.append(f"max rel {_num(worst['max_rel'])}")
    if worst.get("cosine") is not None:
        parts.append(f"cosine {_num(worst['cosine'], '.6f')}")
    where = ": ".join(str(w) for w in (worst.get("hop"), worst.get("output")) if w)
    return ", ".join(parts) + (f" ({where})" if where else "")


def _num(value, spec: str = ".3g") -> str:
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return "-"


def _ordered(matrix: dict, key: str) -> list:
    """The values of ``key`` across cells, in order of first appearance."""
    return list(dict.fromkeys(c.get(key) for c in matrix["cells"]))


def _regressions(matrix: dict) -> list[dict]:
    """The regressed cells' records, in the matrix's regression order (a name with no record is kept bare)."""
    by_name = {c["name"]: c for c in matrix["cells"]}
    return [by_name.get(name, {"name": name, "status": "error", "reason": "not in this run"})
            for name in matrix.get("regressions") or ()]


def _columns(matrix: dict) -> list[tuple[str, int | None]]:
    """The grid's columns: (target, opset) pairs; the opset is shown only where the matrix has several."""
    return list(dict.fromkeys((c["target"], c.get("opset")) for c in matrix["cells"]))


def _column_label(column: tuple[str, int | None], several_opsets: bool) -> str:
    target, opset = column
    return f"{target} {opset_label(opset)}" if several_opsets else target


def _grid_error(record: dict):
    """The number a grid shows for a cell: its worst max abs, but not for a skipped cell (its worst comes from the
    hops that ran before the skipped one, which would read as the target's error)."""
    return None if record["status"] == "skipped" else (record.get("worst") or {}).get("max_abs")


def _grid(matrix: dict, precision: str) -> dict[tuple[str, tuple], dict]:
    return {(c["model"], (c["target"], c.get("opset"))): c for c in matrix["cells"] if c["precision"] == precision}


# ---- JUnit --------------------------------------------------------------------------------------------------------

def _message(record: dict, regressed: bool) -> str:
    text = record.get("reason") or record["status"]
    worst = worst_text(record.get("worst"))
    if worst:
        text += f"; worst: {worst}"
    if regressed:
        text = f"regression: passed in the baseline, now {record['status']}: {text}"
    return _xml(text[:MESSAGE_CHARS])


def render_junit(matrix: dict) -> str:
    """JUnit XML: one test suite per model, one test case per cell (``<target>-<precision>-opset<N>``); a failed
    cell is a failure, an errored one an error, a skipped one skipped, each with the reason and the worst metric. A
    regression is a failure (or an error) whose message starts ``regression:``."""
    regressed = set(matrix.get("regressions") or ())
    total = sum(float(c.get("seconds") or 0.0) for c in matrix["cells"])
    root = ET.Element("testsuites", name="onnxbridge matrix", tests=str(len(matrix["cells"])),
                      failures=str(sum(1 for c in matrix["cells"] if c["status"] == "failed"
                                       or (c["name"] in regressed and c["status"] == "skipped"))),
                      errors=str(sum(1 for c in matrix["cells"] if c["status"] == "error")), time=f"{total:.3f}")
    for model in _ordered(matrix, "model"):
        cells = [c for c in matrix["cells"] if c["model"] == model]
        regressions = [c for c in cells if c["name"] in regressed]
        skipped = [c for c in cells if c["status"] == "skipped" and c["name"] not in regressed]
        suite = ET.SubElement(root, "testsuite", name=_xml(model), tests=str(len(cells)),
                              failures=str(sum(1 for c in cells if c["status"] == "failed" or c in regressions
                                               and c["status"] == "skipped")),
                              errors=str(sum(1 for c in cells if c["status"] == "error")),
                              skipped=str(len(skipped)),
                              time=f"{sum(float(c.get('seconds') or 0.0) for c in cells):.3f}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="manifest", value=_xml(matrix.get("manifest", "")))
        ET.SubElement(props, "property", name="executor", value=_xml((matrix.get("executor") or {}).get("kind", "")))
        for c in sorted(cells, key=lambda c: c["name"] not in regressed):  # regressions first
            case = ET.SubElement(suite, "testcase", classname=_xml(f"onnxbridge.matrix.{model}"),
                                 name=_xml(case_name(c)), time=f"{float(c.get('seconds') or 0.0):.3f}")
            status, is_regression = c["status"], c["name"] in regressed
            detail = "\n".join(filter(None, [worst_text(c.get("worst")) and f"worst: {worst_text(c['worst'])}",
                                             c.get("report") and f"report: {c['report']}",
                                             c.get("artifact") and f"artifact: {c['artifact']}",
                                             c.get("cached") and "cached: passed before with the same inputs"]))
            if status == "error":
                ET.SubElement(case, "error", message=_message(c, is_regression),
                              type="Regression" if is_regression else "CellError").text = _xml(
                    "\n\n".join(filter(None, [c.get("reason"), detail])))
            elif status == "failed" or (status == "skipped" and is_regression):
                ET.SubElement(case, "failure", message=_message(c, is_regression),
                              type="Regression" if is_regression else "ValidationFailed").text = _xml(
                    "\n\n".join(filter(None, [c.get("reason"), detail])))
            elif status == "skipped":
                ET.SubElement(case, "skipped", message=_message(c, False))
            if detail and status in ("passed", "skipped"):
                ET.SubElement(case, "system-out").text = _xml(detail)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ---- Markdown -----------------------------------------------------------------------------------------------------

def _md_cell(record: dict | None, regressed: bool) -> str:
    if record is None:
        return "—"  # excluded by the manifest
    status = record["status"]
    text = f"{MARK.get(status, '')} {status}"
    worst = _grid_error(record)
    if worst is not None:
        text += f" {_num(worst)}"
    if record.get("cached"):
        text += " ♻️"
    return f"**🔻 {text}**" if regressed else text


def _tables(matrix: dict):
    """Per precision: its grid, the (target, opset) columns it uses, and whether opsets need naming in the labels."""
    columns = _columns(matrix)
    several = len({opset for _, opset in columns}) > 1
    for precision in _ordered(matrix, "precision"):
        grid = _grid(matrix, precision)
        yield precision, grid, [col for col in columns if any(col == k[1] for k in grid)], several


def render_markdown(matrix: dict) -> str:
    """Status and counts, the regressions, then per precision a model x target table (status and worst max abs;
    ♻️: reused from the cache, —: excluded) and the reasons of the cells that did not pass."""
    regressed = set(matrix.get("regressions") or ())
    statuses = {c["status"] for c in matrix["cells"]}
    status = matrix.get("status") or ("failed" if statuses & {"failed", "error"} or regressed else
                                      "skipped" if "skipped" in statuses else "passed")
    executor = matrix.get("executor") or {}
    lines = [f"## onnxbridge matrix: {MARK.get(status, '')} {status}", ""]
    if matrix.get("manifest"):
        lines.append(f"**Manifest:** {_code(matrix['manifest'])}  ")
    if executor:
        workers = f", {executor['workers']} workers" if executor.get("workers") else ""
        lines.append(f"**Executor:** {_md(executor.get('kind', ''))}{_md(workers)}  ")
    lines += [f"**Cells:** {summary(matrix)}", ""]
    if regressed:
        lines += ["### 🔻 Regressions (passed in the baseline)", ""]
        for r in _regressions(matrix):
            why = r.get("reason") or worst_text(r.get("worst"))
            lines.append(f"- {MARK.get(r['status'], '')} {_code(r['name'])}: now {r['status']}"
                         + (f": {_md(why)}" if why else ""))
        lines.append("")
    for precision, grid, used, several in _tables(matrix):
        lines += [f"### {_md(precision)}", "", "| model | " + " | ".join(_md(_column_label(c, several)) for c in used)
                  + " |", "|---|" + "---|" * len(used)]
        for model in _ordered(matrix, "model"):
            cells = [grid.get((model, col)) for col in used]
            if not any(cells):
                continue
            lines.append(f"| {_code(model)} | " + " | ".join(
                _md_cell(c, c is not None and c["name"] in regressed) for c in cells) + " |")
        lines.append("")
    others = [c for c in matrix["cells"] if c["status"] != "passed" and c["name"] not in regressed]
    if others:
        lines += ["### Not passed", ""]
        for c in others:
            why = c.get("reason") or worst_text(c.get("worst"))
            lines.append(f"- {MARK.get(c['status'], '')} {_code(c['name'])}: {c['status']}"
                         + (f": {_md(why)}" if why else ""))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---- HTML ---------------------------------------------------------------------------------------------------------

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
h1 span{color:#fff;border-radius:4px;padding:2px 10px;font-size:70%}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ddd;padding:4px 8px;font-size:90%;vertical-align:top}th{background:#f4f4f4;text-align:left}
td.cell{text-align:center;min-width:7em}td.cell a{color:inherit;text-decoration:none;display:block}
td.cell .err{font-size:85%;color:#444}td.regression{outline:3px solid #c62828;outline-offset:-3px}
td.none{color:#aaa;text-align:center}code{background:#f4f4f4;padding:0 3px}td.st{white-space:nowrap}.legend span{padding:2px 8px;margin-right:4px}
"""


def _href(path: str | None) -> str | None:
    """A report's path relative to OUTDIR as a link that stays relative: percent-encoded (a model named ``a#b`` or
    ``javascript:x`` cannot turn it into a fragment or a scheme), then escaped for the attribute."""
    if not path:
        return None
    return escape(quote(str(path).replace("\\", "/"), safe="/"), quote=True)  # ":" too: never a scheme


def _html_cell(record: dict | None, regressed: bool) -> str:
    if record is None:
        return '<td class="none" title="excluded by the manifest">—</td>'
    status = record["status"]
    tip = " ".join(filter(None, [record["name"], status, record.get("reason"), worst_text(record.get("worst")),
                                 "(cached)" if record.get("cached") else "",
                                 "REGRESSION: passed in the baseline" if regressed else ""]))
    worst = _grid_error(record)
    inner = (f"<b>{'🔻 ' if regressed else ''}{escape(status)}</b>"
             + (f'<br><span class="err">{escape(_num(worst))}</span>' if worst is not None else "")
             + (' <span title="reused from the cache">♻️</span>' if record.get("cached") else ""))
    href = _href(record.get("report"))
    if href:
        inner = f'<a href="{href}">{inner}</a>'
    cls = "cell " + escape(status) + (" regression" if regressed else "")
    return (f'<td class="{cls}" style="background:{FILLS.get(status, "#fff")};color:{COLOURS.get(status, "#222")}" '
            f'title="{escape(tip, quote=True)}">{inner}</td>')


def _link(path: str | None, text: str) -> str:
    href = _href(path)
    return f'<a href="{href}">{escape(text)}</a>' if href else ""


def render_html(matrix: dict) -> str:
    """A self-contained page: status and counts, the regressions, per precision a model x target grid coloured by
    status with the worst max abs error (each cell links to its report.json), then every cell's details."""
    regressed = set(matrix.get("regressions") or ())
    status = matrix.get("status") or "failed"
    tool = matrix.get("tool") or {}
    executor = matrix.get("executor") or {}
    badge = f'<span style="background:{COLOURS.get(status, "#555")}">{escape(status)}</span>'
    body = [f"<h1>onnxbridge matrix {badge}</h1>", "<table>"]
    facts = [("cells", summary(matrix)), ("manifest", matrix.get("manifest")),
             ("executor", ", ".join(f"{k} {v}" for k, v in executor.items() if v is not None)),
             ("created", matrix.get("created")), ("onnxbridge", tool.get("version")),
             ("schema", matrix.get("schema_version", MATRIX_SCHEMA_VERSION))]
    body += [f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in facts if v]
    body.append("</table>")
    body.append('<p class="legend">' + "".join(f'<span style="background:{FILLS[s]};color:{COLOURS[s]}">'
                                               f"{MARK[s]} {s}</span>" for s in STATUSES)
                + " 🔻 regression · ♻️ cached · — excluded · numbers: worst max abs error</p>")
    if regressed:
        body.append('<h2 style="color:#c62828">🔻 Regressions (passed in the baseline)</h2><ul>')
        for r in _regressions(matrix):
            why = r.get("reason") or worst_text(r.get("worst"))
            body.append(f"<li><code>{escape(r['name'])}</code>: now <b>{escape(r['status'])}</b>"
                        + (f": {escape(why)}" if why else "") + (" " + _link(r.get("report"), "report")
                                                                 if r.get("report") else "") + "</li>")
        body.append("</ul>")
    for precision, grid, used, several in _tables(matrix):
        body.append(f'<h2>{escape(str(precision))}</h2><table class="grid"><tr><th>model</th>'
                    + "".join(f"<th>{escape(_column_label(c, several))}</th>" for c in used) + "</tr>")
        for model in _ordered(matrix, "model"):
            cells = [grid.get((model, col)) for col in used]
            if any(cells):
                body.append(f"<tr><th><code>{escape(str(model))}</code></th>" + "".join(
                    _html_cell(c, c is not None and c["name"] in regressed) for c in cells) + "</tr>")
        body.append("</table>")
    body.append('<h2>Cells</h2><table class="cells"><tr><th>cell</th><th>status</th><th>reason</th>'
                "<th>worst</th><th>seconds</th><th>report</th></tr>")
    for c in sorted(matrix["cells"], key=lambda c: c["name"] not in regressed):
        body.append(f"<tr><td><code>{escape(c['name'])}</code></td>"
                    f'<td class="st" style="color:{COLOURS.get(c["status"], "#222")}">{MARK.get(c["status"], "")} '
                    f"{escape(c['status'])}{' 🔻' if c['name'] in regressed else ''}"
                    f"{' ♻️' if c.get('cached') else ''}</td><td>{escape(c.get('reason') or '')}</td>"
                    f"<td>{escape(worst_text(c.get('worst')))}</td><td>{_num(c.get('seconds'), '.1f')}</td>"
                    f"<td>{_link(c.get('report'), 'report.json')}</td></tr>")
    body.append("</table>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>onnxbridge matrix: '
            f"{escape(status)}</title><style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


# ---- all four -----------------------------------------------------------------------------------------------------

def with_schema(matrix: dict) -> dict:
    """``matrix`` with ``schema_version`` first (set to this module's when missing); the input is not changed."""
    return {"schema_version": matrix.get("schema_version", MATRIX_SCHEMA_VERSION),
            **{k: v for k, v in matrix.items() if k != "schema_version"}}


def write_outputs(matrix: dict, outdir: str | Path) -> dict[str, Path]:
    """Write matrix.json, matrix.xml, matrix.md and matrix.html into ``outdir``, each atomically; returns their
    paths by format (``json``, ``junit``, ``markdown``, ``html``)."""
    from onnxbridge.atomic import atomic_write_bytes, write_json

    outdir = Path(outdir)
    matrix = with_schema(matrix)
    paths = {"json": write_json(outdir / OUTPUTS["json"], matrix)}
    for fmt, render in (("junit", render_junit), ("markdown", render_markdown), ("html", render_html)):
        paths[fmt] = atomic_write_bytes(outdir / OUTPUTS[fmt], render(matrix).encode("utf-8"))
    return paths
