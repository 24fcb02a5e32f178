"""How much of ONNX the Core ML and DLC backends take: the onnx package's node tests and the transformer models.

(a) Every node test (onnx/backend/test/data/node/*/model.onnx with test_data_set_0) that onnxruntime CPU runs is
    checked (`onnxbridge check --targets NAME`) and converted (`onnxbridge.convert(path, to=NAME, inputs=...)`) per
    backend, and counted as

      ok        converted, every hop passed
      refused   a clear refusal (OnnxBridgeError with exit code 2 or 3), or a hop that cannot run here (skipped)
      failed    converted, but validation failed (the numbers or a run of the artifact)
      crashed   anything else: an unexpected exception, a NativeCrash, a worker process that died

(b) examples/transformers.py's models through Core ML at fixed shapes, Core ML with a flexible axis (the sequence;
    Swin: the batch) and
    DLC at fixed shapes, counted the same way.

    .venv/bin/python benchmarks/backend_coverage.py [--jobs 2] [--limit N] [--filter REGEX] [--json OUT]
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BACKENDS = ("coreml", "dlc")
OUTCOMES = ("ok", "refused", "failed", "crashed")
MODEL_VARIANTS = ("coreml fixed", "coreml flexible", "dlc fixed")


def node_dirs(pattern: str | None = None) -> list[Path]:
    """The node test folders of the installed onnx package (name matching ``pattern``), sorted by name."""
    import onnx.backend.test

    root = Path(onnx.backend.test.__file__).parent / "data" / "node"
    dirs = sorted(d for d in root.iterdir() if (d / "model.onnx").exists() and (d / "test_data_set_0").is_dir())
    return [d for d in dirs if pattern is None or re.search(pattern, d.name)]


def load_inputs(case: Path) -> dict | None:
    """test_data_set_0's inputs by graph input name, or None when one is not a plain tensor (a sequence, an
    optional)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(case / "model.onnx", load_external_data=False)
    names = [i.name for i in model.graph.input]
    feeds = {}
    for i, name in enumerate(names):
        path = case / "test_data_set_0" / f"input_{i}.pb"
        if not path.exists() or not model.graph.input[i].type.HasField("tensor_type"):
            return None
        tensor = onnx.TensorProto()
        try:
            tensor.ParseFromString(path.read_bytes())
        except Exception:
            return None
        feeds[name] = numpy_helper.to_array(tensor)
    return feeds


def op_label(case: Path) -> str:
    """The op a node test exercises: its single node's op type, else ``composite`` (expanded functions)."""
    import onnx

    nodes = onnx.load(case / "model.onnx", load_external_data=False).graph.node
    return nodes[0].op_type if len({n.op_type for n in nodes}) == 1 else "composite"


def ort_runs(case: Path, feeds: dict | None) -> bool:
    """onnxruntime CPU builds the model and runs it on the test's inputs: the test is eligible."""
    import onnxruntime as ort

    if feeds is None:
        return False
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(str(case / "model.onnx"), so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
    except Exception:
        return False
    return True


def classify(convert) -> tuple[str, str]:
    """(outcome, detail) of calling ``convert()``, which returns a conversion report."""
    from onnxbridge.errors import NativeCrash, OnnxBridgeError, ValidationFailed, first_line

    try:
        report = convert()
    except ValidationFailed as exc:
        return "failed", first_line(exc)
    except NativeCrash as exc:
        return "crashed", first_line(exc)
    except OnnxBridgeError as exc:
        if exc.exit_code in (2, 3):
            return "refused", first_line(exc)
        return "crashed", f"{type(exc).__name__}: {first_line(exc)}"
    except Exception as exc:  # a bug in a backend: counted, never raised
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return "crashed", f"{type(exc).__name__}: {first_line(exc)} ({Path(tb.filename).name}:{tb.lineno})"
    if report["status"] == "passed":
        return "ok", ""
    if report["status"] == "skipped":  # a hop that cannot run here (HopSkipped, exit 2): nothing was compared
        notes = [n for hop in report.get("hops", []) for n in hop.get("notes", [])]
        return "refused", "not validated: " + (first_line(Exception(notes[0])) if notes else "hop skipped")
    return "failed", _failure(report)


def _failure(report: dict) -> str:
    """The first error of a failed conversion's hops, else its first output beyond tolerance."""
    from onnxbridge.errors import first_line

    hops = report.get("hops", [])
    errors = [e for hop in hops for e in hop.get("errors", [])]
    if errors:
        return first_line(Exception(errors[0]))
    for hop in hops:
        for out in hop.get("outputs", []):
            if not out.get("passed", True):
                got, want = (f"{out.get(p + 'dtype')} {out.get(p + 'shape')}" for p in ("", "reference_"))
                diff = f"max abs {out['max_abs']:.3g}" if out.get("max_abs") is not None else f"{got} vs {want}"
                return f"{hop['from']} -> {hop['to']}: output {out['name']} {diff}"
    return "validation failed"


def static_shapes(case: Path, feeds: dict) -> list[str]:
    """``--input-shape`` specs fixing the inputs whose dims the model leaves open to the test data's shapes."""
    import onnx

    specs = []
    for inp in onnx.load(case / "model.onnx", load_external_data=False).graph.input:
        dims = inp.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims) or not inp.type.tensor_type.HasField("shape"):
            shape = feeds[inp.name].shape
            if shape and all(shape):
                specs.append(f"{inp.name}:{','.join(map(str, shape))}")
    return specs


def check_verdict(case: Path, backend: str, shapes: list[str]) -> str:
    """``onnxbridge check``'s verdict: clear, blocked, or crashed (the check itself raised)."""
    from onnxbridge.errors import OnnxBridgeError
    from onnxbridge.spine import check_targets

    try:
        rep = check_targets(case / "model.onnx", [backend], input_shapes=shapes)
    except OnnxBridgeError as exc:
        return "blocked" if exc.exit_code in (2, 3) else "crashed"
    except Exception:
        return "crashed"
    return "blocked" if rep["targets"][backend]["blockers"] else "clear"


def run_node_case(case: Path, backends=BACKENDS) -> list[dict]:
    """One node test through each backend's check and conversion; [] when onnxruntime does not run it."""
    import onnxbridge
    from onnxbridge.plugins import BACKENDS as PLUGINS

    feeds = load_inputs(case)
    if not ort_runs(case, feeds):
        return []
    shapes, op = static_shapes(case, feeds), op_label(case)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            out = Path(tmp) / f"{case.name}{PLUGINS.load(backend).SUFFIXES[0]}"
            t = time.perf_counter()
            check = check_verdict(case, backend, shapes)
            outcome, detail = classify(lambda: onnxbridge.convert(str(case / "model.onnx"), to=backend, output=out,
                                                                  inputs=feeds, input_shapes=shapes).report)
            rows.append({"case": case.name, "op": op, "backend": backend, "outcome": outcome,
                         "detail": detail, "check": check, "seconds": round(time.perf_counter() - t, 2)})
    return rows


def run_model(name: str, variant: str) -> list[dict]:
    """One transformer model through one variant (``MODEL_VARIANTS``)."""
    import onnxbridge
    from examples.transformers import flexible_axes

    backend = variant.split()[0]
    dynamic = flexible_axes(name) if "flexible" in variant else []
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}{'.mlpackage' if backend == 'coreml' else '.dlc'}"
        source = f"{ROOT / 'examples' / 'transformers.py'}:{name}"
        outcome, detail = classify(lambda: onnxbridge.convert(source, to=backend, output=out, opset=17,
                                                              dynamic=dynamic).report)
    return [{"model": name, "variant": variant, "outcome": outcome, "detail": detail,
             "seconds": round(time.perf_counter() - t, 2)}]


def run_all(tasks: list[tuple], jobs: int) -> list[dict]:
    """Rows of every task ``(function, *args)``, ``jobs`` processes at a time. A process that dies takes the
    tasks it was running down with it: those are re-run one at a time, and the one that kills its process again
    is counted as crashed."""
    rows, pending, t0 = [], list(tasks), time.perf_counter()
    done = iter(range(1, len(tasks) + 1))

    def tick() -> None:
        n = next(done, len(tasks))
        if n % 100 == 0:
            print(f"{n}/{len(tasks)} done ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)

    while pending:
        pending, died = _run_batch(pending, jobs, rows, tick)
        for task in died:
            _, again = _run_batch([task], 1, rows, tick)
            rows.extend(_died(t) for t in again)
    return rows


def _run_batch(tasks: list[tuple], jobs: int, rows: list[dict], tick) -> tuple[list[tuple], list[tuple]]:
    """Run ``tasks`` in a fresh pool, extending ``rows`` (``tick()`` after each); returns (not started, in flight
    when a process died)."""
    queue, died = list(tasks), []
    with cf.ProcessPoolExecutor(jobs) as pool:
        flight = {}
        while queue or flight:
            while queue and len(flight) < jobs:
                task = queue.pop(0)
                flight[pool.submit(task[0], *task[1:])] = task
            done, _ = cf.wait(flight, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                task = flight.pop(fut)
                try:
                    rows.extend(fut.result())
                    tick()
                except cf.process.BrokenProcessPool:
                    died = [task, *flight.values()]
                    return queue, died
    return [], died


def _died(task: tuple) -> dict:
    """The row of a task whose process died."""
    if task[0] is run_node_case:
        return {"case": task[1].name, "op": "?", "backend": "*", "outcome": "crashed",
                "detail": "the benchmark's worker process died", "check": "?", "seconds": 0}
    return {"model": task[1], "variant": task[2], "outcome": "crashed", "detail": "the worker process died",
            "seconds": 0}


def summarize_nodes(rows: list[dict], total: int) -> dict:
    """Counts per backend and per op, and where ``check`` disagreed with the conversion."""
    counts = {b: dict.fromkeys(OUTCOMES, 0) for b in BACKENDS}
    per_op: dict = collections.defaultdict(lambda: {b: dict.fromkeys(OUTCOMES, 0) for b in BACKENDS})
    disagree = collections.Counter()
    for r in rows:
        if r["backend"] not in counts:  # a dead process: counted against every backend
            for b in BACKENDS:
                counts[b]["crashed"] += 1
            continue
        counts[r["backend"]][r["outcome"]] += 1
        per_op[r["op"]][r["backend"]][r["outcome"]] += 1
        if (r["check"] == "blocked") != (r["outcome"] == "refused"):
            disagree[r["backend"]] += 1
    eligible = len({r["case"] for r in rows})
    return {"tests": total, "eligible": eligible, "backends": list(BACKENDS), "counts": counts,
            "per_op": dict(sorted(per_op.items())), "check_disagrees": dict(disagree), "reasons": reasons(rows),
            "cases": rows}


def reasons(rows: list[dict], top: int = 8) -> dict:
    """Per backend, the most frequent causes of outcomes other than ok (node and op names elided), with counts."""
    found: dict = collections.defaultdict(collections.Counter)
    for r in rows:
        if r["outcome"] != "ok":
            text = re.sub(r"'[^']*'", "'…'", r["detail"])
            text = re.sub(r"\d+ node\(s\)", "N node(s)", re.sub(r"(?<!node)\([\w.:]+\)", "(op)", text))
            found[r["backend"]][f"{r['outcome']}: {text[:110]}"] += 1
    return {b: c.most_common(top) for b, c in found.items()}


def print_summary(nodes: dict | None, models: list[dict] | None, all_ops: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=150)
    if nodes is not None:
        table = Table(title=f"node tests: {nodes['eligible']} eligible of {nodes['tests']} (onnxruntime CPU runs them)")
        table.add_column("backend")
        for o in OUTCOMES:
            table.add_column(o, justify="right")
        table.add_column("check disagrees", justify="right")
        for b, c in nodes["counts"].items():
            table.add_row(b, *(f"{c[o]} ({100 * c[o] / max(nodes['eligible'], 1):.0f}%)" for o in OUTCOMES),
                          str(nodes["check_disagrees"].get(b, 0)))
        console.print(table)
        ops = Table(title="per op: ok/refused/failed/crashed" + ("" if all_ops else " (ops not fully ok)"),
                    title_justify="left")
        ops.add_column("op")
        for b in BACKENDS:
            ops.add_column(b, justify="right")
        for op, per in nodes["per_op"].items():
            if all_ops or any(per[b][o] for b in BACKENDS for o in OUTCOMES[1:]):
                ops.add_row(op, *("/".join(str(per[b][o]) for o in OUTCOMES) for b in BACKENDS))
        console.print(ops)
        for b, top in nodes["reasons"].items():
            console.print(f"[bold]{b}[/]: most frequent causes")
            for text, n in top:
                console.print(f"  {n:5d}  {text}", markup=False, highlight=False)
    if models is not None:
        table = Table(title="transformer models (examples/transformers.py)")
        table.add_column("model")
        for v in MODEL_VARIANTS:
            table.add_column(v)
        by = {(r["model"], r["variant"]): r for r in models}
        for name in dict.fromkeys(r["model"] for r in models):
            table.add_row(name, *(by[name, v]["outcome"] if (name, v) in by else "n/a" for v in MODEL_VARIANTS))
        console.print(table)
        for r in models:
            if r["detail"]:
                console.print(f"  {r['model']}, {r['variant']}: {r['outcome']}: {r['detail']}", markup=False,
                              highlight=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N eligible node tests")
    parser.add_argument("--filter", help="only node tests whose name matches this regular expression")
    parser.add_argument("--json", help="write the counts and every row here")
    parser.add_argument("--no-nodes", action="store_true", help="skip the node tests")
    parser.add_argument("--no-models", action="store_true", help="skip the transformer models")
    parser.add_argument("--all-ops", action="store_true", help="list every op, also those fully ok")
    args = parser.parse_args()
    t0 = time.perf_counter()
    result: dict = {}
    nodes = models = None
    if not args.no_nodes:
        dirs = node_dirs(args.filter)
        cases = _eligible(dirs, args.limit, args.jobs) if args.limit else dirs
        nodes = summarize_nodes(run_all([(run_node_case, d) for d in cases], args.jobs), len(dirs))
        result["node"] = nodes
    if not args.no_models:
        from examples.transformers import MODELS

        models = run_all([(run_model, m, v) for m in MODELS for v in MODEL_VARIANTS], args.jobs)
        result["models"] = models
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print_summary(nodes, models, args.all_ops)
    print(f"{result['seconds']:.0f}s with {args.jobs} jobs")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def _eligible(dirs: list[Path], limit: int, jobs: int) -> list[Path]:
    """The first ``limit`` of ``dirs`` that onnxruntime runs (so ``--limit N`` measures N tests)."""
    found: list[Path] = []
    with cf.ProcessPoolExecutor(jobs) as pool:
        for case, ok in zip(dirs, pool.map(_runs, dirs, chunksize=8)):
            found += [case] if ok else []
            if len(found) == limit:
                pool.shutdown(cancel_futures=True)
                break
    return found


def _runs(case: Path) -> bool:
    return ort_runs(case, load_inputs(case))


if __name__ == "__main__":
    raise SystemExit(main())
