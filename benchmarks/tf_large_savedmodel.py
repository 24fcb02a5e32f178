"""A SavedModel over 2 GB through onnxbridge (tf2onnx's large-model path, external data, validated) against bare
tf2onnx on the same model (``python -m tf2onnx.convert --saved-model DIR --large_model``: its zip of external data,
no validation).

The SavedModel (``--layers`` Dense layers of ``--width``² float32 weights with tanh, 2.22 GB by default) is built
in /tmp by a process of its own. Each conversion then runs in a fresh process started by a measuring process
that has no other child: wall time is taken around the child's whole life (imports, load, export, write,
validation), and peak memory is ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` once it has ended (the largest
single process among the child and the processes it waited for). Everything written is removed at the end.

tf2onnx 1.17's large-model path calls ``np.product``, which numpy 2 removed: bare tf2onnx fails with
``AttributeError`` at the end of its conversion, so its side runs with ``np.product = np.prod`` lent to numpy
(what onnxbridge lends tf2onnx's graph module while it converts).

    .venv/bin/python benchmarks/tf_large_savedmodel.py [--width 11776] [--layers 4] [--root /tmp/tf_large]

Measured 2026-11-27 (2 shared cores, 23 GB RAM, tensorflow 2.21, tf2onnx 1.17, default 2.22 GB model):
onnxbridge 109 s wall, peak 15.9 GiB (7.7x the weights), passed (max abs 1.3e-6), wrote model.onnx +
model.onnx.data (2.22 GB); bare tf2onnx was killed by the kernel's OOM killer at 21.2 GiB after 168 s, in its
optimizer passes (each copies every constant again: see ``ExternalWriter`` in frontends/tensorflow/model.py).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUILD = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np, tensorflow as tf
path, width, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

class Wide(tf.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.kernels = []
        for i in range(layers):
            k = rng.standard_normal((width, width), dtype=np.float32)
            k *= np.float32(1 / np.sqrt(width))  # in place: float32, no second copy
            self.kernels.append(tf.Variable(k, name=f"kernel_{i}"))
            del k
        self.biases = [tf.Variable(np.zeros(width, np.float32), name=f"bias_{i}") for i in range(layers)]

    @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32, name="x")])
    def __call__(self, x):
        for k, b in zip(self.kernels, self.biases):
            x = tf.tanh(x @ k + b)
        return {"y": x}

tf.saved_model.save(Wide(), path)
"""

ONNXBRIDGE = """
import json, sys, time
t0 = time.perf_counter()
import onnxbridge
result = onnxbridge.convert(sys.argv[1], output=sys.argv[2])
rep = result.report
print(json.dumps({"status": rep["status"], "timings": rep.get("timings"), "notes": rep["notes"],
                  "external_data": rep["artifact"]["external_data"], "in_process_s": time.perf_counter() - t0,
                  "max_abs": [o.get("max_abs") for h in rep["hops"] for o in h["outputs"]]}))
"""

TF2ONNX = """
import json, os, sys, time
t0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
if not hasattr(np, "product"):
    np.product = np.prod  # tf2onnx 1.17's large-model path still calls it (removed in numpy 2)
import runpy
source, output = sys.argv[1:]
sys.argv = ["tf2onnx.convert", "--saved-model", source, "--large_model", "--output", output]
runpy.run_module("tf2onnx.convert", run_name="__main__")  # what `python -m tf2onnx.convert` runs
print(json.dumps({"status": "converted", "in_process_s": time.perf_counter() - t0}))
"""


def measure(args: argparse.Namespace) -> None:
    """The measuring process: one child, then its wall time and peak RSS as JSON on stdout."""
    snippet = {"onnxbridge": ONNXBRIDGE, "tf2onnx": TF2ONNX}[args.measure]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", snippet, args.source, args.output], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    print(json.dumps({"tool": args.measure, "rc": done.returncode, "wall_s": round(wall, 1),
                      "peak_rss_mb": round(peak_mb), "child": json.loads(lines[-1]) if lines else None,
                      "stderr_tail": done.stderr.strip().splitlines()[-3:] if done.returncode else []}))


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def main(args: argparse.Namespace) -> None:
    root = Path(args.root)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        saved = root / "wide"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", BUILD, str(saved), str(args.width), str(args.layers)], check=True,
                       cwd=ROOT)
        weights = args.layers * (args.width ** 2 + args.width) * 4
        print(f"SavedModel: {args.layers} x Dense({args.width}) = {weights / 1e9:.2f} GB of float32 weights, "
              f"{size_of(saved) / 1e9:.2f} GB on disk, built in {time.perf_counter() - t0:.0f} s")
        results = []
        for tool, output in (("onnxbridge", root / "onnxbridge" / "model.onnx"), ("tf2onnx", root / "model.zip")):
            output.parent.mkdir(exist_ok=True)
            done = subprocess.run([sys.executable, __file__, "--measure", tool, "--source", str(saved),
                                   "--output", str(output)], capture_output=True, text=True, cwd=ROOT, check=False)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["written_gb"] = round(size_of(output.parent if tool == "onnxbridge" else output) / 1e9, 2) \
                if output.exists() else None
            results.append(result)
            print(json.dumps(result))
        print(f"\n{'':12}{'wall s':>8}{'peak RSS GiB':>13}{'x weights':>11}  result")
        for r in results:
            failed = "killed by SIGKILL (out of memory)" if r["rc"] == -9 else f"failed rc={r['rc']}"
            status = (r["child"] or {}).get("status", failed)
            print(f"{r['tool']:12}{r['wall_s']:>8.1f}{r['peak_rss_mb'] / 1024:>13.2f}"
                  f"{r['peak_rss_mb'] * 2**20 / weights:>11.2f}  {status}, wrote {r['written_gb']} GB")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=11776, help="units of each Dense layer (default 11776)")
    p.add_argument("--layers", type=int, default=4, help="Dense layers (default 4: 2.22 GB)")
    p.add_argument("--root", default="/tmp/tf_large", help="scratch folder, removed at the end")
    p.add_argument("--measure", choices=("onnxbridge", "tf2onnx"), help=argparse.SUPPRESS)
    p.add_argument("--source", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()
    measure(ARGS) if ARGS.measure else main(ARGS)
