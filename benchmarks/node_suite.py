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
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort

ORT_MAX = 23


def _session(model: onnx.ModelProto):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _matches(model: onnx.ModelProto, data_sets) -> bool:
    sess = _session(model)
    names = [i.name for i in sess.get_inputs()]
    for inputs, outputs in data_sets:
        got = sess.run(None, dict(zip(names, inputs)))
        for want, have in zip(outputs, got):
            want, have = np.asarray(want), np.asarray(have)
            if want.shape != have.shape:
                return False
            if want.dtype.kind in "fc":
                if not np.allclose(have, want, rtol=1e-3, atol=1e-5, equal_nan=True):
                    return False
            elif want.dtype == object or not np.array_equal(have, want):
                return False
    return True


def _ours(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    from onnxbridge.adapters import adapt

    return adapt(model, target)


def _converter(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    out = onnx.version_converter.convert_version(model, target)
    out.ir_version = min(out.ir_version, 10)
    return out


def outcome(tool, model, data_sets, target) -> str:
    from onnxbridge.errors import OnnxBridgeError

    try:
        out = tool(model, target)
    except (OnnxBridgeError, RuntimeError, onnx.checker.ValidationError, ValueError, IndexError, KeyError):
        return "refused"
    try:
        onnx.checker.check_model(out)
        ok = _matches(out, data_sets)
    except Exception:
        return "broken"
    return "passed" if ok else "WRONG"


def main() -> int:
    from onnx.backend.test.case.node import collect_testcases

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="13,17,21")
    parser.add_argument("--limit", type=int, default=0, help="only the first N usable cases")
    parser.add_argument("--json", help="write the per-case outcomes here")
    args = parser.parse_args()
    targets = [int(t) for t in args.targets.split(",")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    usable = []
    for case in cases:
        model = case.model
        opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), None)
        if opset is None or opset > ORT_MAX or any(i.domain not in ("", "ai.onnx") for i in model.opset_import):
            continue
        model.ir_version = min(model.ir_version, 10)
        try:
            if not _matches(model, case.data_sets):
                continue
        except Exception:
            continue
        usable.append(case)
        if args.limit and len(usable) >= args.limit:
            break
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
    print(f"{'tool':24s} {'target':>6s} {'passed':>7s} {'refused':>8s} {'broken':>7s} {'WRONG':>6s}")
    for name in tools:
        for target in targets:
            c = counts[name][target]
            print(f"{name:24s} {target:6d} {c['passed']:7d} {c['refused']:8d} {c['broken']:7d} {c['WRONG']:6d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": counts, "cases": rows}, f, indent=1)
    wrong = [r for r in rows if r["tool"] == "onnxbridge" and r["outcome"] == "WRONG"]
    for r in wrong[:40]:
        print(f"  onnxbridge WRONG: {r['case']} -> {r['target']}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
