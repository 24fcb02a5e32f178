"""Are the verdicts right in both directions? Real architectures (random weights) and planted bugs through the
ONNX fp32, OpenVINO fp32, ONNX fp16, Core ML fp16 and DLC targets, with a confusion matrix per target (issue 29).

    .venv/bin/python benchmarks/verdicts.py                          # everything (~30-40 min on 2 cores)
    .venv/bin/python benchmarks/verdicts.py --models resnet18,mobilenet_v2 --bugs none
    .venv/bin/python benchmarks/verdicts.py --models none --bugs resnet50/bn_scale,frozen_item
    .venv/bin/python benchmarks/verdicts.py --targets onnx-fp16,dlc --jobs 2 --out results.json
    .venv/bin/python benchmarks/verdicts.py --list                   # the models, bugs and targets

Models come from ``tests/helpers/zoo.py`` (torchvision, timm and transformers; random weights under a fixed seed,
BatchNorm statistics set to trained-like scale; 1x3x64x64 images, 16-token sequences; nothing downloaded). Every
conversion is ``onnxbridge.convert(model, sample, output=..., to=..., precision=..., opset=17)`` and its verdict is
``result.report["status"]``: a correct model should pass, a planted bug should not.

Planted bugs: the exported ONNX graph is changed after export and before validation by wrapping
``onnxbridge.builder.finalize`` in the benchmark's process (``tests.helpers.zoo.planted``), so the bug is in the
converted model and in every artifact built from it but not in the source (one layer's weight x1.02-1.10, a BatchNorm
scale x1.05, a Softmax or Concat over the wrong axis, a dropped bias, two first-layer channels swapped, the last
normalization's eps x1000, the output x1.03, a transposed square weight); plus bugs the exporters make themselves (a
``.item()`` frozen by tracing; a position table fixed to the trace input's patch grid, converted with dynamic height and
width).

Each model (and each bug) runs in a subprocess of its own, all targets in turn, under ``--timeout``, so a crash or a
hang loses that row only. The confusion matrix counts verdicts only: a conversion that raised (an unsupported op, a
refused option) is listed as an error, not as a pass or a failure.

Cost: for each correct model's ONNX fp16 conversion, the fp16 hop's check time (candidate run + fp16 emulation run,
from the hop's ``seconds``; sessions opened beforehand are not counted) against one warm onnxruntime run of the same
fp16 file in a default session (median of 5 after a warm-up), and the median ratio over the models (goal <= 3x).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# column -> (backend, precision, suffix). DLC at its default precision: the HTP simulator computes in fp16.
# conversions of zoo models that are really wrong on a backend, so not passing them is right, not a false alarm
# (model, target) pairs whose conversion is really wrong (listed apart from the false alarms). None at present:
# efficientvit_b0 on DLC (cosine 0.33-0.53, issue 29) was the HTP's end-of-last-axis Pad, rewritten by the QNN rule
# last-axis-end-pad-to-concat (issue 32).
KNOWN_ERRORS: dict[tuple[str, str], str] = {}

TARGETS = {
    "onnx-fp32": ("onnx", "fp32", ".onnx"),
    "openvino-fp32": ("openvino", "fp32", ".xml"),
    "onnx-fp16": ("onnx", "fp16", ".onnx"),
    "coreml-fp16": ("coreml", "fp16", ".mlpackage"),
    "dlc": ("dlc", "fp32", ".dlc"),
}
FP32_TARGETS = ("onnx-fp32", "openvino-fp32")
FP16_TARGETS = ("onnx-fp16", "coreml-fp16", "dlc")
# graph bugs also planted where only the reduced-precision step sees them (``tests.helpers.zoo.planted_in_artifact``):
# the ONNX graph the hops use as reference is right, the fp16 model / Core ML package / DLC is not, so the fp16 hop's
# own verdict (its budget against the fp16 emulation) must find them; on the fp16 targets only
ARTIFACT_BUGS = ("resnet50/bn_scale", "resnet18/late_conv", "mobilenet_v2/logits", "efficientnet_b0/swap_channels",
                 "deit_tiny/softmax_axis", "deit_tiny/transpose", "gpt2/late_linear", "mobilenet_v2@init/logits")


@dataclass(frozen=True)
class Bug:
    """A planted bug: ``model`` (a zoo name, or a source-level bug's own model) converted with ``mutation`` (a
    function of the source model returning a ``tests.helpers.zoo.Mutation``; None for a source-level bug) and
    ``convert``'s extra keyword arguments."""

    id: str
    model: str
    mutation: Callable[[Any], Any] | None
    what: str
    kwargs: dict = field(default_factory=dict)
    calibrate_bn: bool = True
    targets: tuple[str, ...] = tuple(TARGETS)
    builder: str | None = None  # tests.helpers.zoo function building (model, sample) for a source-level bug
    stage: str = "graph"  # graph: in the exported ONNX graph | exporter: made by the exporter | artifact: see below


def _bugs() -> list[Bug]:
    from tests.helpers import zoo

    init = dict(calibrate_bn=False)
    dyn = ("onnx-fp32", "openvino-fp32", "onnx-fp16", "coreml-fp16")  # DLC fixes every shape: no dynamic axes
    graph = [
        Bug("resnet50/bn_scale", "resnet50", lambda m: zoo.bn_scale(1.05), "one BatchNorm's scale x1.05"),
        Bug("resnet18/late_conv", "resnet18", lambda m: zoo.scale_weight(1.05, "Conv", at=0.8),
            "a late Conv's weight x1.05"),
        Bug("resnet18/classifier", "resnet18", lambda m: zoo.scale_weight(1.02, "linear", at=1.0),
            "the classifier's weight x1.02"),
        Bug("resnet18/drop_bias", "resnet18", lambda m: zoo.drop_bias(at=1.0), "the classifier's bias dropped"),
        Bug("mobilenet_v2/swap_channels", "mobilenet_v2", lambda m: zoo.swap_first_channels(),
            "two first-layer channels swapped"),
        Bug("mobilenet_v2/norm_eps", "mobilenet_v2", lambda m: zoo.norm_eps(1000, m), "the last BatchNorm's eps x1000"),
        Bug("mobilenet_v2/logits", "mobilenet_v2", lambda m: zoo.scale_output(1.03), "logits x1.03"),
        Bug("efficientnet_b0/swap_channels", "efficientnet_b0", lambda m: zoo.swap_first_channels(),
            "two first-layer channels swapped"),
        Bug("efficientnet_b0/logits", "efficientnet_b0", lambda m: zoo.scale_output(1.03), "logits x1.03"),
        Bug("mobilenet_v2@init/swap_channels", "mobilenet_v2", lambda m: zoo.swap_first_channels(),
            "two first-layer channels swapped (initial BatchNorm statistics: logits ~1e-9)", **init),
        Bug("mobilenet_v2@init/norm_eps", "mobilenet_v2", lambda m: zoo.norm_eps(1000, m),
            "the last BatchNorm's eps x1000 (initial statistics)", **init),
        Bug("mobilenet_v2@init/logits", "mobilenet_v2", lambda m: zoo.scale_output(1.03),
            "logits x1.03 (initial statistics)", **init),
        Bug("efficientnet_b0@init/swap_channels", "efficientnet_b0", lambda m: zoo.swap_first_channels(),
            "two first-layer channels swapped (initial BatchNorm statistics: logits ~1e-14)", **init),
        Bug("efficientnet_b0@init/norm_eps", "efficientnet_b0", lambda m: zoo.norm_eps(1000, m),
            "the last BatchNorm's eps x1000 (initial statistics)", **init),
        Bug("efficientnet_b0@init/logits", "efficientnet_b0", lambda m: zoo.scale_output(1.03),
            "logits x1.03 (initial statistics)", **init),
        Bug("regnet_x_400mf/bn_scale", "regnet_x_400mf", lambda m: zoo.bn_scale(1.05, at=0.5),
            "a middle BatchNorm's scale x1.05"),
        Bug("googlenet/late_conv", "googlenet", lambda m: zoo.scale_weight(1.10, "Conv", at=0.9),
            "a late Conv's weight x1.10"),
        Bug("shufflenet_v2_x0_5/concat_axis", "shufflenet_v2_x0_5", lambda m: zoo.concat_axis(),
            "a Concat over the wrong axis"),
        Bug("convnext_tiny/norm_eps", "convnext_tiny", lambda m: zoo.norm_eps(1000, m),
            "the last LayerNorm's eps x1000"),
        Bug("deit_tiny/softmax_axis", "deit_tiny", lambda m: zoo.softmax_axis(at=0.5),
            "an attention Softmax over the wrong axis"),
        Bug("deit_tiny/transpose", "deit_tiny", lambda m: zoo.transpose_square(at=0.5),
            "a transposed square weight (attention projection)"),
        Bug("bert/softmax_axis", "bert", lambda m: zoo.softmax_axis(at=1.0),
            "an attention Softmax over the wrong axis"),
        Bug("bert/transpose", "bert", lambda m: zoo.transpose_square(at=0.5), "a transposed square weight"),
        Bug("gpt2/late_linear", "gpt2", lambda m: zoo.scale_weight(1.05, "linear", at=0.8),
            "a late linear layer's weight x1.05"),
        Bug("vit_hf/classifier", "vit_hf", lambda m: zoo.scale_weight(1.10, "linear", at=1.0),
            "the classifier's weight x1.10"),
    ]
    return [
        *graph,
        Bug("frozen_item", "frozen_item", None,
            "a .item() frozen into a constant by the TorchScript exporter (validated on 2 samples)",
            kwargs=dict(exporter="torchscript", samples=2), builder="frozen_item_model", stage="exporter"),
        Bug("fixed_pos", "fixed_pos", None, "a position table fixed to a 4x4 patch grid, dynamic height/width",
            kwargs=dict(dynamic=["x:2:h", "x:3:w"]), builder="fixed_pos_model", targets=dyn, stage="exporter"),
        Bug("deit_dynamic_traced", "deit_dynamic", None,
            "timm DeiT with dynamic_img_size traced by the TorchScript exporter: its position-table "
            "interpolation frozen at 4x4 patches, dynamic height/width",
            kwargs=dict(exporter="torchscript", dynamic=["x:2:h", "x:3:w"]), builder="dynamic_vit_model",
            targets=dyn, stage="exporter"),
        *[Bug(f"{b.id}@artifact", b.model, b.mutation, b.what + ", in the fp16 artifact only",
              calibrate_bn=b.calibrate_bn, targets=FP16_TARGETS, stage="artifact") for b in graph
          if b.id in ARTIFACT_BUGS],
    ]


# ---------------------------------------------------------------------------------------------------------------------
# one job (a model or a bug, every target), in a subprocess


def _summary(rep: dict) -> dict:
    """What the matrix and the lists need from a report: status, each hop's rule and per-output metrics."""
    hops = []
    for h in rep.get("hops", []):
        tol = h.get("tolerance") or {}
        outs = []
        for o in h.get("outputs", []):
            budget = o.get("budget") or {}
            outs.append({k: o.get(k) for k in ("name", "passed", "max_abs", "rel_rms", "cosine", "snr_db", "scale",
                                               "top1_agreement", "failed_check", "reason", "nonfinite_output",
                                               "nonfinite_reference")}
                        | {"budget": {k: v for k, v in budget.items() if k != "emulation"},
                           "emulation": budget.get("emulation")})
        hops.append({"from": h.get("from"), "to": h.get("to"), "status": h.get("status"),
                     "rule": tol.get("rule"), "precision": tol.get("precision"), "outputs": outs,
                     "errors": h.get("errors", [])[:3], "notes": h.get("notes", [])[:3],
                     "seconds": h.get("seconds", {}), "dynamic_axes": h.get("dynamic_axes")})
    return {"status": rep.get("status"), "hops": hops, "warnings": rep.get("warnings", [])[:3],
            "timings": rep.get("timings", {})}


def _ort_run_seconds(path: Path, runs: int = 5) -> dict:
    """One onnxruntime run of ``path`` in a default session: the first run and the median of ``runs`` warm runs."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {}
    rng = np.random.default_rng(0)
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.integers(1, 8, shape).astype(np.int64) if "int" in i.type
                         else rng.standard_normal(shape).astype(np.float32))
    t = time.perf_counter()
    sess.run(None, feeds)
    first = time.perf_counter() - t
    warm = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        warm.append(time.perf_counter() - t)
    return {"first_s": first, "warm_s": statistics.median(warm)}


def _build(job: dict):
    """(model, sample, mutation or None) for a job."""
    from tests.helpers import zoo

    if job["kind"] == "model":
        m, x = zoo.model(job["model"])
        return m, x, None
    bug = {b.id: b for b in _bugs()}[job["bug"]]
    if bug.builder:
        m, x = getattr(zoo, bug.builder)()
        return m, x, None
    m, x = zoo.model(bug.model, calibrate_bn=bug.calibrate_bn)
    return m, x, bug.mutation(m)


def _run_jobs(jobs: list[dict], out: Path) -> None:
    """Every job's targets in turn, in this (child) process: a line per event to ``out`` as it happens:
    ``{"event": "start", "index": i}``, one row per target, ``{"event": "done", "index": i}``."""
    import warnings

    warnings.filterwarnings("ignore")
    from tests.helpers import zoo

    zoo.register_torchvision_ops()

    def emit(obj: dict) -> None:
        with open(out, "a") as f:
            f.write(json.dumps(obj, default=str) + "\n")

    for job in jobs:
        emit({"event": "start", "index": job["index"]})
        for row in _run_job(job):
            emit(row)
        emit({"event": "done", "index": job["index"]})


def _run_job(job: dict):
    """Yield a row per target of ``job``."""
    import onnxbridge
    from tests.helpers.zoo import planted, planted_in_artifact

    kwargs = {}
    if job["kind"] == "bug":
        kwargs = dict({b.id: b for b in _bugs()}[job["bug"]].kwargs)
    artifact = job.get("stage") == "artifact"
    with tempfile.TemporaryDirectory(prefix="verdicts-") as tmp:
        for target in job["targets"]:
            backend, precision, suffix = TARGETS[target]
            row: dict = {k: v for k, v in job.items() if k != "targets"} | {"target": target}
            t0 = time.perf_counter()
            try:
                model, sample, mutation = _build(job)
                path = Path(tmp) / f"{target}{suffix}"
                plant = (contextlib.nullcontext({}) if mutation is None else
                         planted_in_artifact(mutation, backend) if artifact else planted(mutation))
                with plant as state:
                    result = onnxbridge.convert(model, sample, output=path, to=backend, precision=precision,
                                                opset=17, **kwargs)
                row.update(_summary(result.report))
                if mutation is not None:
                    row["planted"] = state.get("what")
                if job["kind"] == "model" and target == "onnx-fp16":
                    row["ort_run"] = _ort_run_seconds(path)
                del model, result
            except Exception as exc:  # noqa: BLE001 - a conversion that raised is a row of its own
                row.update(status="error", error=f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}",
                           trace=traceback.format_exc(limit=3)[-800:])
            row["seconds"] = round(time.perf_counter() - t0, 2)
            yield row
            for p in Path(tmp).iterdir():  # the artifacts are not kept
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)


def _lane(jobs: list[dict], timeout: float, threads: int, on_done: Callable[[dict, list[dict]], None]) -> None:
    """Run ``jobs`` in a child process (its own process group), one after another; when the child crashes, or a
    conversion makes no progress for ``timeout`` seconds (the child is killed), the job it was on gets an error row
    per unfinished target and a new child takes the rest. ``on_done(job, rows)`` as each job ends."""
    pending = list(jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    while pending:
        with tempfile.TemporaryDirectory(prefix="verdicts-lane-") as tmp:
            spec, out = Path(tmp) / "jobs.json", Path(tmp) / "rows.jsonl"
            spec.write_text(json.dumps(pending))
            out.touch()
            log = open(Path(tmp) / "child.log", "wb")
            proc = subprocess.Popen([sys.executable, __file__, "--_jobs", str(spec), "--_rows", str(out)], cwd=ROOT,
                                    env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            by_index = {j["index"]: j for j in pending}
            current, rows, finished, read, last = None, [], set(), 0, time.monotonic()
            reason = None
            while True:
                lines = out.read_text().splitlines()
                complete = lines if out.read_text().endswith("\n") else lines[:-1]
                for line in complete[read:]:
                    last = time.monotonic()
                    obj = json.loads(line)
                    if obj.get("event") == "start":
                        current, rows = obj["index"], []
                    elif obj.get("event") == "done":
                        finished.add(obj["index"])
                        on_done(by_index[obj["index"]], rows)
                        current = None
                    else:
                        rows.append(obj)
                read = len(complete)
                code = proc.poll()
                if code is not None:
                    if current is not None or len(finished) < len(pending):
                        reason = f"the benchmark's child process exited {code}: " + \
                            (Path(tmp) / "child.log").read_bytes().decode(errors="replace")[-300:]
                    break
                if time.monotonic() - last > timeout:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, 9)  # the child this lane started, and its own children
                    proc.wait()
                    reason = f"no progress for {timeout:g} s: killed"
                    break
                time.sleep(0.5)
            log.close()
        if current is not None:  # the job the child was on when it ended
            job = by_index[current]
            done_targets = {r["target"] for r in rows}
            rows += [{k: v for k, v in job.items() if k != "targets"} | {"target": t, "status": "error",
                                                                         "error": reason, "seconds": None}
                     for t in job["targets"] if t not in done_targets]
            finished.add(current)
            on_done(job, rows)
        elif reason and not finished:  # a child that never got going (e.g. an import failed): give up on the lane
            for job in pending:
                on_done(job, [{k: v for k, v in job.items() if k != "targets"} | {"target": t, "status": "error",
                                                                                 "error": reason, "seconds": None}
                              for t in job["targets"]])
            return
        pending = [j for j in pending if j["index"] not in finished]


# ---------------------------------------------------------------------------------------------------------------------
# the tables


def _first_failed(row: dict) -> dict | None:
    for h in row.get("hops", []):
        if h.get("status") != "passed":
            return h
    return None


def _fmt(v, spec=".2g") -> str:
    return "-" if v is None else format(v, spec)


def _hop_line(h: dict) -> str:
    parts = [f"{h['from']} -> {h['to']} {h['status']} (rule {h.get('rule')})"]
    for o in h.get("outputs", [])[:2]:
        emu = o.get("emulation") or {}
        parts.append(f"{o['name']}: max abs {_fmt(o.get('max_abs'))}, rel rms {_fmt(o.get('rel_rms'))}, "
                     f"cos {_fmt(o.get('cosine'), '.6f')}, SNR {_fmt(o.get('snr_db'), '.1f')} dB, "
                     f"scale {_fmt(o.get('scale'))}"
                     + (f", emulation rel rms {_fmt(emu.get('rel_rms'))}" if emu else "")
                     + (f" [{o['failed_check']}]" if o.get("failed_check") else ""))
    for e in h.get("errors", [])[:1]:
        parts.append(f"error: {e[:160]}")
    if h.get("dynamic_axes") and not (h["dynamic_axes"] or {}).get("exercised", True):
        parts.append(f"dynamic axes not exercised: {(h['dynamic_axes'].get('reason') or '')[:160]}")
    return "; ".join(parts)


def report(rows: list[dict], targets: list[str]) -> str:
    lines: list[str] = []
    bugs = [r for r in rows if r["kind"] == "bug"]
    known = [r for r in rows if r["kind"] == "model" and (r["model"], r["target"]) in KNOWN_ERRORS]
    good = [r for r in rows if r["kind"] == "model" and (r["model"], r["target"]) not in KNOWN_ERRORS]
    width = max(13, *(len(t) for t in targets))

    def cell(rs: list[dict], ok: Callable[[dict], bool]) -> str:
        judged = [r for r in rs if r["status"] != "error"]
        if not judged:
            return "-"
        n = sum(ok(r) for r in judged)
        return f"{n}/{len(judged)} {100 * n / len(judged):.0f}%"

    def count(rs: list[dict], status: str) -> str:
        return str(sum(r["status"] == status for r in rs))

    lines.append("Confusion matrix (verdicts only; 'error' = the conversion raised, not judged)")
    lines.append(f"{'':34s}" + "".join(f"{t:>{width + 2}s}" for t in targets))
    lines.append(f"{'':34s}" + "".join(f"{TARGETS[t][0] + ' ' + TARGETS[t][1]:>{width + 2}s}" for t in targets))
    caught = lambda rs: cell(rs, lambda r: r["status"] != "passed")  # noqa: E731
    stage = {s: [r for r in bugs if r.get("stage") == s] for s in ("graph", "exporter", "artifact")}
    table = [
        ("planted bugs caught (want 100%)", caught, bugs),
        ("  missed: passed", lambda rs: count(rs, "passed"), bugs),
        ("  caught as failed", lambda rs: count(rs, "failed"), bugs),
        ("  caught as skipped/blocked", lambda rs: str(sum(r["status"] in ("skipped", "blocked") for r in rs)),
         bugs),
        ("  error (no verdict)", lambda rs: count(rs, "error"), bugs),
        ("  in the ONNX graph: caught", caught, stage["graph"]),
        ("  made by the exporter: caught", caught, stage["exporter"]),
        ("  in the fp16 artifact: caught", caught, stage["artifact"]),
        ("correct models passing", lambda rs: cell(rs, lambda r: r["status"] == "passed"), good),
        ("  false alarms: failed", lambda rs: count(rs, "failed"), good),
        ("  skipped/blocked", lambda rs: str(sum(r["status"] in ("skipped", "blocked") for r in rs)), good),
        ("  error (no verdict)", lambda rs: count(rs, "error"), good),
        ("known backend errors caught", caught, known),
    ]
    for title, fn, rs in table:
        lines.append(f"{title:34s}" + "".join(f"{fn([r for r in rs if r['target'] == t]):>{width + 2}s}"
                                              for t in targets))
    lines.append("wanted: bugs caught 100% everywhere; correct models passing 100% on "
                 f"{', '.join(FP32_TARGETS)}, >= 95% on {', '.join(FP16_TARGETS)}")

    def goal(t: str) -> str:
        judged_b = [r for r in bugs if r["target"] == t and r["status"] != "error"]
        judged_g = [r for r in good if r["target"] == t and r["status"] != "error"]
        caught = sum(r["status"] != "passed" for r in judged_b) / len(judged_b) if judged_b else None
        passing = sum(r["status"] == "passed" for r in judged_g) / len(judged_g) if judged_g else None
        want = 1.0 if t in FP32_TARGETS else 0.95
        ok = (caught is None or caught == 1.0) and (passing is None or passing >= want)
        return "met" if ok else "MISSED"
    lines.append(f"{'goal':34s}" + "".join(f"{goal(t):>{width + 2}s}" for t in targets))

    for r in known:
        lines.append(f"  known: {r['model']} on {r['target']}: {r['status']} ({KNOWN_ERRORS[r['model'], r['target']]})")
    lines.append("")
    lines.append("False alarms (correct model, verdict not passed):")
    alarms = [r for r in good if r["status"] not in ("passed", "error")]
    for r in alarms:
        h = _first_failed(r)
        lines.append(f"  {r['model']:28s} {r['target']:14s} {r['status']}: " + (_hop_line(h) if h else ""))
    if not alarms:
        lines.append("  none")

    lines.append("")
    lines.append("Missed bugs (planted bug, verdict passed):")
    misses = [r for r in bugs if r["status"] == "passed"]
    for r in misses:
        lines.append(f"  {r['bug']:34s} {r['target']:14s} planted: {r.get('planted') or r.get('what', '')}")
        for h in r.get("hops", []):
            lines.append(f"      {_hop_line(h)}")
    if not misses:
        lines.append("  none")

    lines.append("")
    lines.append("Caught bugs (first hop not passed):")
    for r in bugs:
        if r["status"] not in ("passed", "error"):
            h = _first_failed(r)
            lines.append(f"  {r['bug']:34s} {r['target']:14s} {r['status']}: " + (_hop_line(h) if h else ""))

    errors = [r for r in rows if r["status"] == "error"]
    lines.append("")
    lines.append("Errors (the conversion raised; no verdict):")
    for r in errors:
        lines.append(f"  {r.get('model') or r.get('bug'):28s} {r['target']:14s} {(r.get('error') or '')[:220]}")
    if not errors:
        lines.append("  none")

    lines.append("")
    lines.append("Calibration: the fp16-emulation hop's rel RMS error / the emulation's own (the rule passes up to its "
                 "factor)")

    def ratio(r: dict) -> tuple[float, str] | None:
        hops = [h for h in r.get("hops", []) if h.get("rule") == "fp16-emulation"]
        outs = hops[-1]["outputs"] if hops else []
        pairs = [(o["rel_rms"] / o["emulation"]["rel_rms"], o["name"]) for o in outs
                 if o.get("rel_rms") is not None and (o.get("emulation") or {}).get("rel_rms")]
        return max(pairs) if pairs else None
    for t in targets:
        correct = sorted((q[0], r["model"]) for r in good if r["target"] == t and (q := ratio(r)))
        planted = sorted((q[0], r["bug"]) for r in bugs if r["target"] == t and r.get("stage") == "artifact"
                         and (q := ratio(r)))
        if not correct and not planted:
            continue
        med = f"median {statistics.median(x for x, _ in correct):.2f}" if correct else ""
        top = ", ".join(f"{m} {x:.1f}" for x, m in correct[-4:][::-1])
        low = ", ".join(f"{b} {x:.1f}" for x, b in planted[:3])
        lines.append(f"  {t:14s} correct models: {med}; highest {top or '-'}")
        lines.append(f"  {'':14s} bugs in the fp16 artifact: lowest {low or '-'}")

    lines.append("")
    lines.append("Cost: the fp16 hop's check (candidate + emulation runs) vs one warm onnxruntime run of the same "
                 "fp16 file (default session)")
    ratios = []
    for r in good:
        if r["target"] != "onnx-fp16" or r["status"] == "error" or not r.get("ort_run"):
            continue
        hop = next((h for h in r.get("hops", []) if str(h.get("to", "")).endswith(":fp16")), None)
        if hop is None:
            continue
        sec = hop.get("seconds", {})
        check = sec.get("candidate", 0.0) + sec.get("emulation", 0.0)
        warm, first = r["ort_run"]["warm_s"], r["ort_run"]["first_s"]
        ratio = check / warm if warm else None
        if ratio is not None:
            ratios.append(ratio)
        lines.append(f"  {r['model']:28s} check {check * 1e3:8.1f} ms (candidate {sec.get('candidate', 0) * 1e3:.1f},"
                     f" emulation {sec.get('emulation', 0) * 1e3:.1f}); ort run {warm * 1e3:7.2f} ms warm, "
                     f"{first * 1e3:7.2f} ms first; ratio {_fmt(ratio, '.2f')}x")
    if ratios:
        lines.append(f"  median ratio over {len(ratios)} models: {statistics.median(ratios):.2f}x (goal <= 3x)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------


def _select(text: str | None, known: list[str], what: str) -> list[str]:
    if text is None or text == "all":
        return list(known)
    if text == "none":
        return []
    picked = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [p for p in picked if p not in known]
    if unknown:
        sys.exit(f"unknown {what}: {', '.join(unknown)}; known: {', '.join(known)}")
    return picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="comma-separated zoo models (default: all; 'none' for no correct models)")
    p.add_argument("--bugs", help="comma-separated planted bugs (default: all; 'none' for none)")
    p.add_argument("--targets", help=f"comma-separated targets (default: all of {', '.join(TARGETS)})")
    p.add_argument("--jobs", type=int, default=1, help="subprocesses at once (default 1)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds one conversion may run before its process is killed (default 600)")
    p.add_argument("--out", help="write every row (report summary per model/bug and target) to this JSON file")
    p.add_argument("--list", action="store_true", help="list the models, bugs and targets, then exit")
    p.add_argument("--from-json", metavar="FILE", help="print the tables of an earlier run's --out file (no run)")
    p.add_argument("--_jobs", help=argparse.SUPPRESS)
    p.add_argument("--_rows", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    from tests.helpers import zoo

    targets = _select(args.targets, list(TARGETS), "targets")
    if args._jobs:
        _run_jobs(json.loads(Path(args._jobs).read_text()), Path(args._rows))
        return 0
    if args.from_json:
        rows = json.loads(Path(args.from_json).read_text())
        print(report(rows, [t for t in TARGETS if any(r["target"] == t for r in rows)]))
        return 0
    bugs = {b.id: b for b in _bugs()}
    if args.list:
        print("targets:", ", ".join(f"{t} ({b} {pr})" for t, (b, pr, _) in TARGETS.items()))
        print("models:", ", ".join(f"{e.name} ({e.library})" for e in zoo.ENTRIES))
        print("bugs:")
        for b in bugs.values():
            print(f"  {b.id}: {b.what}")
        return 0
    models = _select(args.models, zoo.NAMES, "models")
    bug_ids = _select(args.bugs, list(bugs), "bugs")
    jobs = [{"kind": "model", "model": m, "targets": targets} for m in models]
    jobs += [{"kind": "bug", "bug": b, "model": bugs[b].model, "what": bugs[b].what, "stage": bugs[b].stage,
              "targets": [t for t in targets if t in bugs[b].targets]} for b in bug_ids]
    jobs = [dict(j, index=i) for i, j in enumerate(j for j in jobs if j["targets"])]
    lanes = max(1, min(args.jobs, len(jobs)))
    threads = max(1, (os.cpu_count() or 2) // lanes)
    print(f"{len(models)} models, {len(bug_ids)} bugs, targets {', '.join(targets)}; {lanes} job(s) at once",
          flush=True)
    rows: list[dict] = []
    t0 = time.perf_counter()
    lock = threading.Lock()

    def done(job: dict, got: list[dict]) -> None:
        with lock:
            rows.extend(got)
            n = len({r["index"] for r in rows})
            name = job.get("bug") or job["model"]
            cells = " | ".join(f"{r['target']} {r['status']} {_fmt(r.get('seconds'), '.0f')}s" for r in got)
            print(f"[{n}/{len(jobs)} {time.perf_counter() - t0:6.0f}s] {name}: {cells}", flush=True)

    with ThreadPoolExecutor(lanes) as pool:
        for f in [pool.submit(_lane, jobs[i::lanes], args.timeout, threads, done) for i in range(lanes)]:
            f.result()
    rows.sort(key=lambda r: (r["index"], list(TARGETS).index(r["target"])))
    print()
    print(report(rows, targets))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
