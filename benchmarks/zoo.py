"""The zoo: every architecture of ``benchmarks/zoo_models.py`` (random weights, nothing downloaded) through every
backend, and the coverage table (issue 32).

    .venv/bin/python benchmarks/zoo.py --list                                  # the catalog
    .venv/bin/python benchmarks/zoo.py --models 'resnet18|bert' --targets onnx,openvino
    .venv/bin/python benchmarks/zoo.py --jobs 1 --out /tmp/zoo/run1.json --table docs/coverage.md --readme README.md
    .venv/bin/python benchmarks/zoo.py --out /tmp/zoo/run1.json --resume --rerun failed --table docs/coverage.md
    .venv/bin/python benchmarks/zoo.py --manifest zoo.toml                     # the zoo as an `onnxbridge matrix`

Targets (a cell is one model through one target): ``onnx``, ``openvino``, ``coreml`` (fixed shapes), ``coreml-flex``
(the model's flexible axis as a Core ML range, ``--dynamic NAME:AXIS:LABEL:MIN..MAX``: validated at the sample, at a
grown size that changes the derived shapes and at both ends of the range; models without a flexible axis have no
such cell) and ``dlc``, each at ``onnxbridge.convert``'s default precision (fp32: the DLC's HTP simulator computes
in fp16 and its hop is judged so), opset 17. ``onnx-fp16`` and ``coreml-fp16`` are there to ask for
(``--targets``). The verdict is ``onnxbridge.convert``'s: ``result.report["status"]`` and its hops.

A cell is ``passed``; ``refused`` (the conversion raised UnsupportedError, or a BadInputError naming a node: the
op and node its message names); ``failed`` (the report failed: the hop that introduced the difference and why; or
the export, the source's load or the model's build raised); ``skipped`` (a hop did not run, a library or toolchain
is missing: why); ``crashed`` (native code died, or an internal error) or ``timeout`` (``--timeout`` seconds per
cell). Each model runs in a subprocess of its own (TensorFlow and Paddle never share one), its targets in turn; a
crash or a hang ends that cell only, the rest of the model's targets run in a fresh process.

Denominators: every cell run counts for its target, except the DLC's acceptance figure, which is over float models
(neural networks, PCA, MLPs): models whose ONNX graph is made of ``ai.onnx.ml`` operators (trees, linear
classifiers, scalers) run on the DLC too but are counted apart; and ``coreml-flex``, whose cells exist only for
models with a flexible axis.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import zoo_models  # noqa: E402  (beside this file; imports no framework)


@dataclass(frozen=True)
class Target:
    """A column: the backend, its suffix, the precision asked (None: ``convert``'s default) and whether the model's
    flexible axis is kept."""

    backend: str
    suffix: str
    precision: str | None = None
    flexible: bool = False
    title: str = ""


TARGETS = {
    "onnx": Target("onnx", ".onnx", title="ONNX"),
    "openvino": Target("openvino", ".xml", title="OpenVINO"),
    "coreml": Target("coreml", ".mlpackage", title="Core ML fixed"),
    "coreml-flex": Target("coreml", ".mlpackage", flexible=True, title="Core ML flexible"),
    "dlc": Target("dlc", ".dlc", title="DLC"),
    "onnx-fp16": Target("onnx", ".onnx", "fp16", title="ONNX fp16"),
    "coreml-fp16": Target("coreml", ".mlpackage", "fp16", title="Core ML fp16"),
}
DEFAULT_TARGETS = ("onnx", "openvino", "coreml", "coreml-flex", "dlc")
STATUSES = ("passed", "refused", "failed", "skipped", "crashed", "timeout")
OPSET = 17
GRACE_S = 60  # past --timeout, a cell's process is killed (convert's own deadline should have ended it)
PACKAGES = ("onnxbridge", "onnx", "onnxruntime", "onnxruntime-qnn", "openvino", "coremltools", "torch", "torchvision",
            "timm", "transformers", "tensorflow", "keras", "tf2onnx", "paddlepaddle", "paddle2onnx", "scikit-learn",
            "skl2onnx", "onnxmltools", "lightgbm", "xgboost-cpu", "catboost")


def applies(model: zoo_models.ZooModel, target: str) -> bool:
    """Whether ``model`` has a cell for ``target`` (a flexible target needs a flexible axis)."""
    return not TARGETS[target].flexible or model.flex != "none"


def counted(model: zoo_models.ZooModel, target: str) -> bool:
    """Whether ``model``'s cell counts in ``target``'s acceptance denominator (the DLC's: float models only)."""
    return applies(model, target) and not (TARGETS[target].backend == "dlc" and model.ml_ops)


# ---------------------------------------------------------------------------------------------------------------------
# one cell, in the model's own process


_NODE = re.compile(r"node '(?P<node>[^']*)' \((?P<op>[\w.:]+)\)")
_OP_NODE = re.compile(r"\bop (?P<op>[\w.:]+) .*?node '(?P<node>[^']*)'")
_MIL = re.compile(r"MIL op '(?P<op>\w+)'")
_LISTED = re.compile(r"'(?P<node>[^']+)' \((?P<op>[A-Za-z][\w.:]*)\)")  # the DLC's nodes that fell out: 'NAME' (OP)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(_ANSI.sub("", str(text)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def op_and_node(message: str) -> tuple[str | None, str | None]:
    """The op and node a refusal names (``node 'NAME' (OP)``, OpenVINO's ``op OP ... node 'NAME'``, a MIL op)."""
    for pattern in (_NODE, _OP_NODE, _LISTED):
        m = pattern.search(message)
        if m:
            return m["op"], m["node"]
    m = _MIL.search(message)
    return (m["op"], None) if m else (None, None)


def _hop_name(hop: dict) -> str:
    return f"{hop.get('from')} -> {hop.get('to')}"


def _why_failed(hop: dict) -> str:
    """One line: why ``hop`` failed (its first error, else its first failing output's check or reason)."""
    if hop.get("errors"):
        return _one_line(hop["errors"][0])
    for out in hop.get("outputs", []):
        if out.get("passed") is False:
            why = out.get("failed_check") or out.get("reason") or out.get("error") or \
                f"max abs {out.get('max_abs')}, cosine {out.get('cosine')}"
            return _one_line(f"output {out.get('name')}: {why}")
    return "failed"


def cell_from_report(report: dict) -> dict:
    """The cell of a report: its status and, when not passed, the hop and why."""
    status = report.get("status")
    if status == "passed":
        return {"status": "passed"}
    if status == "blocked":
        why = _one_line("; ".join(report.get("blockers", [])) or "blocked")
        op, node = op_and_node(why)
        return {"status": "refused", "op": op, "node": node, "error": why}
    hops = report.get("hops", [])
    if status == "failed":
        name = report.get("introduced_by")
        hop = next((h for h in hops if _hop_name(h) == name), None) or \
            next((h for h in hops if h.get("status") == "failed"), {})
        return {"status": "failed", "hop": _hop_name(hop) if hop else name, "error": _why_failed(hop)}
    hop = next((h for h in hops if h.get("status") == "skipped"), None)
    reason = (hop or {}).get("skipped_reason") or "; ".join(report.get("notes", [])[:1]) or "nothing was compared"
    return {"status": "skipped", "hop": _hop_name(hop) if hop else None, "reason": _one_line(reason)}


def cell_from_exception(exc: BaseException) -> dict:
    """The cell of a conversion that raised."""
    from onnxbridge import errors

    text = exc.one_line() if isinstance(exc, errors.OnnxBridgeError) else f"{type(exc).__name__}: {exc}"
    text = _one_line(text)
    if isinstance(exc, errors.TimedOut):
        return {"status": "timeout", "error": text}
    if isinstance(exc, errors.UnavailableError):
        return {"status": "skipped", "reason": text}
    if isinstance(exc, errors.ExportError):
        return {"status": "failed", "hop": "export", "error": text}
    if isinstance(exc, (errors.UnsupportedError, errors.BadInputError)):
        op, node = op_and_node(text)
        if isinstance(exc, errors.UnsupportedError) or op:
            return {"status": "refused", "op": op, "node": node, "error": text}
        return {"status": "failed", "hop": "load", "error": text}  # the source or the request, not an op
    if isinstance(exc, errors.ValidationFailed) and exc.report:
        return cell_from_report(exc.report)
    return {"status": "crashed", "error": text,
            "trace": None if isinstance(exc, errors.OnnxBridgeError) else traceback.format_exc(limit=-4)[-1200:]}


class _Builds:
    """The model's builds in this process, one per variant (fixed, flexible): a fresh copy per cell where the
    framework's objects copy (PyTorch modules, fitted estimators), else a new build."""

    def __init__(self, model: zoo_models.ZooModel):
        self.model, self.built = model, {}

    def get(self, flexible: bool):
        import copy

        if self.model.framework in ("tensorflow", "paddle"):
            return self.model.build(flexible)
        key = flexible and self.model.framework != "torch"  # a PyTorch module is the same for both
        if key not in self.built:
            self.built[key] = self.model.build(flexible)
        return copy.deepcopy(self.built[key])


def run_cell(model: zoo_models.ZooModel, target: str, builds: _Builds, timeout: float, folder: Path) -> dict:
    """Convert ``model`` to ``target`` and judge it; the cell's record."""
    import onnxbridge

    t = TARGETS[target]
    kwargs: dict = {"to": t.backend, "opset": OPSET, "timeout": timeout}
    if t.precision:
        kwargs["precision"] = t.precision
    if t.flexible:
        kwargs["dynamic"] = list(model.dynamic)
    try:
        source, sample = builds.get(t.flexible)
    except Exception as exc:  # noqa: BLE001 - the model did not build: its cells say why
        return {"status": "failed", "hop": "build", "error": _one_line(f"{type(exc).__name__}: {exc}"),
                "trace": traceback.format_exc(limit=-4)[-1200:]}
    try:
        result = onnxbridge.convert(source, sample, output=folder / f"model{t.suffix}", **kwargs)
    except Exception as exc:  # noqa: BLE001 - every way a conversion ends is a cell
        return cell_from_exception(exc)
    cell = cell_from_report(result.report)
    if t.flexible:
        axes = [h.get("dynamic_axes") for h in result.report.get("hops", []) if h.get("dynamic_axes")]
        if axes:
            cell["sizes"] = axes[-1].get("sizes")
    return cell


def child(name: str, targets: list[str], rows: Path, timeout: float) -> int:
    """Run ``name``'s ``targets`` in turn, appending a line per event to ``rows``: ``{"event": "start", "target"}``
    before a cell, ``{"event": "cell", ...}`` after."""
    import warnings

    warnings.filterwarnings("ignore")
    model = zoo_models.get(name)
    builds = _Builds(model)

    def emit(obj: dict) -> None:
        with open(rows, "a") as f:
            f.write(json.dumps(obj, default=str) + "\n")

    for target in targets:
        emit({"event": "start", "target": target})
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="zoo-cell-") as tmp:
            cell = run_cell(model, target, builds, timeout, Path(tmp))
        emit({"event": "cell", "target": target, "seconds": round(time.perf_counter() - t0, 2), **cell})
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# the parent: a process per model, a cell per target


def _signal_name(code: int) -> str:
    import signal

    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited {code}"


def run_model(model: zoo_models.ZooModel, targets: list[str], timeout: float, threads: int,
              on_cell) -> None:
    """``model``'s cells for ``targets``, each process running the targets still to do; ``on_cell(cell)`` as each
    ends (crashed and timed-out cells too)."""
    missing = model.missing()
    if missing:
        for target in targets:
            on_cell({"target": target, "status": "skipped", "seconds": 0.0,
                     "reason": f"not installed here: {', '.join(missing)} ({model.library} rows)"})
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore", "TF_CPP_MIN_LOG_LEVEL": "3",
           "TOKENIZERS_PARALLELISM": "false"}
    pending = list(targets)
    while pending:
        with tempfile.TemporaryDirectory(prefix="zoo-model-") as tmp:
            rows, log_path = Path(tmp) / "rows.jsonl", Path(tmp) / "child.log"
            rows.touch()
            with open(log_path, "wb") as log:
                proc = subprocess.Popen([sys.executable, __file__, "--_child", model.name, "--_targets",
                                         ",".join(pending), "--_rows", str(rows), "--timeout", str(timeout)],
                                        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                current, started, read, done = None, time.monotonic(), 0, []
                ended = None
                while True:
                    text = rows.read_text()
                    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
                    for line in lines[read:]:
                        obj = json.loads(line)
                        if obj["event"] == "start":
                            current, started = obj["target"], time.monotonic()
                        else:
                            obj.pop("event")
                            done.append(obj["target"])
                            current = None
                            on_cell(obj)
                    read = len(lines)
                    code = proc.poll()
                    if code is not None:
                        if current is not None or len(done) < len(pending):
                            tail = log_path.read_bytes().decode(errors="replace")[-600:]
                            ended = ("crashed", f"the model's process {_signal_name(code)}", _one_line(tail, 300))
                        break
                    if current is not None and time.monotonic() - started > timeout + GRACE_S:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, 9)  # the process this function started, and its children
                        proc.wait()
                        ended = ("timeout", f"no result after {timeout + GRACE_S:g} s: killed", None)
                        break
                    time.sleep(0.3)
            if current is not None:
                on_cell({"target": current, "status": ended[0], "error": ended[1], "log": ended[2],
                         "seconds": round(time.monotonic() - started, 2)})
                done.append(current)
            elif ended is not None and not done:  # died before any cell started: do not retry forever
                for target in pending:
                    on_cell({"target": target, "status": "crashed", "error": ended[1], "log": ended[2],
                             "seconds": 0.0})
                return
        pending = [t for t in pending if t not in done]


# ---------------------------------------------------------------------------------------------------------------------
# results, totals, the table


def versions() -> dict:
    from importlib import metadata

    found = {}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def load_results(path: Path) -> dict:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or "cells" not in data:
        raise SystemExit(f"{path}: not a results file of benchmarks/zoo.py")
    return data


def save_results(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _catalog(name: str) -> zoo_models.ZooModel | None:
    try:
        return zoo_models.get(name)
    except KeyError:
        return None


def totals(cells: list[dict], targets: list[str]) -> dict:
    """Per target: cells by status, the acceptance denominator (``counted``) and how many of those passed, seconds."""
    out = {}
    for t in targets:
        mine = [c for c in cells if c["target"] == t]
        base = [c for c in mine if (m := _catalog(c["model"])) is None or counted(m, t)]
        out[t] = {"cells": len(mine), "by_status": {s: sum(c["status"] == s for c in mine) for s in STATUSES},
                  "denominator": len(base), "passed": sum(c["status"] == "passed" for c in base),
                  "seconds": round(sum(c.get("seconds") or 0.0 for c in mine), 1),
                  "apart": len(mine) - len(base)}
    return out


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f} %" if d else "-"


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s"


_NUM = re.compile(r"(?<![\w.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?(?!\w)")
_QUOTED = re.compile(r"(?<!\w)'[^']*'(?!\w)")  # a quoted name (not an apostrophe: "OpenVINO's")


def cause(cell: dict) -> str:
    """The group a non-passing cell's cause falls in: the op refused, else the hop and the error with names and
    numbers taken out."""
    status = cell["status"]
    if status == "refused" and cell.get("op"):
        return f"refused: {cell['op'].split('::')[-1]}"  # the op, whichever way a backend spells its domain
    text = cell.get("error") or cell.get("reason") or ""
    text = _NUM.sub("N", _QUOTED.sub("'…'", text))
    text = re.sub(r"\([^()]{40,}\)", "(…)", text)[:110]
    hop = f" at {cell['hop']}" if cell.get("hop") else ""
    return f"{status}{hop}: {text}"


def causes(cells: list[dict], top: int = 10) -> list[tuple[str, int, list[str], list[str]]]:
    """The most common causes: (cause, cells, targets, some models)."""
    groups: dict[str, list[dict]] = {}
    for c in cells:
        if c["status"] != "passed":
            groups.setdefault(cause(c), []).append(c)
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]
    return [(k, len(v), sorted({c["target"] for c in v}), list(dict.fromkeys(c["model"] for c in v))[:6])
            for k, v in ranked]


_ICON = {"passed": "✅", "refused": "⛔", "failed": "❌", "skipped": "⏭️", "crashed": "💥", "timeout": "⏱️"}


def _short(cell: dict) -> str:
    s = cell["status"]
    sec = f" {cell['seconds']:.0f}s" if cell.get("seconds") is not None else ""
    if s == "passed":
        return f"✅{sec}"
    if s == "refused":
        return f"⛔ {cell.get('op') or 'refused'}"
    if s == "failed":
        return f"❌ {(cell.get('hop') or 'failed').replace(' -> ', '→')}"
    return f"{_ICON[s]} {s}"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def totals_line(data: dict) -> str:
    """One line for the README: passed / denominator per target."""
    cells = data["cells"]
    targets = [t for t in TARGETS if any(c["target"] == t for c in cells)]
    tot = totals(cells, targets)
    models = len({c["model"] for c in cells})
    parts = []
    for t in targets:
        x = tot[t]
        what = {"coreml-flex": " of the models with a flexible axis", "dlc": " of the float models"}.get(t, "")
        parts.append(f"{TARGETS[t].title} {x['passed']}/{x['denominator']} ({_pct(x['passed'], x['denominator'])}"
                     f"{what})")
    date = (data.get("runs") or [{}])[-1].get("date", "")[:10]
    catalog = len(zoo_models.NAMES)
    scope = f"{models} architectures" if models >= catalog else f"partial: {models} of the {catalog} architectures"
    return f"Last zoo run ({date}, {scope}): " + ", ".join(parts) + "."


def table(data: dict) -> str:
    """The coverage table (markdown) of a results file."""
    cells = data["cells"]
    targets = [t for t in TARGETS if any(c["target"] == t for c in cells)]
    by = {(c["model"], c["target"]): c for c in cells}
    names = list(dict.fromkeys([n for n in zoo_models.NAMES if any(k[0] == n for k in by)] +
                               [c["model"] for c in cells]))
    tot = totals(cells, targets)
    runs = data.get("runs", [])
    lines = ["# Coverage: the zoo", "",
             f"Generated by [`benchmarks/zoo.py`](../benchmarks/zoo.py) from the catalog "
             f"[`benchmarks/zoo_models.py`](../benchmarks/zoo_models.py): {len(names)} architectures with random "
             "weights (nothing downloaded) at small sizes (64x64 images where the architecture allows, 16-token "
             "sequences, 2 layers and hidden size 64 for the transformers), each converted by `onnxbridge.convert` "
             f"at opset {OPSET} and its default precision and judged by its report (`status` and hops). Regenerate "
             "with the command below; `--resume --rerun failed` runs again only the cells that did not pass.", ""]
    missing = [n for n in zoo_models.NAMES if n not in names]
    if missing:
        lines += [f"**Partial:** these results cover {len(names)} of the catalog's {len(zoo_models.NAMES)} "
                  f"architectures; {len(missing)} have not run yet (`--resume` runs them): "
                  + ", ".join(f"`{n}`" for n in missing) + ".", ""]
    for r in runs:
        lines.append(f"- {r.get('date', '')[:19].replace('T', ' ')} UTC, {_duration(r.get('seconds', 0))}: "
                     f"`{r.get('command', '')}`")
    vers = (runs[-1].get("versions") if runs else None) or {}
    if vers:
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + "."]
    lines += ["", "## Totals", "",
              "| target | passed | of | % | refused | failed | skipped | crashed | timeout | wall time |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for t in targets:
        x = tot[t]
        st = x["by_status"]
        lines.append(f"| {TARGETS[t].title} (`{t}`) | {x['passed']} | {x['denominator']} | "
                     f"{_pct(x['passed'], x['denominator'])} | {st['refused']} | {st['failed']} | {st['skipped']} | "
                     f"{st['crashed']} | {st['timeout']} | {_duration(x['seconds'])} |")
    apart = [c["model"] for c in cells if c["target"] == "dlc" and (m := _catalog(c["model"])) and m.ml_ops]
    lines += ["", "Denominators: every model for ONNX, OpenVINO and Core ML fixed; the models with a flexible axis "
              "(an image's height and width, a sequence) for Core ML flexible; the float models for the DLC"
              + (f" ({len(apart)} models whose ONNX graph is made of `ai.onnx.ml` operators, trees and linear "
                 f"classifiers, run on the DLC too and are counted apart: {', '.join(apart)})" if apart else "")
              + ". The failed, refused, skipped, crashed and timed-out columns count every cell of the target. Wall "
              "time: the cells' own seconds summed (model build, export, backend build and validation).", ""]

    libs = list(dict.fromkeys(c["library"] for c in cells if c.get("library")))
    lines += ["## Per library", "", "| library | models | " + " | ".join(TARGETS[t].title for t in targets) + " |",
              "|---|---|" + "---|" * len(targets)]
    for lib in libs:
        row = []
        for t in targets:
            mine = [c for c in cells if c.get("library") == lib and c["target"] == t]
            row.append(f"{sum(c['status'] == 'passed' for c in mine)}/{len(mine)}" if mine else "—")
        n = len({c["model"] for c in cells if c.get("library") == lib})
        lines.append(f"| {lib} | {n} | " + " | ".join(row) + " |")

    lines += ["", "## Most common causes", "", "Cells that did not pass, grouped by the op refused, or by the hop and "
              "its error (names and numbers taken out).", "", "| cause | cells | targets | models |",
              "|---|---|---|---|"]
    for text, n, ts, ms in causes(cells, top=15):
        lines.append(f"| {_md(text)} | {n} | {', '.join(ts)} | {', '.join(ms)}{' ...' if n > len(ms) else ''} |")

    lines += ["", "## Per model", "",
              "✅ passed (seconds) · ⛔ refused (the op) · ❌ failed (the hop that introduced the difference) · "
              "⏭️ skipped · 💥 crashed · ⏱️ timeout · — no such cell (no flexible axis). Details below.", "",
              "| model | library | family | flexible axis | " + " | ".join(TARGETS[t].title for t in targets) + " |",
              "|---|---|---|---|" + "---|" * len(targets)]
    for name in names:
        m = _catalog(name)
        row = [_md(_short(by[name, t])) if (name, t) in by else "—" for t in targets]
        lib = m.library if m else next(c.get("library", "") for c in cells if c["model"] == name)
        lines.append(f"| `{name}` | {lib} | {m.family if m else ''} | {m.flex if m else ''} | "
                     + " | ".join(row) + " |")

    lines += ["", "## Cells that did not pass", ""]
    for name in names:
        for t in targets:
            c = by.get((name, t))
            if c is None or c["status"] == "passed":
                continue
            where = ""
            if c.get("op") or c.get("node"):
                where = f" {c.get('op') or ''}" + (f" (node `{_md(c['node'])}`)" if c.get("node") else "") + ":"
            elif c.get("hop"):
                where = f" at {c['hop']}:"
            log = f" (its output ended: {_md(c['log'][-200:])})" if c.get("log") else ""
            lines.append(f"- `{name}` · {t} · {c['status']}{where} {_md(c.get('error') or c.get('reason') or '')}"
                         + log)
    return "\n".join(lines) + "\n"


README_BEGIN, README_END = "<!-- zoo totals -->", "<!-- /zoo totals -->"


def update_readme(path: Path, line: str) -> bool:
    """Replace what lies between the README's zoo markers (or the lone begin marker) with ``line``."""
    text = path.read_text(encoding="utf-8")
    if README_BEGIN not in text:
        return False
    start = text.index(README_BEGIN) + len(README_BEGIN)
    end = text.find(README_END, start)
    tail = text[end:] if end >= 0 else README_END + text[start:]
    path.write_text(text[:start] + "\n" + line + "\n" + tail, encoding="utf-8")
    return True


def manifest(models: list[zoo_models.ZooModel], targets: list[str], path: Path) -> str:
    """The zoo as an ``onnxbridge matrix`` manifest written at ``path`` (sources relative to its folder)."""
    folder = path.resolve().parent
    factory = os.path.relpath(HERE / "zoo_models.py", folder)
    helper = os.path.relpath(ROOT / "tests" / "helpers" / "zoo.py", folder)
    fixed = [TARGETS[t].backend for t in targets if not TARGETS[t].flexible and TARGETS[t].precision is None]
    flexible = any(TARGETS[t].flexible for t in targets)
    lines = ["# The zoo (benchmarks/zoo_models.py) as an onnxbridge matrix manifest: written by",
             "# `benchmarks/zoo.py --manifest`. Models with a flexible axis have a second entry, NAME_flexible, for",
             "# Core ML with that axis as a range. Run: onnxbridge matrix THIS.toml -o OUT --workers 1", "",
             "[matrix]", f"targets = {json.dumps(list(dict.fromkeys(fixed)) or ['onnx'])}", 'precisions = ["fp32"]',
             f"opsets = [{OPSET}]", "# the factories build on the verdict tests' zoo: its edits are part of the key",
             f"data = [{json.dumps(helper)}]", ""]
    for m in models:
        if fixed:
            lines += ["[[model]]", f'name = "{m.name}"', f'source = "{factory}:{m.name}"', ""]
        if flexible and m.flex != "none":
            lines += ["[[model]]", f'name = "{m.name}_flexible"', f'source = "{factory}:flexible_{m.name}"',
                      'targets = ["coreml"]', f"dynamic = {json.dumps(list(m.dynamic))}", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------


def _parse_targets(text: str | None) -> list[str]:
    if not text:
        return list(DEFAULT_TARGETS)
    picked = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in picked if t not in TARGETS]
    if unknown:
        raise SystemExit(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    return picked


def _select(pattern: str | None) -> list[zoo_models.ZooModel]:
    if not pattern:
        return list(zoo_models.MODELS)
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise SystemExit(f"--models {pattern!r} is not a regular expression: {exc}") from None
    picked = [m for m in zoo_models.MODELS if rx.search(m.name) or rx.fullmatch(m.library)]
    if not picked:
        raise SystemExit(f"--models {pattern!r} matches no zoo model (see --list)")
    return picked


def _rerun(text: str | None) -> set[str]:
    if not text:
        return set()
    if text == "failed":
        return set(STATUSES) - {"passed"}
    picked = {s.strip() for s in text.split(",") if s.strip()}
    unknown = picked - set(STATUSES)
    if unknown:
        raise SystemExit(f"--rerun: unknown status(es) {', '.join(sorted(unknown))}; 'failed' (every cell that did "
                         f"not pass) or some of {', '.join(STATUSES)}")
    return picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--list", action="store_true", help="list the catalog and exit")
    p.add_argument("--models", metavar="REGEX", help="models whose name (or library) matches (default: all)")
    p.add_argument("--targets", help=f"comma-separated targets (default: {','.join(DEFAULT_TARGETS)}; also "
                                     f"{', '.join(t for t in TARGETS if t not in DEFAULT_TARGETS)})")
    p.add_argument("--jobs", type=int, default=1, help="models at once, each in its own process (default 1)")
    p.add_argument("--timeout", type=float, default=600, help="seconds a cell may take (default 600)")
    p.add_argument("--out", metavar="FILE", help="results JSON, written as models finish")
    p.add_argument("--resume", action="store_true", help="keep the finished cells of --out; run the others")
    p.add_argument("--rerun", metavar="STATUS", help="with --resume: run these cells again ('failed': every cell "
                                                    "that did not pass; or statuses, e.g. crashed,timeout)")
    p.add_argument("--table", metavar="FILE", help="write the coverage table (markdown) of the results here")
    p.add_argument("--readme", metavar="FILE", help="replace the totals line between the README's zoo markers")
    p.add_argument("--manifest", metavar="FILE", help="write the selection as an onnxbridge matrix manifest and exit")
    p.add_argument("--_child", help=argparse.SUPPRESS)
    p.add_argument("--_targets", help=argparse.SUPPRESS)
    p.add_argument("--_rows", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args._child:
        return child(args._child, args._targets.split(","), Path(args._rows), args.timeout)
    targets = _parse_targets(args.targets)
    models = _select(args.models)
    if args.list:
        for m in models:
            flex = f"{m.flex}: {' '.join(m.dynamic)}" if m.flex != "none" else "none"
            print(f"{m.name:40s} {m.library:13s} {m.family:16s} {flex}{'  [ai.onnx.ml]' if m.ml_ops else ''}")
        print(f"{len(models)} models")
        return 0
    if args.manifest:
        path = Path(args.manifest)
        path.write_text(manifest(models, targets, path))
        print(f"wrote {path}: {len(models)} models")
        return 0
    if args.rerun and not args.resume:
        raise SystemExit("--rerun needs --resume (and --out)")
    if args.resume and not (args.out and Path(args.out).exists()):
        raise SystemExit("--resume needs --out FILE of an earlier run")
    rerun = _rerun(args.rerun)
    data = load_results(Path(args.out)) if args.resume else {"cells": [], "runs": []}
    selected = {m.name for m in models}
    kept = [c for c in data["cells"] if not (c["model"] in selected and c["target"] in targets and
                                             c["status"] in rerun)]
    have = {(c["model"], c["target"]) for c in kept}
    jobs = [(m, [t for t in targets if applies(m, t) and (m.name, t) not in have]) for m in models]
    jobs = [(m, ts) for m, ts in jobs if ts]
    data["cells"] = kept
    command = "benchmarks/zoo.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    run = {"command": command, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "versions": versions(), "cells": sum(len(ts) for _, ts in jobs), "seconds": 0.0}
    data.setdefault("runs", [])
    if run["cells"]:  # a resumed run with nothing left to do (rewriting the table) is no run of its own
        data["runs"].append(run)

    lanes = max(1, min(args.jobs, len(jobs) or 1))
    threads = max(1, (os.cpu_count() or 2) // lanes)
    lock = threading.Lock()
    fresh: list[dict] = []  # this run's cells
    t0 = time.perf_counter()
    order = {n: i for i, n in enumerate(zoo_models.NAMES)}

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(soft_wrap=True)
    console.print(f"{len(jobs)} models, {run['cells']} cells ({', '.join(targets)}); {lanes} at once, "
                  f"timeout {args.timeout:g} s per cell" + (f"; {len(kept)} cells kept from {args.out}"
                                                            if args.resume else ""))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("zoo", total=run["cells"])

        def do(m: zoo_models.ZooModel, ts: list[str]) -> None:
            got: list[dict] = []

            def on_cell(cell: dict) -> None:
                cell = {"model": m.name, "library": m.library, **cell}
                with lock:
                    got.append(cell)
                    fresh.append(cell)
                    data["cells"].append(cell)
                    progress.advance(task)
                    progress.update(task, description=f"{m.name} {cell['target']}")

            run_model(m, ts, args.timeout, threads, on_cell)
            with lock:
                data["cells"].sort(key=lambda c: (order.get(c["model"], 1 << 30), c["model"],
                                                  list(TARGETS).index(c["target"]) if c["target"] in TARGETS else 99))
                run["seconds"] = round(time.perf_counter() - t0, 1)
                if args.out:
                    save_results(Path(args.out), data)
                progress.console.print(f"{m.name:38s} " + "  ".join(f"{c['target']} {_short(c)}" for c in got),
                                       markup=False, soft_wrap=True)

        with ThreadPoolExecutor(lanes) as pool:
            for f in [pool.submit(do, m, ts) for m, ts in jobs]:
                f.result()
    run["seconds"] = round(time.perf_counter() - t0, 1)
    if args.out:
        save_results(Path(args.out), data)

    cells = data["cells"]
    shown = [t for t in TARGETS if any(c["target"] == t for c in cells)]
    tot = totals(cells, shown)
    this_run = totals(fresh, shown)
    console.print(f"\nwall time {_duration(run['seconds'])}; per target, the cells' own seconds summed (this run; "
                  "every cell of the results):")
    for t in shown:
        x = tot[t]
        console.print(f"  {t:12s} passed {x['passed']:4d}/{x['denominator']:<4d} "
                      f"{_pct(x['passed'], x['denominator']):>8s}"
                      f"   {' '.join(f'{s} {n}' for s, n in x['by_status'].items() if n and s != 'passed')}"
                      f"   wall time {_duration(this_run[t]['seconds'])}; {_duration(x['seconds'])}")
    console.print("\nmost common causes:")
    for text, n, ts, ms in causes(cells):
        console.print(f"  {n:4d}  {text}  [{', '.join(ts)}]  e.g. {', '.join(ms[:3])}", markup=False, soft_wrap=True)
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        Path(args.table).write_text(table(data), encoding="utf-8")
        console.print(f"wrote {args.table}")
    if args.readme:
        ok = update_readme(Path(args.readme), totals_line(data))
        console.print(f"{'updated' if ok else 'no zoo markers in'} {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
