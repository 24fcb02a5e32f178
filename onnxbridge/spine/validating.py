"""``validate``: a converted model or a backend's artifact against its source, on the same inputs."""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxbridge import arguments, deadline
from onnxbridge import report as reports
from onnxbridge.progress import Progress
from onnxbridge.scratch import workdir

from onnxbridge.spine.artifacts import artifact_facts
from onnxbridge.spine.hops import artifact_hop, first_hop, localize_artifact, release_sessions, source_emulation
from onnxbridge.spine.loading import load_source
from onnxbridge.spine.results import raise_for, renderer_flags, write_reports
from onnxbridge.spine.samples import used_by

if TYPE_CHECKING:
    import onnx



@deadline.bounded
def validate(source: Any, converted: "str | Path | onnx.ModelProto", inputs: Any = None, *,
             sample_inputs: Any = None, raise_on_failure: bool = False, allow_skipped: bool = False,
             timeout: float | None = None, **given: Any) -> dict:
    """Compare a converted model with its source on the same inputs; returns the report.

    ``converted``: an ONNX model (path or proto) or a backend's artifact (.mlpackage, .dlc, .engine), run by
    that backend's runner; a backend that cannot run here gives a skipped hop, never a passed one.
    ``inputs``: a .npz path, a directory of .npy files or a name -> array mapping; by default the
    source's sample inputs (or seeded random ones from its input specs). Symbolic axes of the
    converted model are also checked at a second size. The keyword arguments are the options
    ``onnxbridge.request.VALIDATE_OPTIONS`` declares (``precision``, ``atol``, ``samples``, ``report``...) and the
    frontends' (``signature``...). ``renderers``: more reports to write, as ``convert``'s.
    ``localize``: "auto" (default) finds the first diverging node of a failed hop, "on" of every hop, "off" none.
    ``raise_on_failure``: raise ValidationFailed when the hop failed, and ValidationSkipped (a ValidationFailed)
    when it did not run here (status ``skipped``), unless ``allow_skipped``. ``timeout``: as ``convert``'s.
    """
    from onnxbridge import request as requests
    from onnxbridge.localize import hops as localizing
    from onnxbridge.validation import Tolerance

    arguments.check({"source": source, "converted": converted, "inputs": inputs, "sample_inputs": sample_inputs,
                     "raise_on_failure": raise_on_failure, "allow_skipped": allow_skipped, **given},
                    required=("converted",))
    run, options = requests.split("validate", given)
    precision, report, renderers, samples, seed, latency_runs = \
        run.precision, run.report, run.renderers, run.samples, run.seed, run.latency_runs
    mode = "auto" if run.localize is True else localizing.mode_of(run.localize, "auto")
    arguments.check_paths({"the source model": source, "the converted model": converted, "--inputs": inputs},
                          {"--report": report, **renderer_flags(renderers)})
    t0 = time.perf_counter()
    tol = Tolerance.for_precision(precision, run.atol, run.rtol)
    steps = Progress(run.progress)
    with steps.step("Loading the source model"):
        src = load_source(source, sample_inputs=sample_inputs, from_=run.from_, input_shapes=run.input_shapes,
                          trust=run.trust, seed=seed, command="validate", **options)
    rep = reports.new_report("validate", source={**src.info(), "path": str(source) if isinstance(source, (str, Path)) else None},
                             frameworks=[d for d in (src.framework, src.converter) if d])
    with workdir() as scratch:
        path = Path(converted) if isinstance(converted, (str, Path)) else scratch / "converted.onnx"
        if not isinstance(converted, (str, Path)):
            path.write_bytes(converted.SerializeToString())
        from onnxbridge.plugins import for_file

        kind = for_file(path) if isinstance(converted, (str, Path)) else "onnx"
        with steps.step("Validating"):
            if kind in (None, "onnx"):
                rep["artifact"] = artifact_facts(path, "onnx")
                hop, used, _, _ = first_hop(src, path, inputs, tol, rep, samples, seed, latency_runs,
                                       emulation=source_emulation(src, source, scratch))
                make = lambda: localizing.source_to_onnx(src, path, used_by(hop, used),  # noqa: E731
                                                         localizing.tolerance_of(hop))
            else:
                hop, used = artifact_hop(src, kind, path, source, inputs, tol, rep, samples, seed, latency_runs,
                                          source_emulation(src, source, scratch))
                make = lambda: localize_artifact(src, kind, source, path, used_by(hop, used),  # noqa: E731
                                                  localizing.tolerance_of(hop))
        localizing.attach(hop, mode, make, steps)
        rep["hops"].append(hop.to_dict())
        release_sessions()
    rep["timings"] = {"total_s": round(time.perf_counter() - t0, 4)}
    reports.finish(rep, validated=True)
    write_reports(rep, report, renderers)
    if raise_on_failure:
        raise_for(rep, allow_skipped)
    return rep
