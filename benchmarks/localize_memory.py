"""Peak memory and runs of localization by bisection vs a mark-all baseline on a 2,000-node model.

    .venv/bin/python benchmarks/localize_memory.py [--blocks 667] [--width 65536] [--samples 2]

The model: x -> [Mul(c_i) -> Add(d_i) -> Neg] x blocks, c_i and d_i scalars (3 nodes a block, 2,001 nodes at
667 blocks), every intermediate [1, width] fp32 (256 KiB at 65,536); the candidate's block 400 Add is off by 0.5.

- bisection: ``localize_onnx_pair`` (prefix models, a few tensors a step, default 256 MiB budget);
- mark-all: each side run once per sample with every checkpoint as an output (what ``polygraphy --mark all``
  does), all tensors compared, the earliest out-of-tolerance one taken.

Both run the models in onnxbridge's worker process (a fresh worker per mode). Measured: the worker's peak resident
set (VmHWM from /proc, Linux; it includes onnxruntime's own arenas and the interpreter) and, in this process, the
peak of Python-tracked allocations (tracemalloc: numpy arrays received from the worker and compared here).
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def model(blocks: int, width: int, bump: int | None = None):
    rng = np.random.default_rng(2)
    nodes, inits, x = [], [], "x"
    for i in range(blocks):
        c = (1 + rng.standard_normal(1) * 1e-3).astype(np.float32)  # scalars: the intermediates dominate
        d = (rng.standard_normal(1) * 1e-2 + (0.5 if i == bump else 0)).astype(np.float32)
        inits += [numpy_helper.from_array(c, f"c{i}"), numpy_helper.from_array(d, f"d{i}")]
        y = "y" if i == blocks - 1 else f"neg{i}"
        nodes += [helper.make_node("Mul", [x, f"c{i}"], [f"mul{i}"], name=f"mul_{i}"),
                  helper.make_node("Add", [f"mul{i}", f"d{i}"], [f"add{i}"], name=f"add_{i}"),
                  helper.make_node("Neg", [f"add{i}"], [y], name=f"neg_{i}")]
        x = y
    graph = helper.make_graph(nodes, "long", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def worker_peak_mib() -> float | None:
    from onnxbridge import worker

    w = worker._worker
    if w is None or not w.alive:
        return None
    with open(f"/proc/{w.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def mark_all(ref, cand, samples, tol) -> tuple[str | None, int]:
    from onnxbridge.localize.onnx_probe import OnnxProbe, match_tensors, onnx_checkpoints
    from onnxbridge.localize.tolerance import compare_checkpoint

    mapping = match_tensors(ref, cand)
    cps = [cp for cp in onnx_checkpoints(ref) if cp.tensor in mapping]
    names = [cp.tensor for cp in cps]
    a, b = OnnxProbe(ref), OnnxProbe(cand, rename=mapping)
    first = None
    for sample in samples:
        r, g = a.tensors(names, sample.feeds), b.tensors(names, sample.feeds)
        for i, cp in enumerate(cps):
            if not compare_checkpoint(tol, cp.tensor, r[cp.tensor], g[cp.tensor])["passed"]:
                first = i if first is None else min(first, i)
                break
        del r, g
    a.close(), b.close()
    return (cps[first].node if first is not None else None), b.runs


def measure(mode: str, ref, cand, samples, tol) -> dict:
    from onnxbridge import worker
    from onnxbridge.localize.onnx_probe import localize_onnx_pair

    worker.shutdown()
    tracemalloc.start()
    t = time.perf_counter()
    if mode == "bisection":
        out = localize_onnx_pair(ref, cand, samples, tol)
        node, runs = (out["first_divergent"] or {}).get("node"), out["runs"]
    else:
        node, runs = mark_all(ref, cand, samples, tol)
        runs //= len(samples)
    seconds = time.perf_counter() - t
    here = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    peak = worker_peak_mib()
    worker.shutdown()
    return {"mode": mode, "node": node, "runs": runs, "seconds": seconds, "worker_peak_mib": peak,
            "parent_tracemalloc_peak_mib": here}


def main() -> None:
    from onnxbridge.specs import Sample
    from onnxbridge.validation import Tolerance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=667)
    ap.add_argument("--width", type=int, default=65536)
    ap.add_argument("--samples", type=int, default=2)
    args = ap.parse_args()
    ref, cand = model(args.blocks, args.width), model(args.blocks, args.width, bump=min(400, args.blocks - 1))
    samples = [Sample({"x": np.random.default_rng(s).standard_normal((1, args.width)).astype(np.float32)})
               for s in range(args.samples)]
    tol = Tolerance.for_precision("fp32")
    print(f"{len(ref.graph.node)} nodes, intermediates {args.width * 4 / 2**10:.0f} KiB each, "
          f"{args.samples} sample(s)")
    rows = [measure("bisection", ref, cand, samples, tol), measure("mark-all", ref, cand, samples, tol)]
    for r in rows:
        print(f"{r['mode']:>10}: node {r['node']}, {r['runs']} run(s) of the candidate per sample, "
              f"{r['seconds']:.1f} s, worker peak RSS {r['worker_peak_mib']:.0f} MiB, "
              f"this process's tracemalloc peak {r['parent_tracemalloc_peak_mib']:.0f} MiB")
    b, m = rows
    print(f"mark-all / bisection: worker peak RSS x{m['worker_peak_mib'] / b['worker_peak_mib']:.1f}, "
          f"this process x{m['parent_tracemalloc_peak_mib'] / max(b['parent_tracemalloc_peak_mib'], 1e-9):.1f}")


if __name__ == "__main__":
    main()
