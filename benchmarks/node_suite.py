"""The onnx package's node test cases, adapted to other opsets by onnxbridge and by onnx.version_converter.

For every case onnxruntime runs at its own opset with the stored outputs, each tool adapts the model
to each target opset; the result is counted as:

  passed   the adapted model runs and reproduces the stored outputs
  refused  the tool said it cannot (a clear error; nothing written)
  broken   the tool returned a model that fails the checker or does not load/run
  WRONG    the adapted model runs but its outputs differ: a silent mismatch

    .venv/bin/python benchmarks/node_suite.py [--targets 13,17,21] [--limit N] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.core.adapters.node_cases import OUTCOMES, outcome, usable_cases  # noqa: E402


def _ours(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    from onnxbridge.adapters import adapt

    return adapt(model, target)


def _converter(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    out = onnx.version_converter.convert_version(model, target)
    out.ir_version = min(out.ir_version, 10)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="13,17,21")
    parser.add_argument("--limit", type=int, default=0, help="only the first N usable cases")
    parser.add_argument("--json", help="write the per-case outcomes here")
    args = parser.parse_args()
    targets = [int(t) for t in args.targets.split(",")]
    usable = usable_cases()[: args.limit or None]
    tools = {"onnxbridge": _ours, "onnx.version_converter": _converter}
    counts = {t: {tgt: collections.Counter() for tgt in targets} for t in tools}
    rows = []
    t0 = time.perf_counter()
    for case in usable:
        for target in targets:
            for name, tool in tools.items():
                result = outcome(tool, case.model, case.data_sets, target)
                counts[name][target][result] += 1
                rows.append({"case": case.name, "target": target, "tool": name, "outcome": result})
    print(f"{len(usable)} node cases that onnxruntime runs at their own opset ({time.perf_counter() - t0:.0f}s)")
    print(f"{'tool':24s} {'target':>6s} " + " ".join(f"{o:>6s}" for o in OUTCOMES))
    for name in tools:
        for target in targets:
            c = counts[name][target]
            print(f"{name:24s} {target:6d} " + " ".join(f"{c[o]:>{max(len(o), 6)}d}" for o in OUTCOMES))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": counts, "cases": rows}, f, indent=1)
    wrong = [r for r in rows if r["tool"] == "onnxbridge" and r["outcome"] == "WRONG"]
    for r in wrong[:40]:
        print(f"  onnxbridge WRONG: {r['case']} -> {r['target']}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
