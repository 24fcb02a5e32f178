"""Options, each declared once with its type, default, choices and help: the core's own (``onnxbridge.request``)
and those a plugin declares (``Plugin.options``). The CLI builds its flags from them (``--NAME`` with dashes, or
``flags``), the Python API takes the same names as keyword arguments and checks them with ``Option.problem``, and
the spine hands each stage (or plugin) the values. Options several plugins share are declared here."""
from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from typing import Any, Callable

# "str"; "int" (within low..high); "path" (an existing file or folder to read); "file" (a file to write); "output"
# (a file or folder to write); "choice" (one of ``choices``); "switch" (True/False, ``--NAME/--no-NAME``; a default
# of None means "decide"); "flag" (False unless given); "value" (anything ``rule`` accepts, e.g. a mapping)
KINDS = ("str", "int", "path", "file", "output", "choice", "switch", "flag", "value")


@dataclass(frozen=True)
class Option:
    """One option. ``multiple``: repeatable, given as a list. ``help``: text, or a function giving it (help that
    lists what the registry holds is computed when shown). ``flags``: the CLI's spelling where it is not ``--NAME``
    (e.g. ``("-o", "--output")``, ``("--input-shape",)`` for ``input_shapes``). ``bare``: the value of the flag given
    without one (``--optimize`` alone is "default"). ``rule``: the Python API's check where the kind's is not enough
    (it returns what is wrong, or None). ``cli``: False for the Python API's only (a live object, a mapping).
    ``required``: the CLI requires it (the Python API has a meaning for None). ``commands``: where a plugin's option
    applies (e.g. ``("convert",)`` for an exporter's), refused elsewhere; empty: wherever the plugin is used."""

    name: str
    help: str | Callable[[], str]
    kind: str = "str"
    choices: tuple[str, ...] = ()
    multiple: bool = False
    metavar: str | None = None
    default: Any = None
    low: int | None = 1
    high: int | None = None
    flags: tuple[str, ...] = ()
    bare: Any = None
    rule: Callable[[Any], str | None] | None = None
    cli: bool = True
    required: bool = False
    show_default: bool = False
    commands: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def flag(self) -> str:
        """The long flag (``--input-shape``)."""
        return self.flags[-1] if self.flags else "--" + self.name.replace("_", "-")

    def text(self) -> str:
        """The help text (computed, when ``help`` is a function)."""
        return self.help() if callable(self.help) else self.help

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` given to the Python API (None: nothing; None itself always passes)."""
        if value is None:
            return None
        if self.rule is not None:
            return self.rule(value)
        if self.multiple:
            ok = isinstance(value, (list, tuple)) and all(self._one(v) is None for v in value)
            return None if ok else f"must be a list of {self._what()}"
        return self._one(value)

    def _one(self, value: Any) -> str | None:
        if self.kind in ("switch", "flag"):
            return None if isinstance(value, bool) else \
                "must be True, False or None" if self.kind == "switch" and self.default is None else \
                "must be True or False"
        if self.kind == "int":
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                return "must be an int"
            if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
                return f"must be {'>= ' + str(self.low) if self.high is None else f'in {self.low}..{self.high}'}"
            return None
        if self.kind == "choice":
            return None if isinstance(value, str) and value in self.choices else \
                f"must be one of {', '.join(self.choices)}"
        if self.kind in ("path", "file", "output"):
            text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
            if not isinstance(text, str):
                return "must be a path (str or os.PathLike)"
            return None if text and "\0" not in text else "must be a non-empty path without NUL bytes"
        return None if isinstance(value, str) else "must be a str"

    def _what(self) -> str:
        return {"int": "ints", "choice": f"{', '.join(self.choices)}", "path": "paths", "file": "paths"}.get(
            self.kind, "str")


CALIBRATION = Option("calibration", "int8 calibration data (.npz or a folder of .npy; batches along axis 0).",
                     kind="path")
ALLOW_APPROX = Option("allow_approx", "Allow an approximation that is not exact, applied and reported (gelu-tanh: "
                      "exact GELU as its tanh form, within 4.8e-4; the hop still compares with the exact model).",
                      multiple=True, metavar="NAME")
