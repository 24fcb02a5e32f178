"""``check`` and ``adapt``: what blocks a model from an opset or a backend, found without converting; the
Python API's in-memory ``adapt``."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from onnxbridge import arguments, deadline, wellformed
from onnxbridge import report as reports
from onnxbridge.specs import InputSpec, TensorSpec

from onnxbridge.spine.artifacts import backend_libraries, onnx_source_info
from onnxbridge.spine.preflight import check_opset_known
from onnxbridge.spine.results import renderer_flags, write_reports

if TYPE_CHECKING:
    import onnx



def adapt(model: "str | Path | onnx.ModelProto", opset: int) -> "onnx.ModelProto":
    """``adapters.adapt`` for a model from a user (the Python API's ``onnxbridge.adapt``): vetted first, since the
    adapters hand it to onnx's C++, which crashes on malformed graphs."""
    from onnxbridge.adapters import adapt as adapt_model

    arguments.check({"model": model, "opset": opset}, required=("model", "opset"))
    wellformed.vet(model, f"'{Path(model).name}'" if isinstance(model, (str, Path)) else "the model")
    return adapt_model(model, opset)


@deadline.bounded
def check_opset(model: "str | Path | onnx.ModelProto", opset: int, *, report: str | Path | None = None,
                renderers: dict | None = None, timeout: float | None = None) -> dict:
    """Every node that blocks moving an ONNX model to ``opset``: a report with status ``passed`` or
    ``blocked`` and its ``blockers`` (nothing is converted or written but the reports)."""
    from onnxbridge.adapters import check
    from onnxbridge.onnxio import load_onnx

    arguments.check({"model": model, "opset": opset, "report": report, "renderers": renderers}, required=("opset",))
    arguments.check_paths({"the model": model}, {"--report": report, **renderer_flags(renderers)})
    proto = load_onnx(model) if isinstance(model, (str, Path)) else model
    wellformed.vet(model, f"'{Path(model).name}'" if isinstance(model, (str, Path)) else "the model")
    rep = reports.new_report("check", source=onnx_source_info(model, proto))
    rep["blockers"] = check(proto, opset)
    rep["status"] = "blocked" if rep["blockers"] else "passed"
    write_reports(rep, report, renderers)
    return rep


@deadline.bounded
def check_targets(model: "str | Path", targets: Sequence[str], *, opset: int | None = None,
                  input_shapes: Sequence[str | TensorSpec] = (), target: str | None = None,
                  report: str | Path | None = None, timeout: float | None = None) -> dict:
    """Every blocker that stops ``model`` (ONNX) from reaching each backend in ``targets`` (and ``opset`` when
    given; ``target``: a deployment target such as Core ML's iOS16), found without converting: a report with command ``check``, status ``passed`` or ``blocked``, the
    ``blockers`` (each prefixed with its target) and ``targets`` (per backend: available, reason, blockers, a hint per
    blocker or None, and the legalization ``rewrites`` its build would apply, as ``"RULE (node NAME)"``)."""
    from onnxbridge.plugins import BACKENDS, BuildContext
    from onnxbridge.hints import hint
    from onnxbridge.specs import check_names
    from onnxbridge.worker import call

    arguments.check_paths({"the model": model}, {"--report": report})
    check_opset_known(opset)
    if opset is None:
        wellformed.vet(model, f"'{Path(model).name}'")
    rep = check_opset(model, opset, report=None) if opset is not None else \
        reports.new_report("check", source=onnx_source_info(model))
    rep.setdefault("blockers", [])
    rep["blockers"] = [f"onnx@{opset}: {b}" for b in rep["blockers"]]
    spec = InputSpec.parse(input_shapes)
    check_names("--input-shape", [s.name for s in spec.shapes], [i["name"] for i in rep["source"]["inputs"]])
    context = BuildContext(target=target, inputs=spec)
    rep["targets"] = {}
    for target in targets:
        status = BACKENDS.status(target)  # also refuses an unknown name
        BACKENDS.require(target)  # a toolchain that is not installed: exit 3 with the install hint
        found, rewrites = [], []
        # in the worker: a backend's own checks run its native libraries (onnxruntime-qnn, ...)
        module = BACKENDS.plugin(target).module
        found = call(f"{module}:check", (Path(model), context), step=f"checking {Path(model).name} for {target}",
                     library=backend_libraries(target))
        if hasattr(BACKENDS.module(target), "rewrites"):
            rewrites = call(f"{module}:rewrites", (Path(model), context), library=backend_libraries(target),
                            step=f"finding the rewrites {target} needs")
        rep["targets"][target] = {"available": status["available"], "reason": status["reason"], "blockers": found,
                                  "hints": [hint(b, target) for b in found], "rewrites": rewrites}
        rep["blockers"] += [f"{target}: {b}" for b in found]
    rep["status"] = "blocked" if rep["blockers"] else "passed"
    write_reports(rep, report, None)
    return rep
