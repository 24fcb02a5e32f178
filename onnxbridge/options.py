"""Options a plugin declares (``Plugin.options``): each once, with its type, choices and help. The CLI builds its
flags from them (``--NAME`` with dashes), the Python API takes the same names as keyword arguments, and the spine
hands a plugin the ones it declared and refuses the others, naming the plugins that take them. Options several
plugins share are declared here."""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("str", "int", "path", "file", "choice")


@dataclass(frozen=True)
class Option:
    """``kind``: "str"; "int" (>= 1); "path" (an existing file or folder to read); "file" (a file to write);
    "choice" (one of ``choices``). ``multiple``: repeatable, given as a list."""

    name: str
    help: str
    kind: str = "str"
    choices: tuple[str, ...] = ()
    multiple: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


CALIBRATION = Option("calibration", "int8 calibration data (.npz or a folder of .npy; batches along axis 0).",
                     kind="path")
ALLOW_APPROX = Option("allow_approx", "Allow an approximation that is not exact, applied and reported (gelu-tanh: "
                      "exact GELU as its tanh form, within 4.8e-4; the hop still compares with the exact model).",
                      multiple=True, metavar="NAME")
