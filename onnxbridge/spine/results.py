"""What a run hands back and writes: ``ConversionResult``, the reports written beside the artifact, and
paths in them mapped from where the run staged them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxbridge import arguments
from onnxbridge import report as reports
from onnxbridge.atomic import write_json
from onnxbridge.errors import UnsupportedError, ValidationFailed


if TYPE_CHECKING:
    import onnx



@dataclass
class ConversionResult:
    """What ``convert`` returns: where the model is (or the model itself) and the report."""

    path: Path | None
    model: "onnx.ModelProto | None"
    report: dict

    @property
    def passed(self) -> bool:
        """True only when every hop ran and passed: a skipped hop (TensorRT without a GPU) is never a pass, and
        neither is a run that validated nothing."""
        return self.report["status"] == "passed"

    def raise_for_status(self, allow_skipped: bool = False) -> "ConversionResult":
        """Raise ValidationFailed when a hop failed, and ValidationSkipped (a ValidationFailed) when validation is
        incomplete (a hop did not run here) unless ``allow_skipped``; returns self otherwise."""
        arguments.check({"allow_skipped": allow_skipped})
        raise_for(self.report, allow_skipped)
        return self


def raise_for(rep: dict, allow_skipped: bool) -> None:
    """ValidationFailed for a failed report; ValidationSkipped for an incomplete one unless ``allow_skipped``."""
    from onnxbridge.errors import ValidationSkipped

    if rep["status"] == "failed":
        raise ValidationFailed(reports.failure_summary(rep), rep)
    if reports.incomplete(rep) and not allow_skipped:
        raise ValidationSkipped(reports.skipped_summary(rep), rep,
                                hint="allow_skipped=True (--allow-skipped) accepts an incomplete validation")


def renderer_flags(renderers: dict | None) -> dict:
    """The rendered reports' paths by the flag that names each (--junit, --markdown, --html)."""
    return {f"--{fmt}": path for fmt, path in (renderers or {}).items()}


def write_reports(rep: dict, report: str | Path | None, renderers: dict | None) -> None:
    """The JSON report, then the rendered ones (format -> path)."""
    from onnxbridge.renderers import write

    if report is not None:
        write_json(report, rep)
    for fmt, path in (renderers or {}).items():
        write(rep, path, fmt)


def map_strings(value: Any, fn) -> Any:
    """``value`` (a report: dicts, lists, strings) with ``fn`` applied to every string in it."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [map_strings(v, fn) for v in value]
    return value


def write_blocked(path: str | Path, rep: dict, model: "onnx.ModelProto", opset: int, error: str) -> None:
    """Write the report of a run the opset adapters refused, listing every blocking node."""
    from onnxbridge.adapters import check

    try:
        blockers = check(model, opset)
    except UnsupportedError as exc:  # e.g. an opset this onnx does not know
        blockers = [str(exc)]
    rep.update(status="blocked", blockers=blockers or [error])
    write_json(path, rep)
