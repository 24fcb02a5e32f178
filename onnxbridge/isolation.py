"""Keep frameworks that cannot share a process apart, and turn native crashes into errors.

``import tensorflow`` followed by ``import paddle`` in one process segfaults, and native converters
(paddle2onnx) abort the whole process on some models. ``require_importable`` refuses the import
order that crashes; ``call_isolated`` runs ``module:function(**kwargs)`` in a fresh interpreter so a
crash there becomes an ExportError with the signal and the last lines it printed.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from onnxbridge import errors
from onnxbridge.errors import ExportError, OnnxBridgeError, UnavailableError

# framework -> frameworks that must not be imported before it in the same process
CONFLICTS: dict[str, tuple[str, ...]] = {"paddle": ("tensorflow",)}


def require_importable(framework: str) -> None:
    """Raise UnavailableError if importing ``framework`` here would crash the process."""
    if framework in sys.modules:
        return
    for other in CONFLICTS.get(framework, ()):
        if other in sys.modules:
            raise UnavailableError(
                f"{framework} cannot be imported into a process that has already imported {other} "
                "(the process would crash)", hint=f"convert {framework} models in a separate process")


def call_isolated(target: str, kwargs: dict[str, Any], *, what: str, timeout: float | None = None) -> Any:
    """``module:function(**kwargs)`` in a new Python process; arguments and result must be JSON.

    An OnnxBridgeError raised there is raised here with the same class and message; any other
    exception, a crash (signal) or a timeout becomes an ExportError naming ``what``.
    """
    with tempfile.TemporaryDirectory(prefix="onnxbridge-iso-") as tmp:
        result = Path(tmp) / "result.json"
        request = json.dumps({"target": target, "kwargs": kwargs, "result": str(result)})
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "onnxbridge.isolation"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(request, timeout=timeout)
        except BaseException as exc:  # a timeout or Ctrl-C: take the whole child process group down
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise ExportError(f"{what} did not finish within {timeout:.0f} s") from None
            raise
        if result.exists():
            answer = json.loads(result.read_text())
            if "error" in answer:
                cls = getattr(errors, answer["error"]["class"], None)
                if not (isinstance(cls, type) and issubclass(cls, OnnxBridgeError)):
                    cls = ExportError
                raise cls(answer["error"]["message"], hint=answer["error"].get("hint"))
            return answer["value"]
        tail = _tail(stderr) or _tail(stdout)
        if proc.returncode < 0:
            try:
                name = signal.Signals(-proc.returncode).name
            except ValueError:
                name = f"signal {-proc.returncode}"
            raise ExportError(f"{what} crashed ({name})" + (f": {tail}" if tail else ""))
        raise ExportError(f"{what} exited with status {proc.returncode} and no result" + (f": {tail}" if tail else ""))


def _tail(text: str, lines: int = 3) -> str:
    kept = [ln.strip() for ln in (text or "").splitlines()
            if ln.strip() and not ln.startswith(("Fatal Python error", "Current thread", "Thread 0x", "  File "))]
    return " | ".join(kept[-lines:])[:500]


def _child() -> None:
    request = json.loads(sys.stdin.read())
    out = Path(request["result"])
    module_name, fn_name = request["target"].split(":")
    try:
        value = getattr(importlib.import_module(module_name), fn_name)(**request["kwargs"])
        answer: dict = {"value": value}
    except OnnxBridgeError as exc:
        answer = {"error": {"class": type(exc).__name__, "message": str(exc), "hint": exc.hint}}
    except Exception as exc:  # reported to the parent as an ExportError
        text = " ".join(str(exc).split())[:600]
        answer = {"error": {"class": "ExportError", "message": f"{type(exc).__name__}: {text}"}}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(answer))
    os.replace(tmp, out)


if __name__ == "__main__":
    _child()
