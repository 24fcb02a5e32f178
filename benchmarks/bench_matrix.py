"""Benchmark ``onnxbridge matrix``: cells per minute for the same cells run (a) ``sequential``: one
``onnxbridge.convert`` call after another in this one process (no isolation: frameworks stay imported),
(a') ``isolated``: one after another, each in a fresh process (``python -m onnxbridge.matrix.cell``: what a shell
loop over ``onnxbridge convert`` pays), (b) ``local``: ``onnxbridge.matrix(..., workers=N)`` (a process pool, a
fresh process per cell), (c) ``ray``: ``executor="ray"`` on a local Ray started by the run, and (d) ``cached``:
(b) again over its own OUTDIR, every cell reused. Prints the table and the ratios to (a) and (a').

    .venv/bin/python benchmarks/bench_matrix.py                          # torch cnn/lstm/transformer x onnx, openvino x fp32, fp16
    .venv/bin/python benchmarks/bench_matrix.py --manifest examples/matrix.toml --workers 4
    .venv/bin/python benchmarks/bench_matrix.py --skip ray --json results.json

Wall time is taken around each whole variant (Ray's start and shutdown included; the sequential variant pays its
framework imports once). Every variant writes into a fresh folder and runs without the cache except (d). The
sequential variant cannot run a manifest that mixes TensorFlow and Paddle models (they crash in one process):
``--skip sequential`` for examples/matrix.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUBSET = """# bench_matrix's default: the torch example models x two CPU targets x two precisions (12 cells)
[matrix]
targets = ["onnx", "openvino"]
precisions = ["fp32", "fp16"]
opsets = [17]

[[model]]
name = "cnn"
source = "{models}:cnn"

[[model]]
name = "lstm"
source = "{models}:lstm"

[[model]]
name = "transformer"
source = "{models}:transformer"
"""
VARIANTS = ("sequential", "isolated", "local", "ray", "cached")
BASES = ("sequential", "isolated")


def sequential(manifest: Path, outdir: Path) -> dict:
    """Every cell as one ``onnxbridge.convert`` call in this process; statuses counted from the reports."""
    import onnxbridge
    from onnxbridge.matrix.cells import expand
    from onnxbridge.matrix.manifest import load_manifest

    counts: dict[str, int] = {}
    for cell in expand(load_manifest(manifest)):
        if cell.skip is not None:
            status = "skipped"
        else:
            folder = outdir / cell.name
            folder.mkdir(parents=True, exist_ok=True)
            try:
                result = onnxbridge.convert(cell.source, to=cell.target, output=folder / cell.output_name(),
                                            precision=cell.precision, opset=cell.opset,
                                            report=folder / "report.json", **cell.options)
                status = result.report["status"]
            except Exception as exc:  # noqa: BLE001 - the benchmark counts it like the matrix would
                print(f"  {cell.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                status = "error"
        counts[status] = counts.get(status, 0) + 1
    return counts


def isolated(manifest: Path, outdir: Path) -> dict:
    """Every cell in a fresh process of its own, one after another (``python -m onnxbridge.matrix.cell``)."""
    import subprocess

    from onnxbridge.matrix.cells import expand
    from onnxbridge.matrix.manifest import load_manifest

    counts: dict[str, int] = {}
    outdir.mkdir(parents=True, exist_ok=True)
    for i, cell in enumerate(expand(load_manifest(manifest))):
        status = "skipped"
        if cell.skip is None:
            spec, record = outdir / f".cell{i}.json", outdir / f".record{i}.json"
            spec.write_text(json.dumps(cell.as_dict()))
            subprocess.run([sys.executable, "-m", "onnxbridge.matrix.cell", str(spec), str(outdir), str(record)],
                           cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            status = json.loads(record.read_text())["status"] if record.exists() else "error"
        counts[status] = counts.get(status, 0) + 1
    return counts


def run_matrix(manifest: Path, outdir: Path, **kwargs) -> dict:
    import onnxbridge.matrix

    result = onnxbridge.matrix.matrix(manifest, outdir, **kwargs)
    return {k: v for k, v in result["counts"].items() if v}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, help="a matrix manifest (default: the 12-cell torch subset)")
    parser.add_argument("--workers", type=int, default=2, help="workers for the local and Ray variants (2)")
    parser.add_argument("--skip", action="append", default=[], choices=VARIANTS, help="leave a variant out")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as tmp:
        tmp = Path(tmp)
        manifest = args.manifest
        if manifest is None:
            manifest = tmp / "subset.toml"
            manifest.write_text(SUBSET.format(models=(ROOT / "examples" / "models.py").as_posix()))
        jobs = {
            "sequential": lambda: sequential(manifest, tmp / "sequential"),
            "isolated": lambda: isolated(manifest, tmp / "isolated"),
            "local": lambda: run_matrix(manifest, tmp / "local", workers=args.workers, cache=False),
            "ray": lambda: run_matrix(manifest, tmp / "ray", workers=args.workers, executor="ray", cache=False),
            "cached": lambda: run_matrix(manifest, tmp / "local", workers=args.workers),
        }
        if "local" in args.skip and "cached" not in args.skip:
            args.skip.append("cached")  # it reuses what the local variant wrote
        rows = {}
        for name in VARIANTS:
            if name in args.skip:
                continue
            t0 = time.perf_counter()
            counts = jobs[name]()
            seconds = time.perf_counter() - t0
            cells = sum(counts.values())
            rows[name] = {"seconds": round(seconds, 2), "cells": cells, "counts": counts,
                          "cells_per_minute": round(cells * 60 / seconds, 2)}
            print(f"{name:10s} {cells:3d} cells in {seconds:7.2f} s = {cells * 60 / seconds:6.1f} cells/min  {counts}",
                  flush=True)

    for base in BASES:
        if base not in rows:
            continue
        print(f"\ncells/min relative to {base} ({os.cpu_count()} cores, --workers {args.workers}):")
        for name, row in rows.items():
            if name != base:
                row[f"ratio_to_{base}"] = round(row["cells_per_minute"] / rows[base]["cells_per_minute"], 2)
                print(f"  {name:10s} x{row[f'ratio_to_{base}']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"manifest": str(args.manifest or "subset"), "workers": args.workers,
                                         "cores": os.cpu_count(), "variants": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
