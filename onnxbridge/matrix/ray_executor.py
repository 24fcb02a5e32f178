"""The Ray executor: each cell a Ray task that runs it in a process of its own on its node (as the local executor
does) and streams back its record, then its folder as tar.gz chunks (a Ray streaming generator: neither end holds
the folder in memory), unpacked member by member into ``OUTDIR/<cell.name>/`` on the driver.

Without an address a local Ray is started (``num_cpus=workers``, no dashboard, no usage reporting, quiet logs) and
shut down after; with one, the run joins that cluster. A Ray session already started in this process is used as it
is and left running. Cells declare 1 CPU, a memory hint, and where the cluster has GPUs the GPUs their backend
declares (``Plugin.gpus``: TensorRT's). A task whose worker or node died is retried once (``max_retries=1``), then
the cell is an ``error``.
"""
from __future__ import annotations

import logging
import os
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from onnxbridge.errors import UnavailableError
from onnxbridge.matrix.cell import (
    cell_folder,
    clear_folder,
    describe_error,
    new_record,
    run_cell,
)
from onnxbridge.matrix.local import check_names

if TYPE_CHECKING:
    from onnxbridge.matrix.cells import Cell

RAY_HINT = "pip install 'onnxbridge[ray]'"
MEMORY_HINT = 2 * 2**30  # bytes a cell declares (capped at the largest node's)
GRACE_S = 60.0  # beyond a cell's own timeout (which its node enforces), the driver cancels the task
_IDENTITY = ("name", "model", "target", "precision", "opset", "key")
CHUNK = 4 << 20  # bytes of a cell's tar.gz per streamed object
MAX_DEPTH = 64  # folders deep a member of a cell's folder may lie; a deeper one is refused, never created


def import_ray():
    """``ray``, or UnavailableError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise UnavailableError(f"the ray executor needs Ray ({exc})", hint=RAY_HINT) from None
    return ray


def pack(folder: Path) -> Iterator[bytes]:
    """A folder's contents as tar.gz, names relative to it, in chunks of at most ``CHUNK`` bytes read back from a
    temporary file (an empty archive when the folder is missing). The folder is walked without recursion; links are
    stored as links (``unpack`` refuses them)."""
    with tempfile.TemporaryFile(prefix="onnxbridge-matrix-pack-") as f:
        with tarfile.open(fileobj=f, mode="w:gz") as tar:
            for parent, folders, files in os.walk(folder) if folder.is_dir() else ():
                folders.sort()
                for name in [*folders, *sorted(files)]:
                    path = Path(parent, name)
                    tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
        f.seek(0)
        while chunk := f.read(CHUNK):
            yield chunk


def _check_member(member: tarfile.TarInfo) -> None:
    """Refuse (ValueError) a member that would land outside the folder (an absolute name, a ``..`` part), lie more
    than ``MAX_DEPTH`` folders deep, or be anything but a file or folder (a link, a device)."""
    name = member.name
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "\\")) or PurePosixPath(name).is_absolute() or ".." in parts or not parts:
        raise ValueError(f"archive member '{name[:200]}' would land outside the cell's folder")
    if len(parts) > MAX_DEPTH:
        raise ValueError(f"archive member '{name[:200]}...' lies {len(parts)} folders deep (at most {MAX_DEPTH})")
    if not (member.isfile() or member.isdir()):
        raise ValueError(f"archive member '{name[:200]}' is not a file or folder")


def unpack(chunks: Iterable[bytes], folder: Path) -> None:
    """Replace ``folder``'s contents with the tar.gz streamed as ``chunks`` (spooled to a temporary file). Every
    member is checked (``_check_member``) before anything is written, then extracted one at a time."""
    with tempfile.TemporaryFile(prefix="onnxbridge-matrix-unpack-") as f:
        for chunk in chunks:
            f.write(chunk)
        f.seek(0)
        with tarfile.open(fileobj=f, mode="r:gz") as tar:
            for member in tar:
                _check_member(member)
            clear_folder(folder)
            for member in tar.getmembers():
                tar.extract(member, folder, filter="data")


def run_on_node(cell_dict: dict, timeout: float | None, threads: int | None) -> Iterator[dict | bytes]:
    """The Ray task (a streaming generator): the cell in a process of its own in a scratch OUTDIR on this node;
    yields its record, then its folder as tar.gz chunks (``pack``)."""
    from onnxbridge.matrix.cells import Cell
    from onnxbridge.matrix.local import run_subprocess

    cell = Cell.from_dict(cell_dict)
    with tempfile.TemporaryDirectory(prefix="onnxbridge-matrix-ray-") as tmp:
        yield run_subprocess(cell, Path(tmp), timeout, threads=threads)
        yield from pack(cell_folder(cell, Path(tmp)))


class RayExecutor:
    """Cells as Ray tasks. ``workers``: cells at once (default: a local Ray's cores, a cluster's CPUs);
    ``address``: a cluster to join (``ray.init(address=...)``), else a local Ray for the run. ``started`` and
    ``done`` are called in the thread that called ``run``; ``started`` when a task is submitted (at most
    ``workers`` are in flight, so that is when it can start)."""

    kind = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None, *,
                 memory: int = MEMORY_HINT) -> None:
        import_ray()
        self.workers = None if workers is None else max(1, int(workers))
        self.address = address
        self.memory = int(memory)

    def describe(self) -> dict:
        return {"kind": self.kind, "workers": self.workers, "address": self.address}

    def _connect(self, ray) -> bool:
        """Join or start Ray; True when this run started it (and shuts it down)."""
        if ray.is_initialized():
            return False
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        if self.address:
            ray.init(address=self.address, **quiet)
        else:
            start_local_ray(self.workers or os.cpu_count() or 1)
        return True

    def run(self, cells: Sequence[Cell], outdir: Path, done: Callable[[dict], None], *,
            started: Callable[[Cell], None] | None = None, timeout: float | None = None) -> None:
        """Run every cell; ``done(record)`` for each. An exception from a callback (or Ctrl-C) cancels the tasks in
        flight."""
        ray = import_ray()
        cells = list(cells)
        check_names(cells)
        outdir = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        owned = self._connect(ray)
        try:
            self._run(ray, cells, outdir, done, started, timeout)
        finally:
            if owned:
                ray.shutdown()

    def _run(self, ray, cells: list[Cell], outdir: Path, done, started, timeout) -> None:
        resources = ray.cluster_resources()
        slots = self.workers or max(1, int(resources.get("CPU", 1)))
        local = not self.address
        threads = max(1, (os.cpu_count() or 1) // slots) if local else None
        gpus = resources.get("GPU", 0) >= 1
        node_memory = max((n.get("Resources", {}).get("memory", 0) for n in ray.nodes() if n.get("Alive")),
                          default=0)
        memory = min(self.memory, int(node_memory)) if node_memory else self.memory
        task = ray.remote(run_on_node)
        pending = list(reversed(cells))
        inflight: dict = {}  # ref -> (cell, submitted at, deadline or None)
        try:
            while pending or inflight:
                while pending and len(inflight) < slots:
                    cell = pending.pop()
                    if started is not None:
                        started(cell)
                    if cell.skip:
                        done(run_cell(cell, outdir))
                        continue
                    ref = task.options(num_cpus=1, memory=memory or None, num_returns="streaming",
                                       num_gpus=_gpus(cell.target) if gpus else 0, max_retries=1,
                                       retry_exceptions=False, name=f"onnxbridge-matrix {cell.name}"
                                       ).remote(cell.as_dict(), timeout, threads)
                    now = time.monotonic()
                    inflight[ref] = (cell, now, None if timeout is None else now + 2 * timeout + GRACE_S)
                if not inflight:
                    continue
                deadlines = [d for _, _, d in inflight.values() if d is not None]
                wait_s = None if not deadlines else max(0.0, min(deadlines) - time.monotonic())
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=wait_s)
                for ref in ready:
                    cell, since, _ = inflight.pop(ref)
                    done(self._collect(ray, ref, cell, outdir, time.monotonic() - since))
                now = time.monotonic()
                for ref, (cell, since, deadline) in list(inflight.items()):
                    if deadline is not None and now >= deadline:
                        del inflight[ref]
                        ray.cancel(ref, force=True)
                        done(_lost(cell, outdir, f"timed out after {timeout:g} s (the Ray task did not return)",
                                   now - since))
        except BaseException:
            for ref in inflight:
                ray.cancel(ref, force=True)
            raise

    def _collect(self, ray, stream, cell: Cell, outdir: Path, seconds: float) -> dict:
        """A task's record (its first object), its folder (the rest) unpacked into OUTDIR; a task that raised or
        whose worker died (after its retry), or whose folder cannot come back, is an ``error``."""
        from ray import exceptions as rx

        try:
            record = ray.get(next(stream))
        except StopIteration:
            return _lost(cell, outdir, "the Ray task returned nothing", seconds)
        except rx.TaskCancelledError:
            return _lost(cell, outdir, "cancelled (the Ray task was stopped)", seconds)
        except (rx.WorkerCrashedError, rx.NodeDiedError, rx.LocalRayletDiedError, rx.OutOfMemoryError,
                rx.ObjectLostError, rx.OwnerDiedError) as exc:
            return _lost(cell, outdir, f"the Ray worker running it died (retried once): {describe_error(exc)}",
                         seconds)
        except rx.RayTaskError as exc:
            return _lost(cell, outdir, f"the Ray task raised {describe_error(exc.cause or exc)}", seconds)
        except rx.RayError as exc:
            return _lost(cell, outdir, f"Ray failed: {describe_error(exc)}", seconds)
        record = {**record, **{k: v for k, v in new_record(cell).items() if k in _IDENTITY}}
        try:
            unpack((ray.get(ref) for ref in stream), cell_folder(cell, outdir))
        except Exception as exc:  # noqa: BLE001 - a folder that cannot come back is this cell's error, not the run's
            return _lost(cell, outdir, f"refused the cell's folder from its Ray node: {describe_error(exc)}",
                         seconds)
        return record


def _gpus(target: str) -> int:
    """The GPUs a cell for ``target`` reserves where the cluster has some: what its backend declares
    (``Plugin.gpus``); none for a name no backend has (the cell reports that)."""
    from onnxbridge.plugins import BACKENDS

    return BACKENDS.plugin(target).gpus if target in BACKENDS.names() else 0


def _lost(cell: Cell, outdir: Path, reason: str, seconds: float) -> dict:
    """An ``error`` record for a cell whose task brought nothing back; its folder is emptied of earlier runs."""
    try:
        clear_folder(cell_folder(cell, outdir))
    except (ValueError, OSError):
        pass
    return new_record(cell, "error", reason, seconds)


def start_local_ray(workers: int) -> None:
    """A local Ray for this process: ``workers`` CPUs, no dashboard, no usage reporting, quiet logs."""
    ray = import_ray()
    before = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # nothing leaves the machine
    try:
        ray.init(num_cpus=workers, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=True)
    finally:
        if before is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = before
