"""The plugin seam. Frontends and backends are found through entry points: groups ``onnxbridge.frontends`` and
``onnxbridge.backends``, each entry naming a ``Plugin`` declaration (``pkg.module:PLUGIN``) in a module that imports
no framework. The built-in plugins register exactly as third-party packages do (see pyproject.toml), and a plugin's
own module is imported only when it is used. What a backend module provides is described in
``onnxbridge.backends``; a build gets a ``BuildContext``."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from onnxbridge.registry import Registry

FRONTEND_GROUP = "onnxbridge.frontends"
BACKEND_GROUP = "onnxbridge.backends"
FRONTENDS = Registry.from_entry_points("frontend", FRONTEND_GROUP)
BACKENDS = Registry.from_entry_points("backend", BACKEND_GROUP)


@dataclass
class BuildContext:
    """What the spine knows that a backend build may need besides its own options.

    ``sample_shapes``: the shapes of the validation sample, by input name (TensorRT's default opt/max);
    ``dynamic``: the axes asked to be dynamic, with ``min``/``max`` when given; ``input_shapes``: shapes the user
    fixed with ``--input-shape`` (a DLC needs static shapes); ``calibration``: name -> array batches for int8;
    ``workdir``: scratch space that lives until validation is over; ``progress``: a ``Progress``.
    """

    target: str | None = None
    sample_shapes: dict[str, tuple] = field(default_factory=dict)
    dynamic: list = field(default_factory=list)
    input_shapes: dict[str, tuple] = field(default_factory=dict)
    calibration: dict | None = None
    workdir: Path | None = None
    progress: object | None = None


@dataclass
class BuildResult:
    """What a backend's ``build`` returns. ``facts``: the report's ``artifact.backend``; ``notes`` and ``warnings``
    join the report's; ``precision``: what the artifact holds and computes in (``artifact.precision``), when the
    backend says; ``runner``: a ``RunnerSpec`` that runs what was built for the hop where ``runner(output)`` cannot
    (the prepared model behind a DLC), or the ``HopSkipped`` saying why the hop cannot run here."""

    facts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    precision: dict | None = None
    runner: object | None = None

    @classmethod
    def from_facts(cls, facts: dict) -> "BuildResult":
        """A backend's own facts dict split into the result: its ``notes``, ``warnings``, ``applied_precision`` and
        ``runner`` entries taken out of the facts."""
        facts = dict(facts)
        return cls(facts, facts.pop("notes", []), facts.pop("warnings", []), facts.pop("applied_precision", None),
                   facts.pop("runner", None))


def module_of(backend: str) -> ModuleType:
    """The backend's module, imported even when its toolchain is missing (module imports are light; ``inspect`` of
    a DLC needs none, and the others raise ``UnavailableError`` themselves)."""
    return importlib.import_module(BACKENDS.plugin(backend).module)


def for_file(path) -> str | None:
    """The backend whose artifacts end like ``path`` (for inspect/validate), or None."""
    name = Path(path).name.lower()
    for backend in BACKENDS.names():
        if not BACKENDS.plugin(backend).broken and name.endswith(tuple(module_of(backend).SUFFIXES)):
            return backend
    return None
