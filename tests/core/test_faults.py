"""Killed runs and endless models: nothing of a killed run lives on or writes later, a path never holds a model its
report does not describe, and a model that never finishes is an error within the run's time budget."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from tests.conftest import ROOT

EXE = [sys.executable, "-m", "onnxbridge.cli.main"]
MARK = "ONNXBRIDGE_FAULT_TEST_RUN"


def _matmul(path: Path, width: int) -> Path:
    """x[2,64] @ W[64,width] -> Relu: models told apart by their output's width."""
    w = numpy_helper.from_array(np.random.default_rng(width).standard_normal((64, width)).astype(np.float32), "W")
    graph = h.make_graph([h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Relu", ["m"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [2, 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, width])], [w])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    return path


def _example():
    """examples/killed_runs.py, whose models these tests use too."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("killed_runs", ROOT / "examples" / "killed_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loop_model(path: Path, trip: int, *, cond_true: bool = True) -> Path:
    """A Loop adding 1 per iteration, ``trip`` times (its condition constant ``cond_true``, passed on by the
    body): ``examples/killed_runs.py``'s model."""
    model = _example().loop(trip)
    if not cond_true:
        cond = next(t for t in model.graph.initializer if t.name == "cond")
        cond.CopyFrom(h.make_tensor("cond", T.BOOL, [], [False]))
    onnx.save(model, path)
    return path


def alive_of(run: str) -> list[int]:
    """Processes still running (zombies are not) that carry ``MARK=run`` in their environment: a run's CLI, its
    worker and anything they started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if f"{MARK}={run}".encode() in environ and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def settled(run: str, within: float = 5.0) -> list[int]:
    """What of ``run`` is still alive ``within`` seconds from now (at most: empty as soon as all are gone)."""
    end = time.monotonic() + within
    while alive_of(run) and time.monotonic() < end:
        time.sleep(0.1)
    return alive_of(run)


def _start(args: list, cwd: Path, run: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([*EXE, *map(str, args)], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, MARK: run, **env})


@pytest.mark.slow
def test_killed_runs_leave_nothing_running_and_never_overwrite_the_next_run(tmp_path):
    """20 runs killed by SIGKILL or SIGTERM at seeded random moments (export, build, validation, placement), each
    followed by a normal run to the same output: nothing of the killed run is alive 5 s later, and the output is
    the second run's validated model, which its report describes."""
    a, b = _matmul(tmp_path / "a.onnx", 5), _matmul(tmp_path / "b.onnx", 7)
    out, report = tmp_path / "o.xml", tmp_path / "r.json"
    t = time.monotonic()
    first = _start(["-q", "convert", b, "-o", out, "--report", report, "--samples", "20"], tmp_path, "timing")
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    full = time.monotonic() - t
    rng = random.Random(30)
    for i in range(20):
        how = (signal.SIGKILL, signal.SIGTERM)[i % 2]
        run = f"killed-{i}"
        killed = _start(["-q", "convert", a, "-o", out, "--report", report, "--samples", "20"], tmp_path, run)
        time.sleep(rng.uniform(0.05, full * 1.1))
        killed.send_signal(how)
        code = killed.wait(timeout=60)
        assert code in (0, -signal.SIGKILL, 143, -signal.SIGTERM), killed.stderr.read().decode()
        assert settled(run) == [], f"{how.name} at run {i}: its processes live on"
        second = _start(["-q", "convert", b, "-o", out, "--report", report], tmp_path, f"next-{i}")
        assert second.wait(timeout=300) == 0, second.stderr.read().decode()
        assert settled(f"next-{i}") == []
        rep = json.loads(report.read_text())
        assert rep["status"] == "passed" and rep["source"]["path"] == str(b)
        assert rep["artifact"]["bytes"] == out.stat().st_size + out.with_suffix(".bin").stat().st_size
        assert 'dim>7</dim>' in out.read_text().replace("\n", "").replace(" ", "").replace("<dim>", "dim>")
        time.sleep(0.5)  # a killed run's late write would land now, if one could
        assert json.loads(report.read_text()) == rep and 'dim>7</dim>' in \
            out.read_text().replace("\n", "").replace(" ", "").replace("<dim>", "dim>")


@pytest.mark.slow
def test_a_killed_run_takes_its_busy_worker_with_it(tmp_path):
    """The worker stuck in a native call (onnxruntime running a long Loop) dies with a CLI killed by SIGKILL, by
    SIGTERM (``timeout``'s signal), and with a matrix cell's process group."""
    model = loop_model(tmp_path / "long.onnx", 10**8)
    for how in (signal.SIGKILL, signal.SIGTERM):
        run = f"busy-{how.name}"
        proc = _start(["-q", "validate", model, model, "--timeout", "0"], tmp_path, run)
        end = time.monotonic() + 60
        while time.monotonic() < end and len(alive_of(run)) < 2:  # the CLI and its worker
            time.sleep(0.1)
        assert len(alive_of(run)) >= 2
        time.sleep(1.0)  # the worker is in onnxruntime's Loop now
        proc.send_signal(how)
        proc.wait(timeout=30)
        assert settled(run) == [], f"after {how.name}"


def test_a_worker_keeps_its_own_memory_limit(monkeypatch):
    """Over ``ONNXBRIDGE_MAX_MEMORY_MB`` the worker stops itself, even where the parent does not watch it."""
    from onnxbridge import budget, worker
    from onnxbridge.errors import TooLargeError

    monkeypatch.setenv("ONNXBRIDGE_MAX_MEMORY_MB", "300")
    w = worker.Worker()
    try:
        monkeypatch.setattr(budget, "memory_limit", lambda: None)  # the parent no longer watches
        with pytest.raises(TooLargeError, match=r"holding ones used .* over the 300\.0 MB limit"):
            w.request(("call", "numpy:ones", ((1024, 1024, 160),), {}), step="holding ones", library="numpy")
    finally:
        w.kill()


@pytest.mark.slow
def test_an_endless_loop_is_refused_before_it_runs(tmp_path):
    """A 309-byte Loop of 10^15 iterations: exit 2 at once, naming the Loop, from convert, validate and check."""
    bomb = loop_model(tmp_path / "bomb.onnx", 10**15)
    for args in (["convert", bomb, "-o", tmp_path / "o.onnx"], ["validate", bomb, bomb],
                 ["check", bomb, "--targets", "openvino"]):
        t = time.monotonic()
        done = subprocess.run([*EXE, *map(str, args)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "Loop 'spin' would run 1,000,000,000,000,000 times" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and time.monotonic() - t < 60
    assert not (tmp_path / "o.onnx").exists()


def test_a_data_dependent_or_bounded_loop_is_not_refused(tmp_path):
    """A trip count below the bound, or a condition that can turn false, is left to the time budget."""
    from onnxbridge.budget import check_model

    check_model(onnx.load(loop_model(tmp_path / "short.onnx", 10)), "short")
    check_model(onnx.load(loop_model(tmp_path / "off.onnx", 10**15, cond_true=False)), "off")


@pytest.mark.slow
def test_a_long_model_ends_at_the_time_budget_naming_the_step(tmp_path):
    """A Loop that would run for minutes: exit 2 when --timeout runs out (and at ONNXBRIDGE_TIMEOUT_S's default),
    one line naming the step, no output left, no process of the run alive after."""
    model = loop_model(tmp_path / "long.onnx", 3 * 10**8)
    for args, env in (([*EXE, "convert", model, "-o", tmp_path / "o.onnx", "--timeout", "4"], {}),
                      ([*EXE, "validate", model, model], {"ONNXBRIDGE_TIMEOUT_S": "4"})):
        t = time.monotonic()
        done = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=120,
                              env={**os.environ, MARK: "budget", **env})
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: the run's time budget of 4 s ran out while "), done.stderr
        assert "--timeout" in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert time.monotonic() - t < 30
        assert settled("budget") == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("o.onnx", ".o.onnx"))]


@pytest.mark.slow
def test_a_python_loop_in_a_factory_ends_at_the_budget(tmp_path):
    """In-process work (a factory that never returns) is bounded too, in the Python API as in the CLI."""
    (tmp_path / "spin.py").write_text("def make():\n    while True:\n        pass\n")
    done = subprocess.run([*EXE, "convert", "spin.py:make", "-o", "o.onnx", "--timeout", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "ran out while loading the source model" in done.stderr
    code = ("import onnxbridge, sys\n"
            "from onnxbridge.errors import TimedOut\n"
            "try:\n    onnxbridge.convert('spin.py:make', output='o.onnx', timeout=1.5)\n"
            "except TimedOut as e:\n    print(e.one_line()); sys.exit(7)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 7 and "time budget of 1.5 s ran out" in done.stdout, done.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_bad_budget_is_refused(tmp_path, value):
    done = subprocess.run([*EXE, "validate", "a.onnx", "a.onnx"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "ONNXBRIDGE_TIMEOUT_S": value}, timeout=120)
    assert done.returncode == 2 and "ONNXBRIDGE_TIMEOUT_S" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_timed_out_or_orphaned_matrix_cell_takes_its_worker_with_it(tmp_path):
    """`matrix --timeout` kills a cell's process group, and a killed driver ends its cells: the cells' workers (in
    sessions of their own) go with them, and the cell's own conversion had the cell's timeout as its budget."""
    loop_model(tmp_path / "long.onnx", 10**9 - 1)
    (tmp_path / "m.toml").write_text('[matrix]\ntargets = ["onnx"]\nprecisions = ["fp32"]\n\n[[model]]\nname = "long"\n'
                                     'source = "long.onnx"\n')
    done = subprocess.run([*EXE, "-q", "matrix", "m.toml", "-o", "out", "--timeout", "6", "--no-cache"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, MARK: "matrix-timeout"})
    assert done.returncode != 0
    record = json.loads((tmp_path / "out" / "matrix.json").read_text())["cells"][0]
    assert record["status"] == "error" and ("time budget of 6 s" in record["reason"] or "timed out" in record["reason"])
    assert settled("matrix-timeout") == []
    driver = _start(["-q", "matrix", "m.toml", "-o", "out2", "--no-cache"], tmp_path, "matrix-killed")
    end = time.monotonic() + 120
    while time.monotonic() < end and len(alive_of("matrix-killed")) < 3:  # driver, cell, the cell's worker
        time.sleep(0.1)
    assert len(alive_of("matrix-killed")) >= 3
    driver.kill()
    driver.wait()
    assert settled("matrix-killed") == []


@pytest.mark.slow
def test_a_budget_keeps_the_callers_alarm():
    """A program's own SIGALRM handler and pending alarm survive a call run within a budget."""
    import signal as sig

    from onnxbridge import deadline

    fired = []
    previous = sig.signal(sig.SIGALRM, lambda *a: fired.append(1))
    try:
        sig.setitimer(sig.ITIMER_REAL, 0.5)
        with deadline.budget(30):
            assert deadline.remaining() <= 30
        assert sig.getsignal(sig.SIGALRM) is not deadline._alarm
        time.sleep(1.0)
        assert fired == [1]
    finally:
        sig.setitimer(sig.ITIMER_REAL, 0)
        sig.signal(sig.SIGALRM, previous)
