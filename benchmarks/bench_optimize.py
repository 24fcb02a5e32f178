"""Benchmark ``onnxbridge.optimize.optimize_model`` (``--optimize``) on BERT-base and a GPT-2-sized decoder.

Each model is built in code with seeded random weights (BERT-base: examples/transformers.py's BertEncoder at 12
layers, hidden 768, vocab 30522; GPT-2: 12 pre-norm layers, hidden 768, vocab 50257, tied head, 124M
parameters), exported by torch.onnx (BERT: TorchScript at opset 17 and dynamo at 18; GPT-2: dynamo at 18) with
dynamic batch and sequence, then optimized. Printed per case: node counts before/after, what was removed, the
optimizer's time, the largest output difference, and onnxruntime CPU latency (default session options, the same
feeds, raw and optimized runs interleaved): the median wall time, and the median CPU time of the calling thread
(with --threads 1 onnxruntime computes on that thread, so it is the figure that stays honest on a busy machine).
The goal (issue 20): optimized latency <= 0.95x the raw exporter's.

    .venv/bin/python benchmarks/bench_optimize.py [--cases bert17,bert18,gpt2] [--seq 128,32] [--runs 20]
        [--threads 1] [--level default] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL = 0.95
CASES = {"bert17": ("bert", "torchscript", 17), "bert18": ("bert", "dynamo", 18), "gpt2": ("gpt2", "dynamo", 18)}


def bert_base():
    """BERT-base: (model, (input_ids, attention_mask, token_type_ids)), names."""
    import torch

    sys.path.insert(0, str(ROOT))
    from examples.transformers import BertEncoder

    torch.manual_seed(0)
    model = BertEncoder(vocab=30522, d=768, heads=12, layers=12, max_pos=512).eval()
    ids = torch.randint(0, 30522, (1, 16))
    return model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), ["input_ids", "attention_mask", "token_type_ids"]


def gpt2_sized():
    """A GPT-2-sized decoder (124M parameters): (model, (input_ids,)), names."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.ln1, self.ln2, self.heads = nn.LayerNorm(d), nn.LayerNorm(d), heads
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, bias):
            b, s, d = x.shape
            q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(d, dim=-1))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias, dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, vocab: int = 50257, d: int = 768, heads: int = 12, layers: int = 12, ctx: int = 1024):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, input_ids):
            s = input_ids.shape[1]
            x = self.wte(input_ids) + self.wpe(torch.arange(s))[None]
            causal = torch.triu(torch.full((s, s), -1e4), diagonal=1)[None, None]
            for block in self.blocks:
                x = block(x, causal)
            return self.head(self.ln(x))

    torch.manual_seed(0)
    return GPT2().eval(), (torch.randint(0, 50257, (1, 16)),), ["input_ids"]


def export(family: str, exporter: str, opset: int, path: Path) -> float:
    """Export one case to ``path``; returns the export's seconds."""
    import torch

    model, args, names = bert_base() if family == "bert" else gpt2_sized()
    t = time.perf_counter()
    with torch.no_grad():
        if exporter == "dynamo":
            dims = {n: {0: torch.export.Dim("batch", max=64), 1: torch.export.Dim("seq", max=512)} for n in names}
            torch.onnx.export(model, args, str(path), opset_version=opset, dynamo=True, input_names=names,
                              dynamic_shapes=dims, external_data=False)
        else:
            torch.onnx.export(model, args, str(path), opset_version=opset, dynamo=False, input_names=names,
                              dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    return time.perf_counter() - t


def _session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def latency(raw: Path, optimized: Path, seq: int, runs: int, threads: int) -> dict:
    """Interleaved runs of both models on the same feeds: medians (ms) and the largest output difference."""
    import numpy as np

    sessions = [_session(raw, threads), _session(optimized, threads)]
    rng = np.random.default_rng(0)
    feeds = {i.name: (rng.integers(0, 1000, (1, seq)) if i.name == "input_ids" else
                      np.full((1, seq), int(i.name == "attention_mask"))).astype(np.int64)
             for i in sessions[0].get_inputs()}
    outs = [s.run(None, feeds) for s in sessions]  # also the warm-up
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(*outs))
    rel = max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)) for a, b in zip(*outs))
    wall, cpu = [[], []], [[], []]
    for _ in range(runs):
        for k, s in enumerate(sessions):
            c, w = time.thread_time(), time.perf_counter()
            s.run(None, feeds)
            cpu[k].append(time.thread_time() - c)
            wall[k].append(time.perf_counter() - w)
    med = lambda xs: statistics.median(xs) * 1e3
    return {"raw_wall_ms": med(wall[0]), "opt_wall_ms": med(wall[1]), "wall_ratio": med(wall[1]) / med(wall[0]),
            "raw_cpu_ms": med(cpu[0]), "opt_cpu_ms": med(cpu[1]), "cpu_ratio": med(cpu[1]) / med(cpu[0]),
            "max_abs_diff": diff, "max_diff_over_max_abs": rel}


def bench(case: str, folder: Path, args) -> dict:
    import onnx

    sys.path.insert(0, str(ROOT))
    from onnxbridge.optimize import optimize_model

    family, exporter, opset = CASES[case]
    raw, opt = folder / f"{case}.onnx", folder / f"{case}.opt.onnx"
    export_s = export(family, exporter, opset, raw)
    model = onnx.load(raw)
    t = time.perf_counter()
    optimized, record = optimize_model(model, level=args.level)
    optimize_s = time.perf_counter() - t
    onnx.save(optimized, opt)
    del model, optimized
    rows = []
    for seq in (int(s) for s in str(args.seq).split(",")):
        row = {"case": case, "exporter": exporter, "opset": opset, "export_s": export_s, "optimize_s": optimize_s,
               "record": record, "seq": seq, "threads": args.threads, "runs": args.runs,
               **latency(raw, opt, seq, args.runs, args.threads)}
        row["goal_met"] = row["cpu_ratio"] <= GOAL
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--seq", default="128", help="sequence length(s), comma-separated")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--level", default="default")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-optimize-") as tmp:
        for case in args.cases.split(","):
            for row in bench(case, Path(tmp), args):
                rows.append(row)
                r = row["record"]
                print(f"{case:7s} seq {row['seq']:4d}  nodes {r['before']:5d} -> {r['after']:4d}  optimize "
                      f"{row['optimize_s']:5.1f}s  latency raw {row['raw_cpu_ms']:7.1f} ms cpu / {row['raw_wall_ms']:7.1f}"
                      f" ms wall, optimized {row['cpu_ratio']:.3f}x cpu / {row['wall_ratio']:.3f}x wall  max|diff| "
                      f"{row['max_abs_diff']:.1e} ({row['max_diff_over_max_abs']:.1e} of max|out|)  goal <= {GOAL}: "
                      f"{'met' if row['goal_met'] else 'NOT met'}", flush=True)
            print(f"        removed {r['removed']}  added {r['added']}  reshape shapes materialized "
                  f"{r['reshape_shapes_materialized']}  GELU tails reordered {r['gelu_half_moved']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
