"""Benchmark ``onnxbridge convert`` against a bare ``torch.onnx.export`` of the same model, opset and exporter.

Every measurement runs in a fresh subprocess; wall time is taken by this (parent) process around the
child's whole life (interpreter start, imports, model construction, export, write), and peak memory
is the child's max RSS as reported by ``os.wait4``. Also measures CLI cold start and checks that
``onnxbridge --help`` imports no heavy framework.

Peak memory is given twice: the largest single process (``wait4``'s max RSS, which also covers onnxbridge's
worker process) and the whole process tree's summed RSS, sampled every 50 ms (what the machine must hold). Linux
counts a child's RSS before its exec, a copy of this process's, in its max RSS: this process therefore never loads
a model's weights (``onnx_opset`` reads the graph only).

    .venv/bin/python benchmarks/bench_convert.py [--repeat 3] [--models cnn,lstm] [--quick] [--json FILE]
    .venv/bin/python benchmarks/bench_convert.py --models bert_base,gpt2 --repeat 1   # transformer-sized
    .venv/bin/python benchmarks/bench_convert.py --models llama_551m --repeat 1       # 2.2 GB, external data
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACTORIES = {
    "cnn": ROOT / "examples" / "models.py",
    "lstm": ROOT / "examples" / "models.py",
    "transformer": ROOT / "examples" / "models.py",
    "wide_mlp": ROOT / "benchmarks" / "models_bench.py",
    "bert_base": ROOT / "benchmarks" / "models_llm.py",
    "gpt2": ROOT / "benchmarks" / "models_llm.py",
    "llama_551m": ROOT / "benchmarks" / "models_llm.py",
}
DEFAULT_MODELS = ("cnn", "lstm", "transformer", "wide_mlp")  # bert_base, gpt2, llama_551m: named with --models
# (exporter, opset) per model; models not named here run at torchscript@17 and dynamo@default
CASES = {"bert_base": [("torchscript", 17)], "gpt2": [("dynamo", 18)], "llama_551m": [("dynamo", 18)]}
WEIGHT_BYTES = {"llama_551m": 551_339_520 * 4}  # fp32 parameters: peak memory is also shown against these
SAMPLE_S = 0.05
GOAL_RATIO = 1.10  # wall time against the bare exporter, validation off and on
GOAL_TREE_VALIDATE = {"gpt2": 1.30}  # summed peak RSS with validation on, against the bare exporter's
GOAL_OVER_WEIGHTS = {"llama_551m": {"onnxbridge": 1.3, "onnxbridge_validate": 1.5}}  # summed peak / weight bytes
GOAL_COLD_S = 0.3
HEAVY = ("torch", "tensorflow", "paddle")

# Bare-torch side: load the factory from its file (as onnxbridge does), then one torch.onnx.export.
# Its last stdout line is JSON with its own phase timings, for comparison with onnxbridge's report.
TORCH_SNIPPET = """
import time
t0 = time.perf_counter()
import importlib.util, json, sys, torch
path, func, out, opset, exporter = sys.argv[1:]
spec = importlib.util.spec_from_file_location("bench_factory", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
model, args = getattr(mod, func)()
t1 = time.perf_counter()
torch.onnx.export(model, args, out, opset_version=int(opset) if opset else None, dynamo=exporter == "dynamo")
t2 = time.perf_counter()
print(json.dumps({"load_s": round(t1 - t0, 4), "export_s": round(t2 - t1, 4), "total_s": round(t2 - t0, 4)}))
"""

# Importing the CLI and rendering --help must not pull in a framework.
HELP_IMPORTS_SNIPPET = """
import json, sys
from click.testing import CliRunner
from onnxbridge.cli.main import cli
result = CliRunner().invoke(cli, ["--help"])
print(json.dumps({"exit_code": result.exit_code,
                  "loaded": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


@dataclass
class Case:
    """One model exported with one exporter at one opset (None: the exporter's default)."""

    model: str
    exporter: str
    opset: int | None

    @property
    def name(self) -> str:
        return f"{self.model}/{self.exporter}@{self.opset or 'default'}"

    @property
    def source(self) -> str:
        return f"{FACTORIES[self.model]}:{self.model}"


@dataclass
class Run:
    """One subprocess: wall seconds, peak RSS in MB (largest process; whole tree, sampled), what it produced."""

    wall_s: float
    peak_mb: float
    tree_mb: float = 0.0
    opset: int | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    """All repeats of one case, summarised: median wall time, max peak RSS."""

    case: Case
    bridge: list[Run]
    torch: list[Run]
    bridge_validate: list[Run]

    def summary(self) -> dict:
        ob_t, th_t = _median(self.bridge), _median(self.torch)
        ob_m, th_m = _peak(self.bridge), _peak(self.torch)
        obv_t, obv_m = _median(self.bridge_validate), _peak(self.bridge_validate)
        tree = {k: max(r.tree_mb for r in runs) for k, runs in (("onnxbridge", self.bridge), ("torch", self.torch),
                                                                 ("onnxbridge_validate", self.bridge_validate))}
        weights = WEIGHT_BYTES.get(self.case.model)
        return {
            "case": self.case.name, "model": self.case.model, "exporter": self.case.exporter,
            "opset_requested": self.case.opset,
            "opset_delivered": {"onnxbridge": self.bridge[0].opset, "torch": self.torch[0].opset},
            "onnxbridge_s": ob_t, "torch_s": th_t, "ratio_time": ob_t / th_t,
            "onnxbridge_peak_mb": ob_m, "torch_peak_mb": th_m, "ratio_mem": ob_m / th_m,
            "onnxbridge_validate_s": obv_t, "onnxbridge_validate_peak_mb": obv_m,
            "ratio_time_validate": obv_t / th_t, "ratio_mem_validate": obv_m / th_m,
            "tree_peak_mb": tree, "ratio_tree_mem": tree["onnxbridge"] / tree["torch"],
            "ratio_tree_mem_validate": tree["onnxbridge_validate"] / tree["torch"],
            "peak_over_weights": {k: v * 2**20 / weights for k, v in tree.items()} if weights else None,
            "goal_met": ob_t / th_t <= GOAL_RATIO,
            "goals_missed": _missed(self.case.model, ob_t / th_t, obv_t / th_t,
                                    tree["onnxbridge_validate"] / tree["torch"],
                                    {k: v * 2**20 / weights for k, v in tree.items()} if weights else {}),
            "timings": {"onnxbridge": _median_timings(self.bridge), "torch": _median_timings(self.torch),
                        "onnxbridge_validate": _median_timings(self.bridge_validate)},
            "runs": {"onnxbridge": [asdict(r) for r in self.bridge], "torch": [asdict(r) for r in self.torch],
                     "onnxbridge_validate": [asdict(r) for r in self.bridge_validate]},
        }


def _missed(model: str, ratio_t: float, ratio_t_validate: float, tree_validate: float,
            over_weights: dict[str, float]) -> list[str]:
    """The issue-20 goals this case misses, each as 'figure > goal'."""
    checks = [("t", ratio_t, GOAL_RATIO), ("t+val", ratio_t_validate, GOAL_RATIO)]
    if model in GOAL_TREE_VALIDATE:
        checks.append(("tree m+val", tree_validate, GOAL_TREE_VALIDATE[model]))
    for key, goal in GOAL_OVER_WEIGHTS.get(model, {}).items():
        checks.append((f"{'+val' if key.endswith('validate') else 'off'}/weights", over_weights[key], goal))
    return [f"{name} {value:.2f}>{goal}" for name, value, goal in checks if value > goal]


def _median(runs: list[Run]) -> float:
    return statistics.median(r.wall_s for r in runs)


def _median_timings(runs: list[Run]) -> dict[str, float]:
    """Per-phase medians of the in-process timings (onnxbridge --report, or the torch snippet's own)."""
    return {k: statistics.median(r.timings[k] for r in runs) for k in runs[0].timings}


def _peak(runs: list[Run]) -> float:
    return max(r.peak_mb for r in runs)


def _tree_rss(pid: int) -> int:
    """Summed RSS bytes of ``pid`` and all its descendants now, from /proc (0 once it is gone)."""
    total, todo, page = 0, [pid], os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def measure(cmd: list[str], log: Path) -> Run:
    """Run ``cmd`` to completion in a fresh process; its wall time, its own max RSS (``wait4``: the largest
    process of its tree) and the process tree's summed RSS, sampled every ``SAMPLE_S``."""
    import threading

    with log.open("wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        tree = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_S):
                tree[0] = max(tree[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    # Linux: ru_maxrss is in KiB
    return Run(wall_s=wall, peak_mb=usage.ru_maxrss / 1024, tree_mb=tree[0] / 2**20)


def onnx_opset(path: Path) -> int | None:
    """The default-domain opset of a written model (graph only: inline weights too stay unread, see ``measure``)."""
    from onnxbridge.inplace import load_in_place

    model = load_in_place(path)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def cli_path() -> str:
    """The ``onnxbridge`` console script of this interpreter's environment."""
    local = Path(sys.executable).parent / "onnxbridge"
    return str(local) if local.exists() else shutil.which("onnxbridge") or "onnxbridge"


def run_bridge(case: Case, tmp: Path, *, validate: bool) -> Run:
    """``onnxbridge -q convert SOURCE --exporter X [--opset N] [--no-validate]`` in a fresh process."""
    out, report = tmp / "bridge.onnx", tmp / "bridge.json"
    cmd = [cli_path(), "-q", "convert", case.source, "-o", str(out), "--exporter", case.exporter,
           "--report", str(report)]
    cmd += ["--opset", str(case.opset)] if case.opset else []
    cmd += [] if validate else ["--no-validate"]
    run = measure(cmd, tmp / "bridge.log")
    run.opset = onnx_opset(out)
    run.timings = json.loads(report.read_text()).get("timings", {})
    _clean(tmp)
    return run


def run_torch(case: Case, tmp: Path) -> Run:
    """Bare ``torch.onnx.export`` of the same factory, opset and exporter, in a fresh process."""
    out = tmp / "torch.onnx"
    cmd = [sys.executable, "-c", TORCH_SNIPPET, str(FACTORIES[case.model]), case.model, str(out),
           str(case.opset or ""), case.exporter]
    run = measure(cmd, tmp / "torch.log")
    run.opset = onnx_opset(out)
    lines = (tmp / "torch.log").read_text(errors="replace").splitlines()
    run.timings = json.loads(next(ln for ln in reversed(lines) if ln.startswith('{"load_s"')))
    _clean(tmp)
    return run


def _clean(tmp: Path) -> None:
    """Drop written models (and external data) between runs so disk use stays flat."""
    for p in tmp.iterdir():
        if p.is_file():
            p.unlink()


def bench_case(case: Case, repeat: int, tmp: Path) -> Row:
    """Interleave the three variants per repeat, so drift on the machine hits all of them alike."""
    row = Row(case, [], [], [])
    for i in range(repeat):
        row.bridge.append(run_bridge(case, tmp, validate=False))
        row.torch.append(run_torch(case, tmp))
        row.bridge_validate.append(run_bridge(case, tmp, validate=True))
        print(f"  {case.name} [{i + 1}/{repeat}] onnxbridge {row.bridge[-1].wall_s:.2f}s  "
              f"torch {row.torch[-1].wall_s:.2f}s  onnxbridge+validate {row.bridge_validate[-1].wall_s:.2f}s",
              file=sys.stderr, flush=True)
    return row


def cold_start(runs: int = 10) -> dict:
    """Median wall time of ``onnxbridge --help`` and ``--version`` over ``runs`` fresh processes."""
    result = {}
    for flag in ("--help", "--version"):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([cli_path(), flag], cwd=ROOT, check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        result[flag] = {"median_s": median, "runs_s": times, "goal_met": median <= GOAL_COLD_S}
    return result


def help_imports() -> dict:
    """Which heavy frameworks are in sys.modules after importing the CLI and invoking ``--help``."""
    done = subprocess.run([sys.executable, "-c", HELP_IMPORTS_SNIPPET], cwd=ROOT, check=True,
                          capture_output=True, text=True)
    info = json.loads(done.stdout.strip().splitlines()[-1])
    return {**info, "clean": not info["loaded"] and info["exit_code"] == 0}


def compare_time(shape: tuple[int, ...] = (1, 128, 50257), runs: int = 5) -> dict:
    """Median seconds (wall and this process's CPU) of ``onnxbridge.compare.compare`` on fp32 outputs of ``shape``
    (GPT-2's logits by default) that differ by noise: the comparison validation makes per output."""
    import numpy as np

    from onnxbridge.compare import compare

    rng = np.random.default_rng(0)
    ref = rng.standard_normal(shape, dtype=np.float32)
    got = ref + rng.standard_normal(shape, dtype=np.float32) * np.float32(1e-5)
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        compare(ref, got, atol=1e-4, rtol=1e-3)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {"shape": list(shape), "wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu)}


def print_table(rows: list[dict]) -> None:
    """Plain-text table, one line per case."""
    head = ("case", "ob s", "torch s", "ratio t", "ob MB", "torch MB", "ratio m", "ob+val s", "ratio t+val",
            "ratio m+val", "tree m", "tree m+val", "opset", "goals")
    lines = [head] + [(
        r["case"], f"{r['onnxbridge_s']:.2f}", f"{r['torch_s']:.2f}", f"{r['ratio_time']:.2f}",
        f"{r['onnxbridge_peak_mb']:.0f}", f"{r['torch_peak_mb']:.0f}", f"{r['ratio_mem']:.2f}",
        f"{r['onnxbridge_validate_s']:.2f}", f"{r['ratio_time_validate']:.2f}", f"{r['ratio_mem_validate']:.2f}",
        f"{r['ratio_tree_mem']:.2f}", f"{r['ratio_tree_mem_validate']:.2f}",
        "{onnxbridge}/{torch}".format(**r["opset_delivered"]),
        "met" if not r["goals_missed"] else "missed: " + ", ".join(r["goals_missed"])) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for n, line in enumerate(lines):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    for r in rows:
        if r["peak_over_weights"]:
            print(f"  {r['case']}: summed peak RSS / fp32 weight bytes: " + ", ".join(
                f"{k} {v:.2f}x" for k, v in r["peak_over_weights"].items()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (default 3)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma-separated (default {','.join(DEFAULT_MODELS)}), from: " + ", ".join(FACTORIES))
    p.add_argument("--quick", action="store_true", help="only the cnn model")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results here as JSON")
    p.add_argument("--compare-only", action="store_true",
                   help="only time the output comparison on GPT-2-sized logits [1, 128, 50257]")
    args = p.parse_args(argv)
    args.models = ["cnn"] if args.quick else [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(args.models) - set(FACTORIES)
    if unknown:
        p.error(f"unknown model(s): {', '.join(sorted(unknown))}")
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare_only:
        r = compare_time()
        print(f"compare() on fp32 {r['shape']}: median {r['wall_s']:.3f} s wall, {r['cpu_s']:.3f} s CPU")
        return 0
    cases = [Case(m, e, o) for m in args.models for e, o in CASES.get(m, [("torchscript", 17)])] + \
        [Case(m, "dynamo", None) for m in args.models if m not in CASES]
    with tempfile.TemporaryDirectory(prefix="onnxbridge-bench-") as tmp:
        rows = [bench_case(c, args.repeat, Path(tmp)).summary() for c in cases]
    print(f"\nConversion (median of {args.repeat} wall s, max peak RSS MB of the largest process; ob = onnxbridge "
          f"--no-validate, +val = validation on; tree m: summed RSS of the process tree, sampled, against torch's; "
          f"goals: ratio t and t+val <= {GOAL_RATIO}; GPT-2's tree m+val <= {GOAL_TREE_VALIDATE['gpt2']}; the 2.2 GB "
          f"model's summed peak <= 1.3x its weights (off), 1.5x (+val))")
    print_table(rows)

    cold, imports = cold_start(), help_imports()
    print(f"\nCLI cold start (median of 10, goal <= {GOAL_COLD_S} s)")
    for flag, r in cold.items():
        print(f"  onnxbridge {flag:<9} {r['median_s']:.3f} s  {'goal met' if r['goal_met'] else 'goal missed'}")
    print(f"  --help via CliRunner: exit {imports['exit_code']}, heavy modules loaded: "
          f"{', '.join(imports['loaded']) or 'none'} -> {'clean' if imports['clean'] else 'NOT clean'}")

    if args.json:
        args.json.write_text(json.dumps({"repeat": args.repeat, "python": sys.version.split()[0],
                                         "conversion": rows, "cold_start": cold, "help_imports": imports},
                                        indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
