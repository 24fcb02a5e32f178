"""Native code behind a process boundary: a crash there is an error here, never the end of the run.

onnxruntime, onnxruntime-qnn, TensorRT and coremltools can end a process with a signal (a SIGSEGV in an optimizer
pass, a SIGABRT in a QNN backend). Everything that creates or runs their sessions, and every backend build, runs in
a worker: a child Python process (``python -m onnxbridge.worker``) that takes calls over a private socket. When it
dies, the call raises ``NativeCrash`` (exit 4) naming the step, the library and the signal; the next call starts a
fresh worker. One worker serves a whole process (started on first use, stopped at exit), so its start-up cost is
paid once.

Runners live in the worker: ``open_runner(RunnerSpec(...))`` calls the spec's factory there and returns a proxy
whose calls send feeds and get outputs back, with the seconds the run took inside the worker (``last_seconds``),
so latency figures carry no transfer cost. Localization probes live there too: ``open_probe(RunnerSpec(...))``
returns a proxy whose ``tensors(names, feeds)`` runs the object's method of that name there.
"""
from __future__ import annotations

import atexit
import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from onnxbridge import errors
from onnxbridge.errors import NativeCrash, OnnxBridgeError

from onnxbridge.plugins import RUNNER_FACTS as RUNNER_ATTRIBUTES  # what the parent reads of a runner once


@dataclass(frozen=True)
class RunnerSpec:
    """How to make a runner in the worker: ``factory`` ("module:function") called with ``kwargs``, plain values
    only (paths as str, numbers, lists, dicts). ``library`` names the native code it runs, for crash messages.

    The object the factory returns is a runner (``onnxbridge.plugins.Runner`` documents its members): called with
    a name -> array mapping, it returns the outputs in order, or raises ``HopSkipped`` (from the factory or a call)
    when it cannot run here. The parent reads its ``RUNNER_FACTS`` once, and ``last_notes``/``last_seconds`` after
    each call.
    """

    factory: str
    kwargs: dict = field(default_factory=dict)
    library: str = ""


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def said_last(printed: str, lines: int = 3) -> str:
    """The last lines a process printed that say something: not Python's fault-handler frames nor the crash banners
    native libraries print (their signal is named already)."""
    noise = ("Fatal Python error", "Current thread", "Thread 0x", "  File ", "Extension modules", "Stack (most",
             "FatalError: `", "[TimeInfo:", "[SignalInfo:", "-----", "Error Message Summary", "C++ Traceback",
             "No stack trace")
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", printed)  # onnxruntime colours its log lines
    kept = [ln.strip() for ln in plain.splitlines() if ln.strip() and not ln.strip().startswith(noise)]
    return " | ".join(kept[-lines:])[:400]


def native_crash(step: str, library: str, code: int | None, printed: str) -> NativeCrash:
    """The NativeCrash for a process that ended with ``code`` (negative: a signal) after printing ``printed``."""
    if code is not None and code < 0:
        try:
            how = f"crashed ({signal.Signals(-code).name})"
        except ValueError:
            how = f"crashed (signal {-code})"
    else:
        how = f"exited with status {code}"
    tail = said_last(printed)
    crash = NativeCrash(f"{step}: {library or 'native code'} {how}" + (f"; it printed: {tail}" if tail else ""))
    crash.output = printed
    return crash


class Worker:
    """One child process and the socket to it. ``call`` runs ``module:function`` there; ``open`` keeps an object
    there and returns its handle. Not thread-safe: one call at a time."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        from onnxbridge.budget import memory_limit

        parent, child = socket.socketpair()
        self._log = tempfile.TemporaryFile(mode="w+b")
        limit = memory_limit()
        env = {**os.environ, "PYTHONFAULTHANDLER": "1",  # the worker imports what this process can
               "PYTHONPATH": os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p),
               PRELOAD_ENV: ",".join(preload),
               # it dies with this process (the kernel's parent-death signal follows the thread that starts it:
               # asked for only from the main thread, which lives as long as the process) and keeps its own
               # memory limit
               PARENT_ENV: f"{os.getpid()},{int(threading.current_thread() is threading.main_thread())}",
               LIMIT_ENV: str(limit or 0)}
        self.proc = subprocess.Popen([sys.executable, "-m", "onnxbridge.worker", str(child.fileno())],
                                     pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=self._log, env=env, start_new_session=True)
        child.close()
        from multiprocessing.connection import Connection

        self.conn = Connection(os.dup(parent.fileno()))
        parent.close()
        self.unused: list[int] = []  # handles of runners whose proxies were collected, closed before the next call
        self.cwd = os.getcwd()  # the worker's working directory (it starts in this one)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, message: tuple, *, step: str, library: str, timeout: float | None = None,
                progress=None) -> Any:
        """Send ``message``, return the answer; a dead worker raises NativeCrash, an error there is raised here.
        Lines the call prints through a ``RelayedProgress`` go to ``progress`` (a ``Progress``) meanwhile."""
        self.release()
        self._follow_cwd()
        return self._request(message, step=step, library=library, timeout=timeout, progress=progress)

    def _follow_cwd(self) -> None:
        """Relative paths in a request mean what they mean here: the worker moves to this process's directory."""
        try:
            cwd = os.getcwd()
        except OSError:  # this process's directory was removed: nothing relative can be meant
            return
        if cwd != self.cwd:
            self._request(("chdir", cwd), step="moving the worker to the working directory", library="")
            self.cwd = cwd

    def release(self) -> None:
        """Close the runners whose proxies are gone (``RemoteRunner.__del__`` only queues them: a request may be
        under way when the garbage collector runs it)."""
        while self.unused:
            handle = self.unused.pop()
            try:
                self._request(("close", handle), step="closing a runner", library="")
            except OnnxBridgeError:
                return

    def _request(self, message: tuple, *, step: str, library: str, timeout: float | None = None,
                 progress=None) -> Any:
        from onnxbridge import deadline as budget
        from onnxbridge.budget import memory_limit

        limit = memory_limit()
        left = budget.remaining()  # the run's time budget (TimedOut once spent)
        bounded_by_budget = left is not None and (timeout is None or left < timeout)
        wait = left if bounded_by_budget else timeout
        deadline = None if wait is None else time.monotonic() + wait
        try:
            with budget.doing(step):
                self.conn.send(message)
                while True:
                    self._wait(deadline, limit, step, library, bounded_by_budget)
                    status, value = self.conn.recv()
                    if status != "progress":
                        break
                    if progress is not None and getattr(progress, "enabled", False):
                        progress.console.print(value)
        except (EOFError, OSError, BrokenPipeError):
            raise self._crash(step, library) from None
        except BaseException:  # Ctrl-C mid-call, or the time budget: its answer would reach the next call
            self.kill()
            raise
        if status == "ok":
            return value
        raise _rebuild_error(value)

    def _wait(self, deadline: float | None, limit: int | None, step: str, library: str,
              budget: bool = False) -> None:
        """Until the worker answers. Past ``deadline`` it is stopped (TimedOut where that is the run's time budget,
        else NativeCrash); over ``limit`` bytes of resident memory too (TooLargeError, exit 2: the model needs more
        memory than it may have)."""
        from onnxbridge import deadline as run_budget
        from onnxbridge.budget import over_memory, resident

        started = time.monotonic()
        while not self.conn.poll(_POLL_S if deadline is None else min(_POLL_S, max(deadline - time.monotonic(), 0))):
            if deadline is not None and time.monotonic() >= deadline:
                self.kill()
                if budget:
                    raise run_budget.expired(step)
                raise NativeCrash(f"{step} did not finish within {deadline - started:.0f} s "
                                  f"({library or 'native code'})")
            used = resident(self.proc.pid) if limit else None
            if used is not None and used > limit:
                self.kill()
                raise over_memory(step, used, limit)

    def _crash(self, step: str, library: str) -> OnnxBridgeError:
        """Why the worker went: over its memory limit (TooLargeError, exit 2), else a NativeCrash."""
        from onnxbridge.budget import over_memory

        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        printed = self.printed()
        over = _OVER_MEMORY.search(printed)
        if over is not None:
            return over_memory(step, int(over[1]), int(over[2]))
        return native_crash(step, library, code, printed)

    def printed(self, limit: int = 20000) -> str:
        """The last ``limit`` bytes the worker printed (its stdout and stderr)."""
        try:
            self._log.seek(0, os.SEEK_END)
            size = self._log.tell()
            self._log.seek(max(size - limit, 0))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def tail(self, lines: int = 3) -> str:
        return said_last(self.printed(), lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        try:
            self.conn.close()
        except OSError:
            pass
        self._log.close()


_POLL_S = 0.05  # how often a waiting call looks at the worker's memory
PARENT_ENV = "ONNXBRIDGE_WORKER_PARENT"  # "PID,1": the process it serves (1: started from its main thread)
LIMIT_ENV = "ONNXBRIDGE_WORKER_MEMORY"  # its resident memory limit in bytes (0: none)
_OVER_MEMORY = re.compile(r"onnxbridge worker: resident memory (\d+) bytes over the limit of (\d+) bytes")
_WATCH_S = 0.1  # how often the worker looks at its parent and its own memory
_lock = threading.Lock()
_worker: Worker | None = None


def worker(preload: tuple[str, ...] = ()) -> Worker:
    """The process's worker, started (or restarted after a crash) on demand; a worker it starts imports
    ``preload`` before serving."""
    global _worker
    with _lock:
        if _worker is None or not _worker.alive:
            if _worker is not None:
                _worker.kill()
            _worker = Worker(preload=preload)
        return _worker


PRELOAD_ENV = "ONNXBRIDGE_WORKER_PRELOAD"  # modules a started worker imports before it serves


def prewarm(modules: tuple[str, ...] = ("numpy", "onnx", "onnxruntime")) -> None:
    """Start the worker now, importing ``modules`` there while this process goes on (a conversion's export):
    its first call then finds them loaded. Nothing happens in process mode or when a worker is running."""
    if not in_process():
        worker(preload=modules)


@atexit.register
def shutdown() -> None:
    """Stop the worker (at exit, or to free what it holds)."""
    global _worker
    if _worker is not None:
        _worker.kill()
        _worker = None


IN_PROCESS_ENV = "ONNXBRIDGE_IN_PROCESS"  # "1": run native code in this process (debugging; a crash ends the run)


def in_process() -> bool:
    return os.environ.get(IN_PROCESS_ENV) == "1"


def release() -> None:
    """Free what the runners no longer referenced hold in the worker (sessions, models)."""
    if _worker is not None and _worker.alive:
        _worker.release()


def call(function: str, args: tuple = (), kwargs: dict | None = None, *, step: str, library: str = "",
         timeout: float | None = None, progress=None) -> Any:
    """``module:function(*args, **kwargs)`` in the worker (arguments and result are pickled: our own process).
    ``step`` says what it does, for the message if the worker dies; ``progress``: where lines the call prints
    through a ``RelayedProgress`` argument go."""
    global _sink
    if in_process():
        saved, _sink = _sink, (progress.console.print if progress is not None and progress.enabled else None)
        try:
            return _resolve(function)(*args, **(kwargs or {}))
        finally:
            _sink = saved
    return worker().request(("call", function, tuple(args), dict(kwargs or {})), step=step, library=library,
                            timeout=timeout, progress=progress)


_sink = None  # where a RelayedProgress prints: the socket to the parent in the worker, a console in process


class RelayedProgress:
    """A ``Progress`` as a call in the worker sees it: ``console.print(text)`` reaches the parent's console."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    @property
    def console(self) -> "RelayedProgress":
        return self

    def print(self, text: str) -> None:
        if self.enabled and _sink is not None:
            _sink(text)


class RemoteRunner:
    """A runner living in the worker. Calls send feeds, return outputs; ``last_seconds`` is the time the run took
    there. Attributes named in ``RUNNER_ATTRIBUTES`` are copied from the object when it is made."""

    def __init__(self, spec: RunnerSpec, step: str):
        self.spec, self.step = spec, step
        self._worker = worker()
        self.handle, attributes = self._worker.request(("open", spec.factory, spec.kwargs), step=step,
                                                       library=spec.library)
        for name in RUNNER_ATTRIBUTES:
            setattr(self, name, attributes.get(name))
        self.last_seconds: float | None = None
        self.last_notes: list[str] = []

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        if not self._worker.alive:
            raise NativeCrash(f"{self.step}: the worker holding this runner is gone")
        outputs, self.last_seconds, self.last_notes = self._worker.request(
            ("run", self.handle, dict(feeds), False), step=f"running {self.step}", library=self.spec.library)
        return outputs

    def fresh(self, feeds: Mapping[str, Any]) -> list:
        """The object's ``fresh`` run where it has one (what latency figures time), else a plain call."""
        if not self._worker.alive:
            raise NativeCrash(f"{self.step}: the worker holding this runner is gone")
        outputs, self.last_seconds, _ = self._worker.request(
            ("run", self.handle, dict(feeds), True), step=f"running {self.step}", library=self.spec.library)
        return outputs

    def __del__(self) -> None:  # sessions hold models in memory: the worker frees them before its next call
        try:
            self._worker.unused.append(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class LocalRunner:
    """``RemoteRunner``'s twin in this process (``ONNXBRIDGE_IN_PROCESS=1``): same attributes and timings."""

    def __init__(self, spec: RunnerSpec, step: str):
        self.spec, self.step = spec, step
        self.obj = _resolve(spec.factory)(**spec.kwargs)
        for name in RUNNER_ATTRIBUTES:
            setattr(self, name, getattr(self.obj, name, None))
        self.last_seconds: float | None = None
        self.last_notes: list[str] = []

    def _run(self, feeds: Mapping[str, Any], fresh: bool) -> list:
        run = getattr(self.obj, "fresh", self.obj) if fresh else self.obj
        t = time.perf_counter()
        outputs = run(feeds)
        seconds = time.perf_counter() - t
        self.last_seconds = seconds if fresh else getattr(self.obj, "last_seconds", seconds)
        self.last_notes = list(getattr(self.obj, "last_notes", None) or ())
        return outputs

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        return self._run(feeds, False)

    def fresh(self, feeds: Mapping[str, Any]) -> list:
        return self._run(feeds, True)


def open_runner(spec: RunnerSpec, step: str) -> "RemoteRunner | LocalRunner":
    """The runner ``spec`` describes, living in the worker (here with ``ONNXBRIDGE_IN_PROCESS=1``)."""
    return LocalRunner(spec, step) if in_process() else RemoteRunner(spec, step)


class RemoteProbe:
    """A localization probe (``onnxbridge.localize.probe.Probe``) living in the worker: ``spec``'s factory makes an
    object there with ``tensors(names, feeds) -> {name: array}``; ``what`` is read from it once, ``runs`` counts
    the calls here. ``ask(method, *args)`` calls any other method of that object (plain values in and out)."""

    def __init__(self, spec: RunnerSpec, step: str):
        self.spec, self.step = spec, step
        self._worker = worker()
        self.handle, _ = self._worker.request(("open", spec.factory, spec.kwargs), step=step, library=spec.library)
        self.what = self.ask("describe")
        self.runs = 0

    def ask(self, method: str, *args: Any) -> Any:
        if not self._worker.alive:
            raise NativeCrash(f"{self.step}: the worker holding this probe is gone")
        return self._worker.request(("method", self.handle, method, args), step=f"{self.step} ({method})",
                                    library=self.spec.library)

    def tensors(self, names, feeds: Mapping[str, Any]) -> dict:
        out = self.ask("tensors", list(names), dict(feeds))
        self.runs += 1
        return out

    def __del__(self) -> None:
        try:
            self._worker.unused.append(self.handle)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class LocalProbe:
    """``RemoteProbe``'s twin in this process (``ONNXBRIDGE_IN_PROCESS=1``)."""

    def __init__(self, spec: RunnerSpec, step: str):
        self.spec, self.step = spec, step
        self.obj = _resolve(spec.factory)(**spec.kwargs)
        self.what = self.obj.describe()
        self.runs = 0

    def ask(self, method: str, *args: Any) -> Any:
        return getattr(self.obj, method)(*args)

    def tensors(self, names, feeds: Mapping[str, Any]) -> dict:
        out = self.obj.tensors(list(names), dict(feeds))
        self.runs += 1
        return out


def open_probe(spec: RunnerSpec, step: str) -> "RemoteProbe | LocalProbe":
    """The probe ``spec`` describes, living in the worker (here with ``ONNXBRIDGE_IN_PROCESS=1``)."""
    return LocalProbe(spec, step) if in_process() else RemoteProbe(spec, step)


def _rebuild_error(value: dict) -> Exception:
    cls = getattr(errors, value["class"], None)
    if isinstance(cls, type) and issubclass(cls, OnnxBridgeError):
        return cls(value["message"], hint=value.get("hint"))
    return errors.WorkerError(value["message"])


def _error(exc: BaseException) -> dict:
    if isinstance(exc, OnnxBridgeError):
        return {"class": type(exc).__name__, "message": str(exc), "hint": exc.hint}
    return {"class": "WorkerError", "message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"}


_objects: dict[int, Any] = {}  # in the worker: the runners it holds, by handle


def held() -> int:
    """How many runners the worker holds (call it there: ``call("onnxbridge.worker:held", step=...)``)."""
    return len(_objects)


def _serve(fd: int) -> None:
    global _sink
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    _sink = lambda text: conn.send(("progress", text))  # noqa: E731
    objects = _objects
    next_handle = 0
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        try:
            if kind == "call":
                _, target, args, kwargs = message
                answer = _resolve(target)(*args, **kwargs)
            elif kind == "open":
                _, factory, kwargs = message
                obj = _resolve(factory)(**kwargs)
                next_handle += 1
                objects[next_handle] = obj
                answer = (next_handle, {n: getattr(obj, n) for n in RUNNER_ATTRIBUTES if hasattr(obj, n)})
            elif kind == "run":
                _, handle, feeds, fresh = message
                obj = objects[handle]
                run = getattr(obj, "fresh", obj) if fresh else obj
                t = time.perf_counter()
                outputs = run(feeds)
                seconds = time.perf_counter() - t
                own = getattr(obj, "last_seconds", seconds) if not fresh else seconds  # None: not a timing
                answer = (outputs, own, list(getattr(obj, "last_notes", None) or ()))
            elif kind == "method":  # a probe's (or any held object's) method, by name
                _, handle, method, args = message
                answer = getattr(objects[handle], method)(*args)
            elif kind == "chdir":
                os.chdir(message[1])
                answer = None
            elif kind == "close":
                obj = objects.pop(message[1], None)
                closer = getattr(obj, "close", None)
                if callable(closer):
                    closer()
                answer = None
            else:
                raise ValueError(f"unknown request {kind!r}")
            reply = ("ok", answer)
        except BaseException as exc:  # noqa: BLE001 - every error goes back to the parent
            reply = ("error", _error(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - e.g. an answer that cannot be pickled
            conn.send(("error", _error(exc)))


def _die_with_parent(parent: int, main_thread: bool) -> None:
    """Never outlive the process served: the kernel's parent-death signal (when started from the parent's main
    thread), and the watchdog (``_watch``) for the rest."""
    from onnxbridge.lifeline import die_with_parent

    if main_thread:
        die_with_parent()
    if os.getppid() != parent:  # gone before the signal was asked for
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _watch(parent: int, limit: int) -> None:
    """The watchdog: the parent gone, or resident memory over ``limit`` bytes (the parent may not be there to
    enforce it), ends this process group; the parent reads why from what it printed."""
    from onnxbridge.budget import resident

    while True:
        time.sleep(_WATCH_S)
        if os.getppid() != parent:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        used = resident(os.getpid()) if limit else None
        if used is not None and used > limit:
            os.write(2, f"onnxbridge worker: resident memory {used} bytes over the limit of {limit} bytes\n".encode())
            os.killpg(os.getpgrp(), signal.SIGKILL)


def _guard() -> None:
    """Start the worker's guards from what its parent put in the environment."""
    pid, _, main_thread = os.environ.pop(PARENT_ENV, "").partition(",")
    limit = int(os.environ.pop(LIMIT_ENV, "0") or 0)
    if pid.isdigit():
        _die_with_parent(int(pid), main_thread == "1")
        threading.Thread(target=_watch, args=(int(pid), limit), name="onnxbridge-worker-watch", daemon=True).start()


if __name__ == "__main__":  # serve from the importable module, whose globals the calls see (not __main__'s)
    importlib.import_module("onnxbridge.worker")._guard()
    for _name in filter(None, os.environ.pop(PRELOAD_ENV, "").split(",")):
        try:
            importlib.import_module(_name)
        except ImportError:  # the call that needs it says so
            pass
    importlib.import_module("onnxbridge.worker")._serve(int(sys.argv[1]))
