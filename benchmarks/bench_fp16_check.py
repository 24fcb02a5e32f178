"""What validating an fp16 model with fp16 arithmetic costs, against one plain onnxruntime session of the same file
(which computes chains of fp16 ops in fp32): the rounded graph the hop runs (``runtime.Session``: every fp16 value
stored as fp16, one session) plus the fp16 emulation of the fp32 graph it is judged against, and the node-by-node
evaluator (``fp16eval.Fp16Evaluator``, the same numbers as the rounded graph), on the example models and a 6-layer
d=512 transformer encoder, converted with ``--precision fp16``.

    .venv/bin/python benchmarks/bench_fp16_check.py [--repeat 30] [--models cnn,lstm,transformer,encoder]

Prints per model: nodes, best-of-N milliseconds of each, and the ratios to the plain run.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def encoder():
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, norm_first=True, dropout=0.0)
    return torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).eval(), (torch.randn(4, 128, 512),)


def best(fn, feeds, repeat: int) -> float:
    fn(feeds)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(feeds)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    import models
    import onnxruntime as ort

    import onnxbridge
    from onnxbridge.fp16eval import Fp16Evaluator
    from onnxbridge.runtime import Session

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--models", default="cnn,lstm,transformer,encoder")
    args = parser.parse_args()
    print(f"{'model':12} {'nodes':>6} {'node by node ms':>16} {'rounded ms':>11} {'emulation ms':>13} "
          f"{'plain ms':>9} {'nodes/plain':>12} {'(rounded+emulation)/plain':>26}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, sample = encoder() if name == "encoder" else getattr(models, name)()
            path, full = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}32.onnx"
            onnxbridge.convert(model, sample, output=path, precision="fp16", opset=17, validate=False)
            onnxbridge.convert(model, sample, output=full, opset=17, validate=False)
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            feeds = {sess.get_inputs()[0].name: sample[0].numpy()}
            nodes = Fp16Evaluator(str(path))
            a = best(nodes, feeds, args.repeat)
            r = best(Session(str(path)), feeds, args.repeat)  # the fp16 file with every fp16 value rounded
            e = best(Session(str(full), emulate="fp16"), feeds, args.repeat)  # the fp32 graph's fp16 emulation
            b = best(lambda f: sess.run(None, f), feeds, args.repeat)
            print(f"{name:12} {len(nodes.steps):>6} {a * 1e3:>16.3f} {r * 1e3:>11.3f} {e * 1e3:>13.3f} "
                  f"{b * 1e3:>9.3f} {a / b:>11.1f}x {(r + e) / b:>25.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
