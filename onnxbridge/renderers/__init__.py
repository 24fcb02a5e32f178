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
    from onnxbridge.fileio import atomic_write_bytes

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
    """One line on an output: the numbers that decide pass or fail."""
    if "error" in out:
        return out["error"]
    if out.get("kind") == "exact":
        return f"exact comparison, {out['mismatch_fraction']:.2%} of elements differ"
    text = (f"max abs {out['max_abs']:.3g}, max rel {out['max_rel']:.3g}, cosine {out['cosine']:.6f}, "
            f"{out['mismatch_fraction']:.2%} out of tolerance "
            f"(atol {out.get('atol', 0):g}, rtol {out.get('rtol', 0):g}), needs atol {out['required_atol']:.3g}")
    if "top1_agreement" in out:
        text += f", top-1 agreement {out['top1_agreement']:.2%}"
    if out.get("reason"):  # NaN/inf on one side: the metrics above cover the finite values only
        text = f"{out['reason']}; over the finite values: {text}"
    return text
