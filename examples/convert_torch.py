"""Convert the example PyTorch models with the Python API and print what the reports say.

    python examples/convert_torch.py [OUT_DIR]

Each model is exported at opset 13, 17 and the exporter's default with a dynamic batch axis,
written atomically, and validated against torch at the sample batch and at batch + 1.
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
    for name in ("cnn", "lstm", "transformer"):
        model, sample = getattr(models, name)()
        for opset in (13, 17, None):
            path = out / f"{name}_opset{opset or 'default'}.onnx"
            result = onnxbridge.convert(model, sample, output=path, opset=opset, dynamic={"x": {0: "batch"}},
                                        report=path.with_suffix(".json"))
            rep = result.report
            worst = max(o.get("max_abs", 0.0) for h in rep["hops"] for o in h["outputs"])
            print(f"{name:12s} opset {rep['artifact']['opset']:>2}  {rep['status']:7s} max abs diff {worst:.2e}  "
                  f"{rep['timings']['total_s']:.1f}s  -> {path}")
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
