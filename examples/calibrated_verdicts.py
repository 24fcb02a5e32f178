"""Calibrated verdicts: a correct fp16 conversion passes, a wrong one fails, on every fp16 path, and each hop says
which rule judged it.

    python examples/calibrated_verdicts.py [OUT_DIR]

1. The example CNN to ONNX fp16, Core ML fp16 and DLC: the export is checked in fp32 against torch, the fp16
   artifact against the fp32 ONNX graph, within 4x the error of an fp16 emulation of that graph (rule
   ``fp16-emulation``); SNR and cosine are printed beside max abs.
2. The same conversions with one planted bug in the exported graph (the head's weight x1.05): each fails, on its
   fp32 torch -> onnx hop, which no longer takes the fp16 target's looser tolerance.
3. Logits of ~1e-9 (a model at its initial weights) multiplied by 1.03: fails at fp32, judged relative to the
   output's own scale instead of passing under the absolute floor.
4. A TensorRT engine without a CUDA GPU: the hop is ``skipped``, ``result.passed`` is False.

Exits 0 when every verdict is the expected one; prints each.
"""
from __future__ import annotations

import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (the factories beside this script)

import onnxbridge  # noqa: E402
from onnxbridge import builder  # noqa: E402

TARGETS = [("onnx", "cnn16.onnx"), ("coreml", "cnn16.mlpackage"), ("dlc", "cnn16.dlc")]


@contextmanager
def planted(scale: float):
    """Every export in this block has its last layer's weight (the model's head) multiplied by ``scale``: a bug in
    the converted model that the source does not have."""
    finalize = builder.finalize

    def buggy(model: onnx.ModelProto, **kw):
        weights = {t.name: t for t in model.graph.initializer}
        node = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")
                and n.input[1] in weights][-1]
        w = weights[node.input[1]]
        w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(scale), w.name))
        return finalize(model, **kw)

    builder.finalize = buggy
    try:
        yield
    finally:
        builder.finalize = finalize


def line(result) -> str:
    rep = result.report
    parts = []
    for hop in rep["hops"]:
        out = hop["outputs"][0] if hop["outputs"] else {}
        snr = out.get("snr_db")
        parts.append(f"{hop['from']} -> {hop['to']}: {hop['status']} [{hop['tolerance'].get('rule')}]"
                     + (f" max abs {out['max_abs']:.2g}, SNR {snr:.0f} dB" if "max_abs" in out and snr else ""))
    return f"{rep['status']}: " + "; ".join(parts)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    model, sample = models.cnn()
    wrong = []
    for to, name in TARGETS:
        result = onnxbridge.convert(model, sample, to=to, output=out / name, precision="fp16", opset=17,
                                    report=out / f"{to}.json")
        print(f"correct, {to} fp16 -> {line(result)}")
        wrong += [] if result.passed else [f"correct {to} fp16 did not pass"]
        with planted(1.05):
            result = onnxbridge.convert(model, sample, to=to, output=out / f"bug-{name}", precision="fp16", opset=17)
        print(f"head x1.05, {to} fp16 -> {line(result)}")
        first = result.report["hops"][0]
        if result.report["status"] != "failed" or first["status"] != "failed" or first["tolerance"]["rule"] != "fp32":
            wrong.append(f"the planted bug was not caught on the fp32 hop to {to}")

    import torch

    tiny = models.cnn()[0]  # logits of ~1e-9, as a model at its initial weights can give
    with torch.no_grad():
        last = [m for m in tiny.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))][-1]
        last.weight.mul_(1e-9)
        last.bias.mul_(1e-9)
    with planted(1.03):
        result = onnxbridge.convert(tiny, sample, output=out / "tiny.onnx")
    print(f"logits ~1e-9, x1.03 -> {line(result)}")
    if result.report["status"] != "failed":
        wrong.append("tiny logits x1.03 passed")

    result = onnxbridge.convert(model, sample, to="tensorrt", output=out / "cnn.engine", precision="fp16")
    print(f"TensorRT -> {line(result)}; result.passed = {result.passed}")
    if result.report["status"] == "skipped" and result.passed:
        wrong.append("a skipped hop counted as passed")
    if wrong:
        print("unexpected: " + "; ".join(wrong))
        return 1
    print("every verdict as expected: correct conversions passed, planted bugs failed")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="verdicts-"))))
