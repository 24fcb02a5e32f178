"""One matrix cell, converted in this process into ``OUTDIR/<cell.name>/``, and its result record.

``run_cell`` never raises: whatever goes wrong is the record's ``error`` with a one-line reason. The executors run
it as ``python -m onnxbridge.matrix.cell CELL_JSON OUTDIR RECORD_JSON`` (a fresh process per cell, so frameworks that
cannot share a process never meet, and a crash stays in its cell); that writes the record atomically.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnxbridge.matrix.cells import Cell

REPORT_NAME = "report.json"
LOG_NAME = "cell.log"  # what the cell's process printed (written by the executors)
_REPORT_STATUSES = ("passed", "failed", "skipped")


def new_record(cell: Cell, status: str = "error", reason: str | None = None, seconds: float = 0.0) -> dict:
    """A cell's result record (what matrix.json lists under ``cells``) with nothing run yet."""
    return {"name": cell.name, "model": cell.model, "target": cell.target, "precision": cell.precision,
            "opset": cell.opset, "status": status, "reason": reason, "cached": False, "seconds": round(seconds, 3),
            "worst": None, "report": None, "artifact": None, "key": cell.key}


def cell_folder(cell: Cell, outdir: Path) -> Path:
    """``OUTDIR/<cell.name>`` (``folder_for``)."""
    return folder_for(cell.name, outdir)


def folder_for(name: str, outdir: str | Path) -> Path:
    """``OUTDIR/<name>``, refused (ValueError) where the name would leave OUTDIR or a folder on the way below OUTDIR
    is a symbolic link: nothing of a cell's is written or read through one."""
    outdir = Path(outdir).resolve()
    folder = outdir
    for part in Path(name).parts:
        folder = folder / part
        if folder.is_symlink():
            raise ValueError(f"'{folder}' is a symbolic link; a cell's folder must be a folder of its own in {outdir}")
    folder = folder.resolve()
    if folder == outdir or outdir not in folder.parents:
        raise ValueError(f"cell name '{name}' does not name a folder inside {outdir}")
    return folder


def clear_folder(folder: Path) -> None:
    """Make ``folder`` an empty folder: what an earlier run left there (an artifact, a report calling it good) goes."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def describe_error(exc: BaseException) -> str:
    """One line: the exception's type and message (an OnnxBridgeError's hint included)."""
    from onnxbridge.errors import OnnxBridgeError, first_line

    text = exc.one_line() if isinstance(exc, OnnxBridgeError) else first_line(exc)
    text = " ".join(text.split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"


def _severity(value: Any) -> float:
    """How bad a max_abs is, for ordering: a missing or NaN one (not comparable) is the worst."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return math.inf
    return float(value)


def worst_output(report: dict) -> dict | None:
    """The output to show for a report: the failing one (in the hop that introduced the difference, the largest
    max_abs) if any hop failed, else the one with the largest max_abs. None when no output was compared."""
    introduced = report.get("introduced_by")
    failing: list[tuple[tuple, dict]] = []
    compared: list[tuple[float, dict]] = []
    for hop in report.get("hops") or ():
        name = f"{hop.get('from')} -> {hop.get('to')}"
        for out in hop.get("outputs") or ():
            entry = {"hop": name, "output": out.get("name"), "max_abs": out.get("max_abs"),
                     "max_rel": out.get("max_rel"), "cosine": out.get("cosine")}
            if out.get("passed") is False:
                failing.append(((name != introduced, -_severity(out.get("max_abs"))), entry))
            elif "max_abs" in out:
                compared.append((_severity(out.get("max_abs")), entry))
    if failing:
        return min(failing, key=lambda x: x[0])[1]
    if compared:
        return max(compared, key=lambda x: x[0])[1]
    return None


def _skipped_reason(report: dict) -> str:
    reasons = [h.get("skipped_reason") for h in report.get("hops") or () if h.get("status") == "skipped"]
    reasons = list(dict.fromkeys(r for r in reasons if r))
    if reasons:
        return "; ".join(reasons)
    return "nothing was validated" if not report.get("hops") else "not every hop was compared"


def record_from_report(cell: Cell, report: dict, outdir: Path, artifact: Path | None) -> dict:
    """Map a convert report to a record: its status (a report whose hops were skipped is skipped, never passed),
    a reason for anything but passed, the worst output and the paths relative to OUTDIR."""
    from onnxbridge.report import failure_summary

    status = report.get("status")
    record = new_record(cell, status if status in _REPORT_STATUSES else "error")
    if status == "failed":
        record["reason"] = failure_summary(report)
    elif status == "skipped":
        record["reason"] = _skipped_reason(report)
    elif status != "passed":
        record["reason"] = f"the report's status is {status!r}"
    record["worst"] = worst_output(report)
    folder = cell_folder(cell, outdir)
    report_path = folder / REPORT_NAME
    outdir = Path(outdir).resolve()
    record["report"] = report_path.relative_to(outdir).as_posix() if report_path.exists() else None
    if artifact is not None and artifact.exists() and status in _REPORT_STATUSES:
        record["artifact"] = artifact.relative_to(outdir).as_posix()
    return record


def run_cell(cell: Cell, outdir: str | Path) -> dict:
    """Convert ``cell`` in this process into ``OUTDIR/<cell.name>/`` (its artifact ``cell.output_name()`` and
    ``report.json``) and return its record. Never raises: an exception is status ``error`` with a one-line reason.
    A skipped cell (``cell.skip``) is not run. What an earlier run left in the folder is removed first, so a cell
    that ends in an error leaves no artifact that a report calls good."""
    t0 = time.perf_counter()
    outdir = Path(outdir)
    try:
        folder = cell_folder(cell, outdir)
        clear_folder(folder)
        if cell.skip:
            record = new_record(cell, "skipped", cell.skip)
        else:
            import onnxbridge

            artifact = folder / cell.output_name()
            result = onnxbridge.convert(cell.source, to=cell.target, output=artifact, precision=cell.precision,
                                        opset=cell.opset, report=folder / REPORT_NAME, **dict(cell.options))
            record = record_from_report(cell, result.report, outdir, artifact)
    except Exception as exc:  # noqa: BLE001 - the cell's error, whatever raised it: the matrix goes on
        record = new_record(cell, "error", describe_error(exc))
        with contextlib.suppress(ValueError, OSError):
            report_path = cell_folder(cell, outdir) / REPORT_NAME
            if report_path.exists():  # e.g. the blockers of an opset the model cannot be expressed at
                record["report"] = report_path.relative_to(Path(outdir).resolve()).as_posix()
    record["seconds"] = round(time.perf_counter() - t0, 3)
    return record


def _die_with_parent(every_s: float = 1.0) -> None:
    """End this process group when the process that started it goes (a killed driver or Ray worker): a cell
    runs in a session of its own, so nothing else would stop it."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(every_s)
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="onnxbridge-matrix-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """``python -m onnxbridge.matrix.cell CELL_JSON OUTDIR RECORD_JSON``: run one cell, write its record."""
    from onnxbridge.atomic import write_json
    from onnxbridge.matrix.cells import Cell

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m onnxbridge.matrix.cell CELL_JSON OUTDIR RECORD_JSON", file=sys.stderr)
        return 2
    if os.getpgrp() == os.getpid():  # started as a group of its own by an executor
        _die_with_parent()
    cell = Cell.from_dict(json.loads(Path(args[0]).read_text()))
    write_json(args[2], run_cell(cell, Path(args[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
