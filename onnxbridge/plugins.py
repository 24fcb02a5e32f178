"""The plugin seam. Frontends and backends are found through entry points: groups ``onnxbridge.frontends`` and
``onnxbridge.backends``, each entry naming a ``Plugin`` declaration (``pkg.module:PLUGIN``) in a module that imports
no framework. The built-in plugins register exactly as third-party packages do (see pyproject.toml), and a plugin's
own module is imported only when it is used. What a backend module provides is described in
``onnxbridge.backends``.

The contracts: a frontend module is a ``Frontend`` whose ``load`` returns a ``SourceModel``; a backend module is a
``Backend`` whose ``build`` gets a ``BuildContext`` and returns a ``BuildResult``. ``Registry.load`` refuses a module
that lacks a required member (the plugin is unusable, exit 3), so a half-written plugin fails where it is named.
"""
from __future__ import annotations

import contextlib
import errno
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from onnxbridge.errors import BadInputError, OnnxBridgeError
from onnxbridge.registry import Registry
from onnxbridge.specs import DynamicAxis, InputSpec, Sample, TensorSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from onnxbridge.localize.probe import Sides

class Runner:
    """What runs a model for a hop: called with named inputs, it returns the outputs in order, or raises
    ``HopSkipped`` where it cannot run here. Any callable is a runner; the members below are what one may say of
    itself besides its outputs, each optional (a runner that lacks one reads as its default here). The spine reads
    them only through ``described``; a runner in the worker (``worker.RunnerSpec``) has them copied once.

    - ``what_ran``: one line, what produced the numbers (the report's ``runtimes``).
    - ``compute_precision``: what it computes in ("fp16": judged against the fp16 emulation of its reference).
    - ``emulation_factor``: how many times the emulation's error its arithmetic may err (default
      ``validation.FP16_FACTOR``).
    - ``static_shapes``: name -> dims, the only input shapes it takes (other samples are left out, with a note).
    - ``hop_name``: the hop's ``to`` (default the backend's name).
    - ``artifact_checked``: "executed" (default) or "structure"; ``artifact_check``: a dict of facts it checked.
    - ``input_specs`` / ``output_names``: its inputs and outputs, where the spine asks.
    - ``fp16``: it computes in fp16 (a Core ML package's runner).
    - after each call: ``last_notes`` (lines worth reporting, e.g. where an fp16 value overflowed) and
      ``last_seconds`` (the time the call took where it ran, None where it computed nothing new).
    - ``fresh(feeds)``: the same run, never answered from a cache (latency figures time it).
    """

    what_ran: str | None = None
    compute_precision: str | None = None
    emulation_factor: float | None = None
    static_shapes: dict | None = None
    hop_name: str | None = None
    artifact_checked: str | None = None
    artifact_check: dict | None = None
    input_specs: list | None = None
    output_names: list | None = None
    fp16: bool | None = None
    last_notes: list | None = None
    last_seconds: float | None = None

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        raise NotImplementedError

    def fresh(self, feeds: Mapping[str, Any]) -> list:
        return self(feeds)


# what a runner states once (copied from a runner in the worker when it is opened)
RUNNER_FACTS = ("what_ran", "compute_precision", "emulation_factor", "static_shapes", "hop_name", "artifact_checked",
                "artifact_check", "input_specs", "output_names", "fp16")


class described:  # noqa: N801 - reads like a function: described(runner).what_ran
    """``runner``'s members as ``Runner`` documents them: its own where it has them, else their defaults."""

    def __init__(self, runner: Callable[[Mapping[str, Any]], list]):
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        if name == "fresh":
            return getattr(self._runner, "fresh", self._runner)
        if not hasattr(Runner, name) or name.startswith("_"):
            raise AttributeError(f"Runner documents no member {name!r}")
        return getattr(self._runner, name, getattr(Runner, name))


@dataclass
class Exported:
    """An exported ONNX model; tensors marked external live under ``base_dir``."""

    model: "onnx.ModelProto"
    base_dir: Path | None
    exporter: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class SourceModel(ABC):
    """A loaded source model (what a frontend's ``load`` returns): its inputs, a sample, an ONNX export and
    reference runs."""

    frontend: str = ""  # registry name, e.g. "torch"
    framework: str = ""  # distribution name, for versions in reports
    converter: str = ""  # distribution name of the exporter it uses (e.g. "tf2onnx"), if not the framework
    kind: str = ""  # what was loaded, e.g. "nn.Module", "torch.export .pt2"
    runs_in: str = "this process"  # where ``run`` computes the references ("the worker process": native code there)
    declares_shapes: bool = True  # False: the model declares no input shapes (a PyTorch module), its
    # ``input_specs`` are the sample's, so they fix no axis (``--batch`` may resize any)
    description: str = ""
    input_specs: list[TensorSpec]
    sample: Sample | None = None
    dynamic: list[DynamicAxis]

    @abstractmethod
    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        """Write an ONNX model under ``workdir`` and return it."""

    @abstractmethod
    def run(self, feeds: Mapping[str, "np.ndarray"]) -> list["np.ndarray"]:
        """Reference outputs from the source framework, flattened in ONNX output order."""

    def probe(self, model: "onnx.ModelProto") -> "Sides | None":
        """The source side for localizing a divergence against ``model`` (the ONNX export of this source): a probe
        of intermediate tensors keyed by ``model``'s tensor names, or None where the framework records nothing that
        maps onto them."""
        return None

    def release(self) -> None:
        """Drop every reference to the framework model once nothing will run it again: the spine calls this before
        onnxruntime loads the exported weights, then runs the garbage collector (weights held in reference cycles
        go then), so the two never hold them at once. Default: keep it."""

    def info(self) -> dict:
        return {"frontend": self.frontend, "framework": self.framework, "kind": self.kind, "description": self.description,
                "inputs": [s.as_dict() for s in self.input_specs],
                "dynamic": [{"name": d.name, "axis": d.axis, "label": d.dim_label} for d in self.dynamic]}


@runtime_checkable
class Frontend(Protocol):
    """What a frontend module provides (besides ``PLUGIN``).

    ``accepts(source)``: whether it can load ``source`` (a path or a live object; cheap, no framework import when
    the answer is no); ``load(source, ...)``: the ``SourceModel`` (keyword arguments: ``sample_inputs``,
    ``input_shapes`` (TensorSpecs), ``dynamic`` (DynamicAxis), ``input_names``, ``trust``, ``seed`` and the options
    its ``Plugin`` declares). Export and reference runs are the SourceModel's.
    """

    NAME: str

    def accepts(self, source: Any) -> bool: ...

    def load(self, source: Any, **kwargs: Any) -> SourceModel: ...


@runtime_checkable
class Backend(Protocol):
    """What a backend module provides (besides ``PLUGIN``).

    - ``SUFFIXES``: how its artifacts end (``inspect``/``validate`` pick the backend by suffix); ``PRECISIONS``: the
      precisions its build applies (others are refused before any work).
    - ``build(onnx_path, output, *, target, precision, context, **options) -> BuildResult``: makes ``output``
      (atomically) from the ONNX model the spine wrote; ``options`` are those its ``Plugin`` declares.
    - ``runner(path, *, onnx_path=None) -> Runner``: runs a saved artifact here, or raises ``HopSkipped`` saying
      why it cannot (no GPU, no simulator); ``inspect(path) -> dict``: what it holds, without running it;
      ``check(onnx_path, context) -> list[str]``: every blocker, without building.

    Optional members: ``TARGETS`` (the deployment targets ``--target`` may name; none by default), ``MAX_OPSET``
    (the newest opset it consumes, None for any: its build adapts down itself), ``HOP_NAME`` (what its hop is called, default its name), ``ONNX_PRECISIONS`` (precisions the
    spine applies to the ONNX model itself before ``build``), ``ONNX_ARTIFACT`` (the artifact is the ONNX model the
    spine writes: written at the output, named with one of its ``SUFFIXES``, or returned in memory when there is no output path), ``PRECISION_HINTS`` (precision -> what to do instead, for refusals),
    ``KEEPS_DYNAMIC`` (False: its artifacts have static shapes, so ``--dynamic`` is refused before any work unless
    ``--input-shape`` fixes that input; default True),
    ``companions(output)`` (files written beside ``output``: removed with it on failure, counted in its size),
    ``rewrites(onnx_path, context)`` (the legalization a build would apply), ``probe(artifact, onnx_path,
    checkpoints) -> onnxbridge.localize.probe.Sides`` (the artifact's intermediates by ONNX tensor name, for
    localizing a failed hop; raises ``HopSkipped`` where it cannot run here).
    """

    SUFFIXES: tuple[str, ...]
    PRECISIONS: tuple[str, ...]

    def build(self, onnx_path: Path, output: Path, **kwargs: Any) -> "BuildResult": ...

    def runner(self, path: Path, *, onnx_path: Path | None = None) -> Runner: ...

    def inspect(self, path: str | Path) -> dict: ...

    def check(self, onnx_path: Path, context: "BuildContext | None" = None) -> list[str]: ...


@dataclass
class BuildContext:
    """What the spine knows that a backend build (or check) may need besides its own options.

    ``inputs``: the ``--input-shape``/``--dynamic`` spec, parsed once (its dynamic axes as the frontend resolved
    them, with ``min``/``max`` when given); ``sample_shapes``: the shapes of the validation sample, by input name
    (TensorRT's default opt/max); ``calibration``: name -> array batches for int8; ``workdir``: scratch space that
    lives until validation is over; ``progress``: a ``Progress``.
    """

    target: str | None = None
    inputs: InputSpec = field(default_factory=InputSpec)
    sample_shapes: dict[str, tuple] = field(default_factory=dict)
    calibration: dict | None = None
    workdir: Path | None = None
    progress: object | None = None

    @property
    def input_shapes(self) -> dict[str, tuple]:
        """Shapes the user fixed with ``--input-shape``, by input name (a DLC needs static shapes)."""
        return self.inputs.fixed()

    @property
    def dynamic(self) -> list[DynamicAxis]:
        """The axes asked to be dynamic."""
        return list(self.inputs.dynamic)


@dataclass
class BuildResult:
    """What a backend's ``build`` returns; the spine turns it into the report.

    - ``facts``: the report's ``artifact.backend``, as the backend writes it (plain JSON values);
    - ``notes`` and ``warnings``: lines joined to the report's ``notes`` and ``warnings``;
    - ``precision``: what the artifact holds and computes in (``weights``, ``compute``, and what else the backend
      says), the report's ``artifact.precision`` with ``requested`` added; None when the backend does not say;
    - ``runner``: for a hop ``runner(output)`` cannot run (the prepared model behind a DLC), a ``RunnerSpec`` that
      runs what was built, or the ``HopSkipped`` saying why the hop cannot run here; None: ``runner(output)``;
    - ``same_graph``: the artifact is the ONNX model it was built from (placed, not converted); the first hop ran
      it, so there is no hop of its own.
    """

    facts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    precision: dict | None = None
    runner: object | None = None
    same_graph: bool = False


# entry points are read on first use: the plugins' declaration modules may import this one
FRONTEND_GROUP = "onnxbridge.frontends"
BACKEND_GROUP = "onnxbridge.backends"
FRONTENDS = Registry.from_entry_points("frontend", FRONTEND_GROUP, contract=Frontend)
BACKENDS = Registry.from_entry_points("backend", BACKEND_GROUP, contract=Backend)


def node_kind(side: str) -> str | None:
    """What a node on one side of a hop is called (``Plugin.node_kind``): ``side`` is a hop's ``from`` or ``to``, a
    frontend's name or a backend's hop name (its ``HOP_NAME``, default its name); None where no plugin says."""
    if side in FRONTENDS.names():
        return FRONTENDS.plugin(side).node_kind
    for name in BACKENDS.names():
        plugin = BACKENDS.plugin(name)
        if plugin.node_kind and not plugin.broken and side in (name, getattr(BACKENDS.module(name), "HOP_NAME", name)):
            return plugin.node_kind
    return None


FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file size limit: the place, not the model


@contextlib.contextmanager
def native_writes(folder: Path, what: str, hint: str | None = None) -> Iterator[None]:
    """A backend's native writer (OpenVINO's serializer, coremltools' MIL file writer) writing under ``folder``:
    its errors say nothing of the system's reason ("basic_ios::clear: iostream error", "Unknown error occurred
    while writing", shutil's list of failed copies). When the block fails and ``folder`` cannot take more bytes,
    BadInputError "cannot write WHAT: <the system's reason>" (``pathchecks.writing``'s wording, with ``hint``); any
    other failure, and our own errors, are raised as they were."""
    try:
        yield
    except OnnxBridgeError:
        raise
    except Exception:
        reason = cannot_grow(folder)
        if reason is None:
            raise
        raise BadInputError(f"cannot write {what}: {reason}", hint=hint) from None


def cannot_grow(folder: Path, probe: int = 1 << 16) -> str | None:
    """Why ``folder`` cannot take more bytes (the system's reason, for a full disk, a quota or a file size limit),
    or None: it can, something else stops it, or it is gone. The largest file under it (what a writer left half
    written met the limit) grows by ``probe`` bytes, or a new file where the writer removed its files, and by one
    byte at the file size limit (sparse); then it is cut back."""
    import resource
    import tempfile

    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()] if folder.is_dir() else []
    try:
        if files:
            fd, made = os.open(max(files, key=lambda p: p.stat().st_size), os.O_WRONLY), None
        else:
            fd, made = tempfile.mkstemp(dir=folder, prefix=".onnxbridge-probe-")
        try:
            size, data = os.lseek(fd, 0, os.SEEK_END), memoryview(bytes(probe))
            try:
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
                limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
                if limit != resource.RLIM_INFINITY:
                    os.pwrite(fd, b"\0", limit)
            finally:
                os.ftruncate(fd, size)
        finally:
            os.close(fd)
            if made:
                os.unlink(made)
    except OSError as exc:
        return exc.strerror if exc.errno in FULL else None
    return None


def for_file(path) -> str | None:
    """The backend whose artifacts end like ``path`` (for inspect/validate), or None."""
    name = Path(path).name.lower()
    for backend in BACKENDS.names():
        if not BACKENDS.plugin(backend).broken and name.endswith(tuple(BACKENDS.module(backend).SUFFIXES)):
            return backend
    return None
