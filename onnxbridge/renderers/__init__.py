"""Renderers over one report dict: JUnit XML (CI test results), Markdown (CI comments), HTML (a person).

JSON is the report itself (``report.py``); the terminal table is ``report.render``. Each module here has
``render(report) -> str``; ``write`` picks one by format and writes the file atomically.
"""
from __future__ import annotations

import importlib
from pathlib import Path

FORMATS = {"junit": "onnxbridge.renderers.junit", "markdown": "onnxbridge.renderers.markdown",
           "html": "onnxbridge.renderers.html"}


def render(report: dict, fmt: str) -> str:
    return importlib.import_module(FORMATS[fmt]).render(report)


def write(report: dict, path: str | Path, fmt: str) -> Path:
    from onnxbridge.atomic import atomic_write_bytes

    return atomic_write_bytes(path, render(report, fmt).encode("utf-8"))


def output_rows(report: dict):
    """(hop, output) pairs in report order: one test case / table row each."""
    for hop in report["hops"]:
        for out in hop["outputs"]:
            yield hop, out


def chains(hops: list[dict]) -> list[list[dict]]:
    """Hops grouped into runs where each starts where the previous ended (one diagram row each)."""
    rows: list[list[dict]] = []
    for hop in hops:
        if rows and rows[-1][-1]["to"] == hop["from"]:
            rows[-1].append(hop)
        else:
            rows.append([hop])
    return rows


def verdict(out: dict) -> str:
    """One line on an output: the numbers that decide pass or fail. A failed output leads with the check that failed
    (``failed_check``, 1.8), then max abs, cosine, SNR and the budget it was held to."""
    from onnxbridge.report import budget_text, snr_cell

    if "error" in out:
        return out["error"]
    if out.get("kind") == "exact":
        return f"exact comparison, {out.get('mismatch_fraction', 0):.2%} of elements differ"
    parts = [f"max abs {_g(out.get('max_abs'))}", f"max rel {_g(out.get('max_rel'))}",
             f"cosine {_g(out.get('cosine'), '.6f')}"]
    if "snr_db" in out:
        parts.append(f"SNR {snr_cell(out)} dB")
    if out.get("rel_rms") is not None:
        parts.append(f"rel rms {_g(out['rel_rms'])}")
    budget = budget_text(out)
    elementwise_rule = (out.get("budget") or {}).get("rule") in (None, "fp32", "fixed", "user")
    if "mismatch_fraction" in out and elementwise_rule:  # other rules do not judge element by element
        elementwise = f"{out['mismatch_fraction']:.2%} out of tolerance"
        if not budget:
            elementwise += f" (atol {out.get('atol', 0):g}, rtol {out.get('rtol', 0):g})"
        if out.get("required_atol") is not None:
            elementwise += f", needs atol {out['required_atol']:.3g}"
        parts.append(elementwise)
    if "top1_agreement" in out:
        parts.append(f"top-1 agreement {out['top1_agreement']:.2%}")
    text = ", ".join(parts) + (f"; {budget}" if budget else "")
    if out.get("reason"):  # NaN/inf on one side: the metrics above cover the finite values only
        text = f"{out['reason']}; over the finite values: {text}"
    if not out.get("passed", True) and out.get("failed_check") and out["failed_check"] != out.get("reason"):
        text = f"{out['failed_check']}; {text}"
    return text


def _g(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def model_name(report: dict) -> str:
    """A short name for the report's model, unique per model in one CI job: the source file's stem (with the factory
    function for ``file.py:factory``), else its description without the kind (``nn.Module ResNet`` -> ``ResNet``).
    Only letters, digits and ``_:+-`` are kept, so it can lead a JUnit classname."""
    import re

    src = report.get("source") or {}
    text = ""
    if src.get("path"):
        name = Path(str(src["path"]).rstrip("/\\")).name
        file, _, factory = name.rpartition(":") if ":" in name else (name, "", "")
        if factory:  # module:function or file.py:function
            file = Path(file).stem if file.endswith(".py") else file.rpartition(".")[2]
            text = f"{file}:{factory}" if file else factory
        else:
            text = Path(file).stem
    if not text:
        text = str(src.get("description") or "")
        kind = str(src.get("kind") or "")
        if kind and text.startswith(kind + " "):
            text = text[len(kind) + 1:]
    return re.sub(r"[^\w:+-]+", "_", text).strip("_") or "model"
