"""paddle2onnx, run in a process of its own (``p2o_child.py``) by the Python that has it (``environment``): it
aborts the whole process on unsupported operators and on an opset above what it emits, and it may live in an
environment apart from onnxbridge's (it pins onnx<=1.17)."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from onnxbridge.errors import ExportError, UnsupportedError

MAX_OPSET = 21  # paddle2onnx 2.1 aborts above this (SIGABRT: "Due to opset version ... aborted")
MIN_OPSET = 7
CHILD = Path(__file__).with_name("p2o_child.py")


def paddle2onnx_opset(opset: int | None) -> int:
    """The opset to ask paddle2onnx for: the requested one within what it emits (17 by default)."""
    return 17 if opset is None else min(max(opset, MIN_OPSET), MAX_OPSET)


def to_onnx(program: str, params: str, save_file: str, opset: int, scratch: str) -> str:
    """Convert the inference model into ``save_file`` (paddle2onnx's own temporary files go under ``scratch``) and
    return the converter's name and version. paddle2onnx raises the opset itself where an operator needs a newer one
    (``auto_upgrade_opset``); the caller reads the opset it got from the model.

    Its refusal of an operator (an abort) is an UnsupportedError quoting it; any other crash a NativeCrash; an error
    it only logged an ExportError with that message.
    """
    from onnxbridge import lifeline
    from onnxbridge.frontends.paddle import environment
    from onnxbridge.worker import native_crash

    python = environment.require()
    library = f"paddle2onnx {environment.version(python) or ''}".strip()
    request = Path(scratch) / "paddle2onnx-request.json"
    result = Path(scratch) / "paddle2onnx-result.json"
    result.unlink(missing_ok=True)
    request.write_text(json.dumps({"program": program, "params": params, "save_file": save_file, "opset": opset,
                                   "scratch": scratch, "result_file": str(result)}))
    env = {**os.environ, "GLOG_minloglevel": "2", "FLAGS_call_stack_level": "0", "PYTHONNOUSERSITE": "1"}
    done = lifeline.run([python, str(CHILD), str(request)], step="converting with paddle2onnx",
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=scratch)
    printed = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 or not result.is_file():
        if "unsupported operators" in printed:  # its refusal of an operator it lacks is an abort
            said = [ln.strip() for ln in printed.splitlines() if "Paddle2ONNX" in ln and ln.strip()]
            raise UnsupportedError(f"{library} cannot convert an operator of this model (it aborted, saying: "
                                   f"{' | '.join(said[-3:])[:300]})")
        raise native_crash("paddle2onnx", library, done.returncode, printed)
    answer = json.loads(result.read_text())
    if not answer["ok"]:
        Path(save_file).unlink(missing_ok=True)
        raise ExportError(f"paddle2onnx: {paddle_message(answer['error'])}")
    return f"paddle2onnx {answer.get('version') or environment.version(python) or ''}".strip()


def _first(logged: list[str]) -> str:
    return paddle_message(next((m for m in logged if m and m != "None"), ""))


def paddle_message(text: str, limit: int = 300) -> str:
    """A Paddle error as one readable line: without its "In user code" stack, hints and C++ locations."""
    text = " ".join(str(text).split())
    if "In user code:" in text:
        found = list(re.finditer(r"\b\w+Error: ", text))
        text = text[found[-1].start():] if found else text
    text = re.sub(r" ?\(at /paddle/[^)]*\)| ?\[Hint: [^\]]*\]", "", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
