"""Validation reports for CI: convert a model, break a copy of it, and render both checks.

    python examples/validation_reports.py [OUT_DIR]

The example CNN is converted at opset 17 and checked on three random batches; a copy with one weight
tensor scaled by 1.1 is then validated against the same PyTorch model. Each check writes JSON, JUnit
XML, Markdown and HTML; the script prints which outputs and hops failed and exits 0 when the good model
passes and the broken one is caught.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (the factories beside this script)

import onnxbridge  # noqa: E402
from onnxbridge.renderers import write  # noqa: E402


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    model, sample = models.cnn()
    good = out / "report_cnn.onnx"
    rep = onnxbridge.convert(model, sample, output=good, opset=17, dynamic={"x": {0: "batch"}}, samples=3).report
    broken = onnx.load(good)
    weights = max(broken.graph.initializer, key=lambda t: np.prod(t.dims))
    weights.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights) * 1.1, weights.name))
    bad = out / "report_cnn_scaled.onnx"
    onnx.save(broken, bad)
    bad_rep = onnxbridge.validate(model, bad, sample_inputs=sample, samples=3)
    for name, report in (("good", rep), ("scaled", bad_rep)):
        for fmt, suffix in (("junit", "xml"), ("markdown", "md"), ("html", "html")):
            write(report, out / f"report_{name}.{suffix}", fmt)
        for hop in report["hops"]:
            failing = [o["name"] for o in hop["outputs"] if not o["passed"]]
            print(f"{name:7s} {hop['from']} -> {hop['to']}: {hop['status']:6s} ({hop['samples']} samples)"
                  + (f", failing outputs: {', '.join(failing)}" if failing else "")
                  + f"  -> {out / f'report_{name}.html'}")
    return 0 if rep["status"] == "passed" and bad_rep["status"] == "failed" else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
