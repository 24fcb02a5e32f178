"""Where paddle2onnx lives. It pins ``onnx<=1.17`` (opsets to 22), so ``onnxbridge[all]`` installs Paddle but not
paddle2onnx, and the conversion runs in a Python that has it: this one (``pip install 'onnxbridge[paddle]'`` in an
environment of its own), the one ``ONNXBRIDGE_PADDLE2ONNX_PYTHON`` names, or the environment ``onnxbridge setup
paddle2onnx`` made (under ``$ONNXBRIDGE_HOME``, default ``~/.cache/onnxbridge``)."""
from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from onnxbridge.errors import BadInputError, UnavailableError
from onnxbridge.registry import dist_version

ENV_VAR = "ONNXBRIDGE_PADDLE2ONNX_PYTHON"
PADDLE2ONNX = "2.1.0"  # the version the Paddle frontend is tested with (setup installs it)
HINT = ("run `onnxbridge setup paddle2onnx` (an environment of its own: it pins onnx<=1.17), or set "
        f"{ENV_VAR} to a Python that has paddlepaddle and paddle2onnx")


def home() -> Path:
    return Path(os.environ.get("ONNXBRIDGE_HOME") or Path.home() / ".cache" / "onnxbridge")


def default_dir() -> Path:
    return home() / "paddle2onnx"


def _python_in(directory: Path) -> Path:
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def interpreter() -> str | None:
    """The Python that runs paddle2onnx, or None where there is none."""
    named = os.environ.get(ENV_VAR)
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise BadInputError(f"{ENV_VAR}={named} is not a Python interpreter", hint=HINT)
        return named
    if importlib.util.find_spec("paddle2onnx") is not None:
        return sys.executable
    made = _python_in(default_dir())
    return str(made) if made.is_file() else None


def require() -> str:
    """The Python that runs paddle2onnx; UnavailableError (exit 3) with the way to get one where there is none."""
    python = interpreter()
    if python is None:
        raise UnavailableError("paddle2onnx is not installed here (it pins onnx<=1.17, so onnxbridge[all] leaves it "
                               "out) and no environment of its own was found", hint=HINT)
    return python


@functools.lru_cache(maxsize=8)
def version(python: str) -> str | None:
    """paddle2onnx's version in ``python``'s environment."""
    if python == sys.executable:
        return dist_version("paddle2onnx")
    code = "import importlib.metadata as m; print(m.version('paddle2onnx'))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def elsewhere() -> bool:
    """The registry's toolchain check: Paddle is installed here and paddle2onnx somewhere it can run (a Python named
    by ``ONNXBRIDGE_PADDLE2ONNX_PYTHON`` counts: the conversion says what is wrong with it, if anything)."""
    return dist_version("paddlepaddle") is not None and (bool(os.environ.get(ENV_VAR)) or interpreter() is not None)


def setup(directory: Path | None = None, *, python: str = sys.executable, index_args: tuple[str, ...] = ()) -> dict:
    """Make (or reuse) a virtual environment with paddle2onnx and this environment's paddlepaddle version."""
    directory = Path(directory) if directory else default_dir()
    target = _python_in(directory)
    paddle = dist_version("paddlepaddle")
    # paddle2onnx imports packaging without declaring it
    wanted = [f"paddlepaddle=={paddle}" if paddle else "paddlepaddle>=3.0", f"paddle2onnx=={PADDLE2ONNX}", "packaging"]
    if not target.is_file():
        directory.parent.mkdir(parents=True, exist_ok=True)
        _run([python, "-m", "venv", str(directory)], "python -m venv")
    _run([str(target), "-m", "pip", "install", "-q", "--disable-pip-version-check", *index_args, *wanted],
         "pip install " + " ".join(wanted))
    check = "import paddle, paddle2onnx, importlib.metadata as m; print(m.version('paddle2onnx'), paddle.__version__)"
    got = _run([str(target), "-c", check], "import paddle2onnx").split()
    return {"python": str(target), "paddle2onnx": got[0], "paddlepaddle": got[1], "installed": wanted}


def setup_command(directory: str | None, *, say, note) -> None:
    """``onnxbridge setup paddle2onnx [--dir DIR]`` (the plugin's ``Setup``): ``setup``, saying what it does and made,
    and noting the variable to set where onnxbridge would not find a ``--dir`` elsewhere than the default."""
    if directory and os.environ.get(ENV_VAR) is None and default_dir() != Path(directory):
        note(f"note: set {ENV_VAR}={directory}/bin/python for onnxbridge to find it")
    say("installing paddle2onnx and paddlepaddle into an environment of their own ...")
    made = setup(directory)
    say(f"paddle2onnx {made['paddle2onnx']} with paddlepaddle {made['paddlepaddle']}: {made['python']}")


def _run(command: list[str], what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise UnavailableError(f"{what} failed (exit {done.returncode}): {tail}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
