"""``onnxbridge matrix``: many models x targets x precisions x opsets, each cell in its own process, reused when
unchanged, on a local process pool or a Ray cluster.

    import onnxbridge.matrix
    result = onnxbridge.matrix("matrix.toml", "out/", workers=4)
    result["status"], result["counts"], result["regressions"]

The journey: ``manifest.load_manifest`` -> ``cells.expand`` -> ``cache.cell_keys`` / ``cache.reusable`` -> an
executor (``executors.make_executor``) runs the rest, each cell through ``cell.run_cell`` -> regressions against a
baseline -> ``outputs.write_outputs`` (matrix.json, .xml, .md, .html).
"""
from __future__ import annotations

import math
import os
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from onnxbridge.errors import BadInputError

EXECUTORS = ("local", "ray")
STATUSES = ("passed", "failed", "error", "skipped")


def matrix(manifest: str | Path, outdir: str | Path, *, workers: int | None = None, executor: str = "local",
           ray_address: str | None = None, only: Sequence[str] = (), baseline: str | Path | None = None,
           cache: bool = True, timeout: float | None = None, progress: bool = False) -> dict:
    """Run every cell of ``manifest`` into ``outdir`` and return the matrix dict (also written as
    OUTDIR/matrix.json, .xml, .md, .html).

    ``workers``: parallel cells (default: the executor's, cores for local); ``executor``: "local" (a process pool)
    or "ray" (``ray_address``: join that cluster, else a local Ray is started and stopped); ``only``: glob patterns
    over cell names (``cnn/onnx-*``); ``baseline``: an older matrix.json: its passed cells that do not pass now are
    ``regressions``; ``cache``: reuse cells that passed with the same key; ``timeout``: seconds per cell (then
    ``error``); ``progress``: a bar on a terminal, else a line per finished cell on stderr (False: silent). Raises
    BadInputError (one line) for a bad argument, manifest, executor or baseline; a cell's failure is in its record.
    The result's ``status``: ``failed`` (a failed or error cell, or a regression), else ``skipped`` when a cell was
    skipped (not run or not compared: never a pass), else ``passed``.
    """
    from onnxbridge.matrix.cache import cell_keys, reusable, save_record
    from onnxbridge.matrix.cells import expand
    from onnxbridge.matrix.manifest import load_manifest

    only = _check_arguments(manifest, outdir, workers, executor, ray_address, only, baseline, timeout)
    started_at = time.monotonic()
    loaded = load_manifest(manifest)
    cells = expand(loaded, only)
    cells = [replace(c, key=k) for c, k in zip(cells, cell_keys(cells))]
    old = load_baseline(baseline) if baseline is not None else None
    outdir = Path(outdir)
    _check_outdir(outdir)
    outdir.mkdir(parents=True, exist_ok=True)

    records: dict[str, dict] = {c.name: skipped_record(c) for c in cells if c.skip is not None}
    records.update(reusable(outdir, cells) if cache else {})
    pending = [c for c in cells if c.name not in records]
    described = {"kind": executor, "workers": workers or (os.cpu_count() if executor == "local" else None),
                 "address": ray_address}  # what ran nothing (every cell cached or skipped)
    from onnxbridge.matrix.progress import MatrixProgress

    with MatrixProgress(len(cells), None, silent=not progress) as bar:
        for record in records.values():
            bar.finished(record)
        if pending:
            from onnxbridge.matrix.executors import make_executor

            runner = make_executor(executor, workers=workers, ray_address=ray_address)
            described = runner.describe()

            by_name = {c.name: c for c in pending}

            def done(record: dict) -> None:
                cell = by_name.get(record.get("name"))
                if cell is not None:
                    record.setdefault("key", cell.key)  # what the next run's cache matches
                    record.setdefault("cached", False)
                records[record["name"]] = record
                save_record(outdir, record)
                bar.finished(record)

            runner.run(pending, outdir, done, started=bar.started, timeout=timeout)
    for cell in pending:
        if cell.name not in records:  # an executor that lost a cell must not lose its row
            records[cell.name] = _record(cell, "error", "the executor returned no result for this cell")

    rows = [records[c.name] for c in cells]
    regressions = find_regressions(old, rows) if old is not None else []
    counts = {status: sum(r["status"] == status for r in rows) for status in STATUSES}
    bad = counts["failed"] or counts["error"] or regressions
    status = "failed" if bad else "skipped" if counts["skipped"] else "passed"  # a skipped cell is never a pass
    from onnxbridge import __version__
    from onnxbridge.matrix.outputs import MATRIX_SCHEMA_VERSION, write_outputs

    result = {"schema_version": MATRIX_SCHEMA_VERSION, "tool": {"name": "onnxbridge", "version": __version__},
              "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "manifest": str(manifest),
              "executor": described, "status": status, "counts": counts,
              "regressions": regressions, "baseline": str(baseline) if baseline is not None else None,
              "seconds": round(time.monotonic() - started_at, 3), "cells": rows}
    write_outputs(result, outdir)
    return result


def _check_arguments(manifest, outdir, workers, executor, ray_address, only, baseline, timeout) -> tuple[str, ...]:
    """Refuse (BadInputError, one line) an argument of the wrong type or value; ``only`` as a tuple of patterns."""
    for name, value, optional in (("manifest", manifest, False), ("outdir", outdir, False),
                                  ("baseline", baseline, True)):
        if not isinstance(value, (str, os.PathLike)) and not (optional and value is None):
            raise BadInputError(f"{name}={value!r} must be a path (str or os.PathLike)")
    if executor not in EXECUTORS:
        raise BadInputError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    if ray_address is not None and not isinstance(ray_address, str):
        raise BadInputError(f"ray_address={ray_address!r} must be a string")
    if ray_address and executor != "ray":
        raise BadInputError("--ray-address needs --executor ray")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise BadInputError(f"workers={workers!r} must be an int >= 1")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or not math.isfinite(timeout) or timeout <= 0):
        raise BadInputError(f"timeout={timeout!r} must be a finite number of seconds > 0")
    only = (only,) if isinstance(only, str) else () if only is None else only
    if not isinstance(only, (list, tuple)) or not all(isinstance(p, str) for p in only):
        raise BadInputError(f"only={only!r} must be a list of glob patterns (strings)")
    return tuple(only)


def _check_outdir(outdir: Path) -> None:
    """OUTDIR must be a folder, and no summary's name in it a folder: checked before any cell runs, so the summaries
    are never lost at the end."""
    from onnxbridge.matrix.outputs import OUTPUT_NAMES

    if outdir.exists() and not outdir.is_dir():
        raise BadInputError(f"-o '{outdir}' is a file; the matrix writes a folder")
    for name in OUTPUT_NAMES:
        if (outdir / name).is_dir() and not (outdir / name).is_symlink():
            raise BadInputError(f"'{outdir / name}' is a folder; the matrix writes its summary {name} there")


def _record(cell, status: str, reason: str | None) -> dict:
    """A record for a cell that was not converted (skipped, or lost by the executor)."""
    return {"name": cell.name, "model": cell.model, "target": cell.target, "precision": cell.precision,
            "opset": cell.opset, "status": status, "reason": reason, "cached": False, "seconds": 0.0,
            "worst": None, "report": None, "artifact": None, "key": cell.key}


def skipped_record(cell) -> dict:
    """The record of a cell that is not run (``cell.skip`` says why)."""
    return _record(cell, "skipped", cell.skip)


def load_baseline(path: str | Path) -> dict[str, str]:
    """Cell name -> status from an older matrix.json; a missing or malformed file (or a FIFO, a device) is
    refused."""
    from onnxbridge.matrix.cache import read_json

    data = read_json(path, "--baseline")
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                              and isinstance(r.get("status"), str) for r in cells):
        raise BadInputError(f"--baseline '{path}' is not a matrix.json (it needs \"cells\" with name and status)")
    return {r["name"]: r["status"] for r in cells}


def find_regressions(baseline: dict[str, str], rows: Sequence[dict]) -> list[str]:
    """Cells that passed in ``baseline`` and do not pass now (in the order of ``rows``); cells the baseline lacks
    or that this run did not include are not regressions."""
    return [r["name"] for r in rows if baseline.get(r["name"]) == "passed" and r["status"] != "passed"]


class _CallableModule(types.ModuleType):
    """``onnxbridge.matrix`` is both this package and its entry point: ``onnxbridge.matrix(...)`` calls
    ``matrix``, whichever of the two a caller reached first (importing the package rebinds the attribute)."""

    def __call__(self, *args, **kwargs) -> dict:
        return matrix(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["find_regressions", "load_baseline", "matrix", "skipped_record"]
