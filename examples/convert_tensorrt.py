"""Convert the example PyTorch CNN (dynamic batch) and transformer block (dynamic batch and sequence) to TensorRT
engines in one call each (torch -> ONNX -> TensorRT) and print what the reports say.

    python examples/convert_tensorrt.py [OUT_DIR]

With TensorRT-RTX (``pip install 'onnxbridge[tensorrt]'``) engines build without a GPU. Running an engine needs a CUDA
device: without one the TensorRT hop is reported as "skipped: no CUDA device", never as passed. int8 takes its Q/DQ
scales from calibration batches (random here, to show the path; use real inputs).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402  (the factories beside this script)

import onnxbridge  # noqa: E402

DYNAMIC = {"cnn": ["x:0:batch"], "transformer": ["x:0:batch", "x:1:seq:4..16"]}


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in ("cnn", "transformer"):
        model, sample = getattr(models, name)()
        calibration = models.calibration_npz(out / f"{name}_calibration.npz", sample[0], batches=4, seed=0)
        for precision in ("fp32", "fp16", "int8"):
            path = out / f"{name}_{precision}.engine"
            result = onnxbridge.convert(model, sample, to="tensorrt", output=path, precision=precision,
                                        dynamic=DYNAMIC[name], report=out / f"{name}_{precision}_tensorrt.json",
                                        calibration=calibration if precision == "int8" else None)
            trt = result.report["artifact"]["backend"]
            profile = trt["profiles"]["x"]
            print(f"{name:11s} {precision} {trt['flavour']} {trt['version']} ({trt['api']}): "
                  f"{trt['engine_bytes']:,} bytes in {trt['build_s']:.2f}s, profile x "
                  f"min {profile['min']} opt {profile['opt']} max {profile['max']}  -> {path}")
            for hop in result.report["hops"]:
                if hop["status"] == "skipped":
                    detail = hop["skipped_reason"]
                else:
                    detail = f"max abs diff {max((o.get('max_abs', 0.0) for o in hop['outputs']), default=0.0):.2e}"
                print(f"    {hop['from']:>6s} -> {hop['to']:<8s} {hop['status']:7s} {detail}")
            # without a GPU the TensorRT hop is skipped: never a pass (result.passed is False, the CLI exits 5
            # unless --allow-skipped), but not a failure either, which is all this example counts
            failed += result.report["status"] == "failed"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
