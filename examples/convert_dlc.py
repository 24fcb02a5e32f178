"""Convert the example PyTorch CNN and transformer block to Qualcomm DLC in one call each (torch -> ONNX -> .dlc
through onnxruntime-qnn's QnnIr serializer, or the QAIRT SDK when installed) and print what the reports say.

    python examples/convert_dlc.py [OUT_DIR]

The dlc hop runs the prepared model on onnxruntime-qnn's x86 HTP simulator (fp16 compute, no CPU fallback)
against onnxruntime on the CPU, for an fp32, an fp16 and an int8 (QDQ, calibrated on random batches) DLC.
Needs ``pip install 'onnxbridge[qnn]'``.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (the factories beside this script)

import onnxbridge  # noqa: E402


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in ("cnn", "transformer"):
        model, sample = getattr(models, name)()
        calibration = models.calibration_npz(out / f"{name}_calibration.npz", sample[0])
        for precision in ("fp32", "fp16", "int8"):
            path = out / f"{name}_{precision}.dlc"
            result = onnxbridge.convert(model, sample, to="dlc", output=path, opset=17, precision=precision,
                                        calibration=calibration if precision == "int8" else None,
                                        report=out / f"{name}_{precision}_dlc.json")
            facts = result.report["artifact"]["backend"]
            for hop in result.report["hops"]:
                worst = max((o.get("max_abs", 0.0) for o in hop["outputs"]), default=0.0)
                print(f"{name:11s} {precision} {hop['from']:>6s} -> {hop['to']:<4s} {hop['status']:7s} "
                      f"max abs diff {worst:.2e} (atol {hop['tolerance']['atol']:g})  -> {path} "
                      f"({path.stat().st_size:,} bytes, {facts['flavour']}, {sum(facts['ops'].values())} ops)")
                if hop["status"] == "skipped":
                    print(f"{'':11s} skipped: {hop['skipped_reason']}")
            print(f"{name} {precision}: {result.report['status']}")
            failed += result.report["status"] != "passed"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
