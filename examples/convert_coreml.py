"""Convert the example PyTorch CNN and transformer block to Core ML in one call (torch -> ONNX -> MIL -> .mlpackage) and print
what the reports say.

    python examples/convert_coreml.py [OUT_DIR]

Core ML cannot run on Linux, so the Core ML hop is checked by evaluating the saved MIL program on the
host (numpy kernels per MIL op) against onnxruntime on the same inputs, in fp32 and in fp16.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (the factories beside this script)

import onnxbridge  # noqa: E402


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    failed = 0
    for name in ("cnn", "transformer"):
        model, sample = getattr(models, name)()
        for precision in ("fp32", "fp16"):
            path = out / f"{name}_{precision}.mlpackage"
            result = onnxbridge.convert(model, sample, to="coreml", output=path, opset=17, precision=precision,
                                        report=out / f"{name}_{precision}_coreml.json")
            for hop in result.report["hops"]:
                worst = max(o.get("max_abs", 0.0) for o in hop["outputs"])
                print(f"{name:11s} {precision} {hop['from']:>6s} -> {hop['to']:<7s} {hop['status']:7s} "
                      f"max abs diff {worst:.2e}  -> {path}")
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
