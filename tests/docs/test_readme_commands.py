"""Every ``onnxbridge`` command in README.md's shell code blocks runs as written (issue 21: the README stays true).

The commands run in a scratch folder holding ``examples/`` (a link) and the placeholders they name (``batch.npz``,
``model.pt``, ``model.onnx``, ...), made here with onnxbridge itself (``onnxbridge inputs`` for the .npz files). A
command may depend on what an earlier one writes (``inspect out/cnn.onnx``); independent ones run at once. Bracketed
parts (``[--precision fp16]``) are optional and left out. ``matrix`` runs one cell of its manifest (``--only``): the
rest are the same command on other models. TensorRT engines build without a GPU and their hop says ``skipped``.

Backend builds and the other heavy commands (``HEAVY``) take 30-110 s each on a shared 2-core machine: every light
command runs in one test; each heavy one runs in a test of its own (``slow``: the full tier), with what it needs and
what reads its output (``inspect out/cnn.engine``). Every run runs the same commands.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers.extras import requires

SHELLS = ("bash", "sh", "shell", "console")
PROGRAMS = ("onnxbridge", ".venv/bin/onnxbridge", "./.venv/bin/onnxbridge")
MATRIX_CELL = "cnn/onnx-fp32-opset17"  # the one cell each matrix command runs
WORKERS = 3
HEAVY = re.compile(r"--to (coreml|dlc|tensorrt|openvino)\b|transformers\.py|localize\.py|--executor ray|\.mlpackage$")
TIMEOUT_S = 240


def readme_commands(text: str) -> list[str]:
    """The ``onnxbridge`` commands of ``text``'s shell code blocks, continuation lines joined, comments and shell
    preambles (``python3 -m venv .venv && ...``) dropped, in order."""
    found = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang not in SHELLS:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = part.strip().split(" #")[0].split()
                if words and words[0] in PROGRAMS:
                    found.append(" ".join(words))
    return found


def runnable(command: str) -> list[str]:
    """The command's words with its optional ``[...]`` parts left out (they nest: ``[--dynamic x:0[:batch]]``)."""
    kept, depth = [], 0
    for ch in command:
        depth += ch == "["
        if depth == 0:
            kept.append(ch)
        depth -= ch == "]" and depth > 0
    words = shlex.split("".join(kept))
    if words[1] == "matrix":
        words += ["--only", MATRIX_CELL]
    return words[1:]


@dataclass(eq=False)
class Job:
    """One command line: what it reads (every word), what it writes (``-o``), what must run first."""

    args: list[str]
    shown: str
    expect: tuple[int, ...] = (0,)
    shows: str = ""  # text the output must hold (a documented non-zero outcome)
    writes: set[str] = field(default_factory=set)
    needs: list["Job"] = field(default_factory=list)
    future: Future | None = None

    def __post_init__(self) -> None:
        for flag in ("-o", "--output"):
            if flag in self.args:
                self.writes.add(os.path.normpath(self.args[self.args.index(flag) + 1]))


def placeholders(folder: Path) -> dict[str, Job]:
    """Jobs that make the files the README names but does not make itself, by the file each makes (each runs just
    before the first command naming its file, after the commands that write what it reads)."""
    (folder / "zoo.toml").write_text('[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\nopsets = [17]\n\n'
                                     '[[model]]\nname = "cnn"\nsource = "examples/models.py:cnn"\n')
    made = {"batch.npz": ["inputs", "examples/models.py:cnn", "-o", "batch.npz"],
            "batches.npz": ["inputs", "examples/models.py:cnn", "-o", "batches.npz", "--calibration", "4"],
            "calib.npz": ["inputs", "examples/models.py:cnn", "-o", "calib.npz", "--calibration", "4"],
            "out/old/matrix.json": ["matrix", "zoo.toml", "-o", "out/old"],
            "a.onnx": ["convert", "model.onnx", "-o", "a.onnx", "--no-validate"],
            "b.onnx": ["adapt", "model.onnx", "-o", "b.onnx", "--opset", "13", "--no-validate"],
            "out/model.mlpackage": ["convert", "model.onnx", "--to", "coreml", "-o", "out/model.mlpackage",
                                    "--no-validate"]}
    jobs = {}
    for name, args in made.items():
        jobs[name] = Job(args, f"(placeholder) onnxbridge {' '.join(args)}")
        jobs[name].writes.add(name)
    return jobs


def with_placeholders(readme: list[Job], made: dict[str, Job]) -> list[Job]:
    """``readme`` with each placeholder job just before the first command that names its file (none where that
    command is the one writing it)."""
    jobs, pending = [], dict(made)
    for job in readme:
        for name in [n for n in pending if n in {os.path.normpath(a) for a in job.args}]:
            placeholder = pending.pop(name)
            if name not in job.writes:  # the README makes it itself here: no placeholder
                jobs.append(placeholder)
        jobs.append(job)
    return jobs


# Outcomes the README itself describes for a command, besides exit 0: (pattern, exit codes, text the output shows).
DOCUMENTED = [
    (r"^onnxbridge check ", (0, 2), "blocker(s)"),  # "exit 2 if any" blocker; each blocker listed
    (r"^onnxbridge convert examples/localize\.py:hot_chain ", (1,), "first divergent node: "),  # a planted fault
    # without a CUDA GPU the TensorRT hop is skipped: validation incomplete, exit 5 (README: exit codes)
    (r"^onnxbridge convert \S+ --to tensorrt ", (0, 5), "validation incomplete: onnx -> tensorrt skipped"),
]


# Commands that are not run, with why (only what would install software or needs hardware this host lacks).
NOT_RUN = [
    (r"^\S*onnxbridge setup ", "installs packages into an environment of its own (network); tests/frontends/paddle "
                               "covers what it makes"),
]


def not_run(command: str) -> str | None:
    return next((why for pattern, why in NOT_RUN if re.search(pattern, command)), None)


def expected(command: str) -> tuple[tuple[int, ...], str]:
    for pattern, codes, text in DOCUMENTED:
        if re.search(pattern, command):
            return codes, text
    return (0,), ""


def _scripted_cnn(path: Path) -> None:
    """model.pt: the example CNN as a TorchScript archive (``convert model.pt --input-shape x:1,3,224,224``)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("readme_example_models", ROOT / "examples" / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.jit.save(torch.jit.script(module.cnn()[0]), str(path))


def _program() -> list[str]:
    script = Path(sys.executable).parent / "onnxbridge"
    return [str(script)] if script.exists() else [sys.executable, "-m", "onnxbridge.cli.main"]


def _run(job: Job, folder: Path, env: dict) -> tuple[int, str, float]:
    for need in job.needs:
        code, out, _ = need.future.result()
        if code not in need.expect:
            return -1, f"needs `{need.shown}`, which failed", 0.0
    t = time.perf_counter()
    proc = subprocess.run(_program() + job.args, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t


def schedule(jobs: list[Job]) -> None:
    """Each job needs the earlier jobs that write a file it names, or write where it writes."""
    for i, job in enumerate(jobs):
        names = {os.path.normpath(a) for a in job.args} | job.writes
        for earlier in jobs[:i]:
            if earlier.writes & names or any(n.startswith(w + "/") for w in earlier.writes for n in names):
                job.needs.append(earlier)


def test_readme_commands_are_found():
    commands = readme_commands((ROOT / "README.md").read_text())
    assert commands[0].startswith(".venv/bin/onnxbridge convert examples/models.py:cnn -o out/cnn.onnx")
    assert any(c.startswith("onnxbridge validate examples/models.py:cnn out/cnn.onnx --inputs batch.npz")
               for c in commands)
    assert not any(c.startswith("onnxbridge convert SOURCE") for c in commands)  # the synopsis is not a command
    assert runnable("onnxbridge convert m.onnx --to coreml -o o.mlpackage [--target iOS15|iOS16] [--dynamic "
                    "x:0[:batch:1..8]] --opset 17") == ["convert", "m.onnx", "--to", "coreml", "-o", "o.mlpackage",
                                                         "--opset", "17"]


def is_heavy(job: Job) -> bool:
    return bool(HEAVY.search(job.shown)) and not job.shown.startswith("(placeholder)")


def selection(jobs: list[Job], heavy: str | None) -> list[Job]:
    """In order: with ``heavy`` None, every README job that needs no heavy one; else the README job shown as
    ``heavy`` and the README jobs that read what it writes. Each with what it needs."""
    chosen: set[int] = set()
    for job in jobs:
        if job.shown.startswith("(placeholder)"):
            continue
        needed = any(id(n) in chosen for n in job.needs)
        if heavy is None and not is_heavy(job) and not any(is_heavy(n) for n in _all_needs(job)):
            chosen.add(id(job))
        elif heavy is not None and (job.shown == heavy or needed and not is_heavy(job)):
            chosen.add(id(job))
    for job in reversed(jobs):  # a kept job keeps what it needs
        if id(job) in chosen:
            chosen |= {id(n) for n in job.needs}
    return [j for j in jobs if id(j) in chosen]


def _all_needs(job: Job) -> list[Job]:
    found, todo = [], list(job.needs)
    while todo:
        need = todo.pop()
        if need not in found:
            found.append(need)
            todo += need.needs
    return found


def run_readme(folder: Path, heavy: str | None) -> None:
    """Run ``selection(..., heavy)`` of README.md's commands in ``folder``; fail naming each that failed."""
    (folder / "examples").symlink_to(ROOT / "examples")
    _scripted_cnn(folder / "model.pt")
    commands = readme_commands((ROOT / "README.md").read_text())
    skipped = [f"not run: {c} ({not_run(c)})" for c in commands if not_run(c)]
    readme = [Job(runnable(c), c, *expected(c)) for c in commands if not not_run(c)]
    jobs = with_placeholders(readme, placeholders(folder))
    schedule(jobs)
    jobs = selection(jobs, heavy)
    readme = [j for j in jobs if j in readme]
    assert readme, f"no README command selected for {heavy!r}"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as pool:  # jobs start in order, so a job's needs are running before it waits
        for job in jobs:
            job.future = pool.submit(_run, job, folder, env)
    failures, timings = [], []
    for job in jobs:
        code, out, seconds = job.future.result()
        timings.append(f"{seconds:5.1f}s {job.shown}")
        if code not in job.expect or (code and job.shows not in out) or "Traceback" in out or "Usage:" in out:
            failures.append(f"`{job.shown}` exited {code}:\n{out[-1500:]}")
    summary = f"{len(readme)} README commands in {time.perf_counter() - t0:.1f}s\n" + "\n".join(timings + skipped)
    print(summary)
    assert not failures, "\n\n".join(failures)


HEAVY_COMMANDS = [c for c in readme_commands((ROOT / "README.md").read_text()) if HEAVY.search(c) and not not_run(c)]


@requires("torch", "coremltools", "openvino", "tensorrt_rtx", "onnxruntime_qnn")  # what the README's commands use
def test_light_readme_commands_run(tmp_path):
    run_readme(tmp_path, None)
    assert (tmp_path / "out" / "cnn.onnx").is_file() and (tmp_path / "batch.npz").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("command", HEAVY_COMMANDS, ids=[" ".join(c.split()[1:4]) for c in HEAVY_COMMANDS])
@requires("torch", "coremltools", "openvino", "tensorrt_rtx", "onnxruntime_qnn")
def test_heavy_readme_command_runs(tmp_path, command):
    run_readme(tmp_path, command)
