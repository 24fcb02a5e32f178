"""Cells: one model converted to one target at one precision and opset; a manifest expands into them."""
from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from onnxbridge.errors import BadInputError, UnavailableError
from onnxbridge.matrix.manifest import Manifest, backend_option_names


@dataclass(frozen=True)
class Cell:
    """One conversion of the matrix. ``options``: ``convert(**options)`` keywords (JSON-serializable); ``key``: its
    cache key (``onnxbridge.matrix.cache.cell_key``); ``skip``: why it is not run (status skipped); ``data`` and
    ``env``: the files and environment variables the model declares it reads (part of the key)."""

    model: str
    target: str
    precision: str
    opset: int | None
    source: str
    options: dict = field(default_factory=dict)
    key: str = ""
    skip: str | None = None
    data: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``model/target-precision-opsetN`` (``opsetdefault`` without an opset); also its folder under OUTDIR."""
        opset = "default" if self.opset is None else self.opset
        return f"{self.model}/{self.target}-{self.precision}-opset{opset}"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Cell:
        known = {f: d[f] for f in cls.__dataclass_fields__ if f in d}
        return cls(**{**known, "options": dict(known.get("options") or {}), "data": list(known.get("data") or ()),
                       "env": list(known.get("env") or ())})

    def output_name(self) -> str:
        """The artifact's file name in the cell's folder: ``model`` + the backend's first suffix."""
        from onnxbridge.plugins import BACKENDS

        return "model" + BACKENDS.module(self.target).SUFFIXES[0]


def _excluded(manifest: Manifest, model: str, target: str, precision: str, opset: int | None) -> bool:
    cell = {"model": model, "target": target, "precision": precision, "opset": opset}
    return any(all(cell[k] == v for k, v in rule.items()) for rule in manifest.exclude)


def _precision_skip(target: str, precision: str, cache: dict) -> str | None:
    """Why ``target`` cannot run ``precision`` here (its backend is unavailable or does not apply it), or None."""
    from onnxbridge.plugins import BACKENDS

    if target not in cache:
        try:
            cache[target] = tuple(BACKENDS.load(target).PRECISIONS)
        except UnavailableError as exc:
            cache[target] = f"backend {target} unavailable: {exc.one_line()}"
    declared = cache[target]
    if isinstance(declared, str):
        return declared
    if precision not in declared:
        return f"backend {target} does not apply {precision} (it applies {', '.join(declared) or 'none'})"
    return None


def _dynamic_skip(target: str, options: dict) -> str | None:
    """Why ``target`` cannot take the model's ``dynamic`` axes (its artifacts have static shapes and
    ``input_shapes`` does not fix those inputs: ``convert`` refuses it, exit 2), or None."""
    from onnxbridge.plugins import BACKENDS
    from onnxbridge.spine import dynamic_not_kept
    from onnxbridge.specs import InputSpec

    if not options.get("dynamic"):
        return None
    try:
        lost = dynamic_not_kept(target, BACKENDS.module(target), InputSpec.parse(options.get("input_shapes"),
                                                                                 options["dynamic"]))
    except BadInputError:
        return None  # a malformed value: the cell's own conversion says what is wrong
    if lost is None:
        return None
    axes = ", ".join(f"{d.name}:{d.axis}" for d in lost[0])
    return (f"backend {target} cannot keep dynamic axes ({axes}): its models have static shapes (fix the size with "
            "input_shapes, or exclude the cell)")


def _cell_options(options: dict, target: str, backend_options: set[str]) -> dict:
    """The model's options for one target: backend options only where that backend declares them (a matrix
    default ``workspace`` reaches the tensorrt cells only)."""
    from onnxbridge.plugins import BACKENDS

    mine = {o.name for o in BACKENDS.plugin(target).options}
    return {k: v for k, v in options.items() if k not in backend_options or k in mine}


def expand(manifest: Manifest, only: Sequence[str] = ()) -> list[Cell]:
    """Models x targets x precisions x opsets minus ``exclude``; ``only``: glob patterns over cell names (any
    matches). Cells whose target does not apply the precision, is not installed, or cannot keep the model's
    ``dynamic`` axes (static shapes, and no ``input_shapes`` for those inputs) get ``skip``. An empty result is
    refused."""
    backend_options = backend_option_names()
    declared: dict = {}
    cells = []
    for model in manifest.models:
        for target, precision, opset in itertools.product(model.targets, model.precisions, model.opsets):
            if _excluded(manifest, model.name, target, precision, opset):
                continue
            cell = Cell(model.name, target, precision, opset, model.source,
                        _cell_options(model.options, target, backend_options), data=list(model.data),
                        env=list(model.env))
            if only and not any(fnmatch.fnmatchcase(cell.name, pattern) for pattern in only):
                continue
            skip = _precision_skip(target, precision, declared)
            cells.append(replace(cell, skip=skip or _dynamic_skip(target, cell.options)))
    if not cells:
        why = f" match --only {' '.join(only)}" if only else " remain after exclude"
        raise BadInputError(f"{manifest.path}: no cells{why}")
    return cells
