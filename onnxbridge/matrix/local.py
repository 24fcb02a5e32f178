"""The default executor: each cell in a process of its own, ``workers`` at a time, on this machine.

``run_subprocess`` (also what a Ray task runs on its node) starts ``python -m onnxbridge.matrix.cell`` in a new
session, so a timeout kills the cell's whole process group (its own workers included), and turns a crash into a
record: a signal named ("killed by SIGKILL", "crashed with SIGSEGV"), a timeout, or an exit without a record with
the last line the cell printed. What the cell printed is kept as ``OUTDIR/<cell.name>/cell.log``.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError
from onnxbridge.matrix.cell import (
    LOG_NAME,
    cell_folder,
    clear_folder,
    describe_error,
    new_record,
    run_cell,
)

if TYPE_CHECKING:
    from onnxbridge.matrix.cells import Cell

# Signals a process gets from outside (the OOM killer, a user, a scheduler); any other is the cell's own crash.
_KILLED_BY = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def signal_reason(returncode: int) -> str:
    """A negative return code in words: "killed by SIGKILL", "crashed with SIGSEGV"."""
    number = -returncode
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"crashed with signal {number}"
    return f"{'killed by' if sig in _KILLED_BY else 'crashed with'} {sig.name}"


def _last_line(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else None


class Running:
    """The cell processes alive now, so that an interrupted run kills them all and starts no more."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.stopped = False

    def start(self, args: list[str], **kwargs) -> subprocess.Popen:
        with self._lock:
            if self.stopped:
                raise RuntimeError("the matrix run was stopped")
            proc = subprocess.Popen(args, start_new_session=True, **kwargs)
            self._procs.add(proc)
            return proc

    def forget(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self) -> None:
        """Kill every running cell's process group; start no more."""
        with self._lock:
            self.stopped = True
            for proc in self._procs:
                kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def thread_env(threads: int | None, timeout: float | None = None) -> dict[str, str]:
    """The environment for a cell's process: ``threads`` math threads unless the user set them (N cells at once
    each using every core would only fight), and the cell's ``timeout`` as its run time budget (the conversion then
    names the step that ran out; without one, the default budget applies)."""
    from onnxbridge import deadline

    env = dict(os.environ)
    if threads:
        for var in _THREAD_VARS:
            env.setdefault(var, str(threads))
    if timeout is not None:
        env[deadline.ENV] = f"{timeout:g}"
    return env


def run_subprocess(cell: Cell, outdir: str | Path, timeout: float | None = None, *, running: Running | None = None,
                   threads: int | None = None) -> dict:
    """Run ``cell`` as ``python -m onnxbridge.matrix.cell`` into ``OUTDIR/<cell.name>/`` and return its record;
    ``seconds`` is the process's wall time. A cell that crashed, timed out or exited without a record is an
    ``error``, and its folder is emptied (only ``cell.log`` stays), so no half-written artifact looks like one."""
    outdir = Path(outdir)
    if cell.skip:
        return run_cell(cell, outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    running = running or Running()
    with tempfile.TemporaryDirectory(prefix="onnxbridge-matrix-") as tmp:
        cell_json, record_json, log = Path(tmp, "cell.json"), Path(tmp, "record.json"), Path(tmp, LOG_NAME)
        cell_json.write_text(json.dumps(cell.as_dict()))
        timed_out = False
        t0 = time.perf_counter()
        with open(log, "wb") as out:
            proc = running.start([sys.executable, "-m", "onnxbridge.matrix.cell", str(cell_json), str(outdir),
                                  str(record_json)], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=thread_env(threads, timeout))
            try:
                try:
                    code = proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    kill_group(proc)
                    code = proc.wait()
                else:
                    kill_group(proc)  # what the cell left running (a backend's worker) goes with it
            finally:
                running.forget(proc)
        seconds = time.perf_counter() - t0
        record, reason, crashed = None, None, True
        if timed_out:
            reason = f"timed out after {timeout:g} s"
        elif record_json.exists():
            try:
                record = json.loads(record_json.read_text())
                record["seconds"] = round(seconds, 3)
                crashed = False
            except (OSError, ValueError, TypeError) as exc:
                record, reason = None, f"the cell's record is unreadable: {describe_error(exc)}"
        if record is None:
            if reason is None:
                last = _last_line(log)
                if code < 0:
                    reason = signal_reason(code) + (f"; last output: {last}" if last else "")
                else:
                    reason = f"the cell's process exited with code {code} without a record" + (
                        f": {last}" if last else "")
            record = new_record(cell, "error", reason, seconds)
        _keep_log(cell, outdir, log, emptied=crashed)
    return record


def _keep_log(cell: Cell, outdir: Path, log: Path, *, emptied: bool) -> None:
    """Move the cell's output into its folder as ``cell.log``; for a cell that left no record (crashed, timed out),
    empty the folder first: a killed conversion may have left partial files."""
    try:
        folder = cell_folder(cell, outdir)
        if emptied:
            clear_folder(folder)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.move(str(log), folder / LOG_NAME)
    except (OSError, ValueError):
        pass


def check_names(cells: Sequence[Cell]) -> None:
    """Two cells with one name would write one folder: BadInputError."""
    seen: set[str] = set()
    for cell in cells:
        if cell.name in seen:
            raise BadInputError(f"two cells are named '{cell.name}' (each cell needs a folder of its own)")
        seen.add(cell.name)


class LocalExecutor:
    """Each cell in its own process, ``workers`` at once (default: the number of cores). ``started`` and ``done``
    are called in the thread that called ``run``, as the cells start and finish."""

    kind = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, int(workers or os.cpu_count() or 1))

    def describe(self) -> dict:
        return {"kind": self.kind, "workers": self.workers, "address": None}

    def run(self, cells: Sequence[Cell], outdir: Path, done: Callable[[dict], None], *,
            started: Callable[[Cell], None] | None = None, timeout: float | None = None) -> None:
        """Run every cell; ``done(record)`` for each. An exception from a callback (or Ctrl-C) kills the running
        cells and starts no more."""
        cells = list(cells)
        check_names(cells)
        outdir = Path(outdir)
        events: queue.Queue = queue.Queue()
        running = Running()
        threads = max(1, (os.cpu_count() or 1) // min(self.workers, max(len(cells), 1)))

        def work(cell: Cell) -> None:
            if running.stopped:
                return
            events.put(("started", cell))
            try:
                record = run_subprocess(cell, outdir, timeout, running=running, threads=threads)
            except BaseException as exc:  # noqa: BLE001 - the executor's own failure is the cell's error
                record = new_record(cell, "error", describe_error(exc))
            events.put(("done", record))

        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="onnxbridge-matrix")
        try:
            for cell in cells:
                pool.submit(work, cell)
            finished = 0
            while finished < len(cells):
                kind, item = events.get()
                if kind == "started":
                    if started is not None:
                        started(item)
                else:
                    finished += 1
                    done(item)
        except BaseException:
            running.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
