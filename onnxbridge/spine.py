"""The whole journey of a model, in order:

    source -> frontends.<framework> -> builder.finalize (opset, IR, metadata) -> fileio.save_onnx
           -> validation (per hop, against the source framework) -> report

``convert`` and ``validate`` here are the Python API; the CLI is a thin layer over them.
"""
from __future__ import annotations

import copy
import gc
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from onnxbridge import arguments, deadline, wellformed
from onnxbridge import report as reports
from onnxbridge.errors import BadInputError, OnnxBridgeError, UnsupportedError, ValidationFailed, listing
from onnxbridge.fileio import output_lock, workdir, write_json
from onnxbridge.progress import Progress
from onnxbridge.registry import dist_version
from onnxbridge.specs import DynamicAxis, InputSpec, Sample, TensorSpec, load_npz, reseed, vary_dynamic

if TYPE_CHECKING:
    import onnx

    from onnxbridge.plugins import SourceModel


DEFAULT_BACKEND = "onnx"  # what convert builds when neither --to nor the output's name says
# an exporter's warning that its trace turned a computed value into a constant (torch's TracerWarning texts)
TRACE_FROZE = re.compile(r"might cause the trace to be incorrect|registered as constants in the trace|"
                         r"trace might not generalize")


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
        _raise_for(self.report, allow_skipped)
        return self


def _raise_for(rep: dict, allow_skipped: bool) -> None:
    """ValidationFailed for a failed report; ValidationSkipped for an incomplete one unless ``allow_skipped``."""
    from onnxbridge.errors import ValidationSkipped

    if rep["status"] == "failed":
        raise ValidationFailed(reports.failure_summary(rep), rep)
    if reports.incomplete(rep) and not allow_skipped:
        raise ValidationSkipped(reports.skipped_summary(rep), rep,
                                hint="allow_skipped=True (--allow-skipped) accepts an incomplete validation")


def load_source(source: Any, *, sample_inputs: Any = None, from_: str | None = None,
                input_shapes: Sequence[str | TensorSpec] = (), dynamic: Any = None,
                input_names: Sequence[str] | None = None, trust: bool = False, seed: int = 0,
                **options: Any) -> "SourceModel":
    """Resolve a path, live object or ``module:factory`` and load it with its frontend.

    ``options`` are frontend-specific (e.g. ``signature`` for TensorFlow); ``None`` values are
    dropped, and an option the chosen frontend does not take is refused.
    """
    from onnxbridge.plugins import FRONTENDS
    from onnxbridge.sources import call_factory, is_factory, pick_frontend

    if is_factory(source) and from_ != "onnx":
        source, factory_sample = call_factory(source)
        sample_inputs = factory_sample if sample_inputs is None else sample_inputs
    spec = InputSpec.parse(input_shapes, dynamic)  # parsed values pass through unchanged
    name = pick_frontend(source, from_)
    frontend = FRONTENDS.load(name)
    options = {k: v for k, v in options.items() if v is not None and v != () and v != []}
    _refuse_foreign(FRONTENDS, name, options, f"{name} sources", "--from")
    return frontend.load(source, sample_inputs=sample_inputs, input_shapes=list(spec.shapes),
                         dynamic=list(spec.dynamic), input_names=input_names, trust=trust, seed=seed, **options)


def _samples(src: "SourceModel", inputs: Any, onnx_inputs: Sequence[TensorSpec], count: int = 1,
             seed: int = 0, *, source: Any = None, model_path: Path | None = None,
             dynamic: dict | None = None) -> list[Sample]:
    """The validation samples: user inputs (or the source's sample and ``count - 1`` more random batches
    like it), then the first with every symbolic axis of the ONNX model at a second size (``_exercise``), to catch
    sizes baked in at export; ``dynamic`` receives the hop's ``dynamic_axes`` record."""
    import numpy as np

    from onnxbridge.runtime import match_feeds

    names = [s.name for s in src.input_specs]
    if inputs is not None:
        arrays = {k: np.asarray(v) for k, v in inputs.items()} if isinstance(inputs, Mapping) else load_npz(inputs)
        _check_input_keys(arrays, names)
        first = Sample(match_feeds(names, arrays), origin=f"user inputs{f' ({inputs})' if isinstance(inputs, (str, Path)) else ''}")
    else:
        first = src.sample
    samples = [first]
    if inputs is None:
        samples += [reseed(first, seed + i) for i in range(1, count)]
    dyn = [DynamicAxis(s.name, i, d if isinstance(d, str) else None)
           for s in onnx_inputs for i, d in enumerate(s.shape) if not isinstance(d, int)]
    if dyn:
        grown, record = _exercise(src, first, dyn, source, model_path)
        if grown is not None:
            samples.append(grown)
        if dynamic is not None:
            dynamic.update(record)
    ranged = [d for d in src.dynamic if d.min is not None]
    for end in ("min", "max"):  # the requested range's ends, when given (x:0:batch:1..16)
        at_end = vary_dynamic(first, ranged, lambda d, n: getattr(d, end), f"dynamic axes at their {end}")
        if at_end is not None:
            samples.append(at_end)
    return samples


def _exercise(src: "SourceModel", first: Sample, dyn: Sequence[DynamicAxis], source: Any,
              model_path: Path | None) -> tuple[Sample | None, dict]:
    """The sample at a second size for the dynamic axes ``dyn`` (``specs.grow``: one that changes every shape shape
    inference derives from them), the first of up to ``GROWTH_TRIES`` larger candidates, then the smaller ones, that
    ``source`` (SourceOutputs; None: not tried) runs; and the hop's ``dynamic_axes`` record: the axes, the sizes
    used, whether they were exercised and why."""
    from onnxbridge.errors import first_line
    from onnxbridge.specs import GROWTH_TRIES, grow

    growth = grow(first, dyn, model_path)
    record = {"axes": [f"{d.name}:{d.axis}" for d in dyn], "sizes": [first.shapes()], "exercised": False,
              "reason": growth.reason}
    refused, why = [], None
    for sample in [*growth.candidates[:GROWTH_TRIES], *growth.smaller]:  # smaller: where no larger size runs
        error = source.fails(sample) if source is not None else None
        if error is None:
            record.update(sizes=[first.shapes(), sample.shapes()], exercised=True)
            if refused:
                record["reason"] += f"; {src.framework} does not run at {', '.join(refused)} ({why})"
            return sample, record
        refused.append("; ".join(f"{k} {'x'.join(map(str, v))}" for k, v in sample.shapes().items()))
        why = why or f"{type(error).__name__}: {first_line(error, 160)}"
    if refused:
        record["reason"] = f"{src.framework} does not run at {', '.join(refused)} ({why}); {growth.reason}"
    return None, record


def _unexercised(hop: dict, record: dict) -> None:
    """A hop that compared only at the first size when it has dynamic axes is not passed: skipped, saying why."""
    hop["dynamic_axes"] = record
    if record and not record["exercised"] and hop["status"] == "passed":
        reason = f"dynamic axes {', '.join(record['axes'])} not exercised at a second size: {record['reason']}"
        hop.update(status="skipped", passed=False, skipped_reason=reason)


def _check_input_keys(arrays: dict, names: Sequence[str]) -> None:
    """``--inputs`` arrays must be named after the model's inputs (or be np.savez's positional arr_0, arr_1, ...)."""
    positional = [f"arr_{i}" for i in range(len(names))]
    unknown = [k for k in arrays if k not in names]
    if unknown and sorted(arrays) != sorted(positional):
        raise BadInputError(f"--inputs holds array(s) {listing(unknown)} that name no input; the "
                            f"model's inputs are {listing(names)}")


def _check_dynamic(src: "SourceModel", onnx_inputs: Sequence[TensorSpec]) -> list[str]:
    """Requested dynamic axes that the exported model still fixes."""
    by_name = {s.name: s for s in onnx_inputs}
    problems = []
    for d in src.dynamic:
        spec = by_name.get(d.name)
        if spec is not None and spec.shape and isinstance(spec.shape[d.axis], int):
            problems.append(f"requested dynamic axis {d.name}:{d.axis} is fixed to {spec.shape[d.axis]} "
                            "in the exported model")
    return problems


def _let_go(src: "SourceModel") -> None:
    """``src.release()``, then a full garbage collection where the frontend lets anything go (weights held in
    reference cycles). Frontends that keep their model skip it: with torch or TF imported a collection takes
    0.3 s or more, which every small conversion paid."""
    from onnxbridge.plugins import SourceModel

    src.release()
    if type(src).release is not SourceModel.release:
        gc.collect()


def _hop(src: "SourceModel", model_path: Path, samples_from: Any, tol, report: dict, count: int = 1,
         seed: int = 0, latency_runs: int = 0, release: bool = False,
         emulation=None) -> tuple[dict, list[Sample], Any, Any]:
    """The first hop, source -> ONNX; also the samples every later hop uses, the source's outputs on them
    (computed once, shared by every hop) and the ONNX model's runner (the later hops' reference).

    ``release``: the source's outputs on every sample are computed first and the source model is let go (its
    ``release()``) before the onnxruntime session opens, so the two never hold the
    weights at once; nothing may run the source model after this hop."""
    from onnxbridge import runtime
    from onnxbridge.validation import SourceOutputs, validate_hop

    source, dynamic = SourceOutputs(src.run, _source_ran(src)), {}
    samples = _samples(src, samples_from, _onnx_inputs(model_path), count, seed, source=source,
                       model_path=model_path, dynamic=dynamic)
    report["inputs"] = {"origin": samples[0].origin, "samples": [s.shapes() for s in samples]}
    if release:
        source.prefetch(samples)
        _let_go(src)  # before the session: collecting while the worker loads it raised GPT-2's peak 1.27x -> 1.50x
    candidate = runtime.open(model_path, what=f"the onnxruntime session of {_shown(model_path)}")
    hop = validate_hop(src.frontend, "onnx", source, candidate, samples, candidate.output_names, tol, latency_runs,
                       emulation=emulation)
    hop["errors"] += _check_dynamic(src, candidate.input_specs)
    if hop["errors"]:
        hop["status"], hop["passed"] = "failed", False
    if dynamic:
        _unexercised(hop, dynamic)
    return hop, samples, source, candidate


def _source_hop(src: "SourceModel", to: str, candidate, inputs: Sequence[TensorSpec], output_names: Sequence[str],
                samples_from: Any, tol, report: dict, count: int = 1, seed: int = 0,
                latency_runs: int = 0, emulation=None, computes: str | None = None) -> tuple[dict, list[Sample], Any]:
    """Source framework -> ``candidate`` (any runner whose inputs are ``inputs``) on the validation samples."""
    from onnxbridge.validation import SourceOutputs, validate_hop

    source, dynamic = SourceOutputs(src.run, _source_ran(src)), {}
    samples = _samples(src, samples_from, inputs, count, seed, source=source, dynamic=dynamic)
    report["inputs"] = {"origin": samples[0].origin, "samples": [s.shapes() for s in samples]}
    hop = validate_hop(src.frontend, to, source, candidate, samples, output_names, tol, latency_runs,
                       emulation=emulation, computes=computes)
    if dynamic:
        _unexercised(hop, dynamic)
    return hop, samples, source


def _onnx_inputs(path: Path) -> list[TensorSpec]:
    """The ONNX model's inputs (initializers aside) as onnxruntime lists them, read from the file's graph
    (no weights read, inline ones neither: ``load_in_place``; no session)."""
    import onnx

    from onnxbridge.fileio import load_in_place

    graph = load_in_place(path).graph
    inits = {t.name for t in graph.initializer}
    specs = []
    for i in graph.input:
        if i.name in inits:
            continue
        tensor = i.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else None
        specs.append(TensorSpec(i.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                              for d in tensor.shape.dim), dtype))
    return specs


def _source_ran(src: "SourceModel") -> str:
    """What runs the source model for the references, in words."""
    version = dist_version(src.framework)
    return f"{src.framework}{' ' + version if version else ''} ({src.kind}), in {src.runs_in}"


def _shown(path: Path) -> str:
    """A path as a message names it: the file name, or 'the converted model' for onnxbridge's scratch files."""
    return "the converted model" if path.name == "model.onnx" and "onnxbridge-" in str(path.parent) else path.name


def _keep_graph(model: "onnx.ModelProto", base_dir: Path | None, scratch: Path, name: str) -> Path | None:
    """``model`` written to scratch as ``name`` beside the weights it references (or alone, where they are inline),
    for a hop of its own; None where it cannot be: over 2 GB inline, or weights outside the scratch folder."""
    if model.ByteSize() > 2**31 - 1 or (base_dir is not None and scratch not in (base_dir, *base_dir.parents)):
        return None
    path = (base_dir or scratch) / name
    path.write_bytes(model.SerializeToString())
    return path


def _emulation(path: Path):
    """A factory of the fp16 emulation of the ONNX model at ``path`` (a runner in the worker), for hops that compute
    in fp16 against it; the factory gives None where that model computes in fp16 already."""
    def make():
        from onnxbridge import runtime
        from onnxbridge.fileio import load_in_place
        from onnxbridge.fp16eval import computes_in_fp16

        if computes_in_fp16(load_in_place(path)):
            return None
        return runtime.open(path, emulate="fp16", what=f"the fp16 emulation of {_shown(path)}")
    return make


def _source_emulation(src: "SourceModel", source: Any, scratch: Path):
    """For ``validate``: a factory of the fp16 emulation a reduced-precision candidate is judged against, of the
    source itself where it is an ONNX file, else of the source's own fp32 export (made only when a hop needs it;
    None where the export fails: the hop then takes the fixed tolerance and says so)."""
    if src.frontend == "onnx" and isinstance(source, (str, Path)):
        return _emulation(Path(source))

    def make():
        from onnxbridge.errors import OnnxBridgeError
        from onnxbridge.fileio import save_onnx

        where = scratch / "emulation"
        where.mkdir(exist_ok=True)
        try:
            exported = src.export(where, opset=None)
            path = where / "source-fp32.onnx"
            save_onnx(exported.model, path, base_dir=exported.base_dir)
        except (OnnxBridgeError, RuntimeError, ValueError) as exc:
            import logging

            logging.getLogger(__name__).info("no fp32 export to emulate: %s", exc)
            return None
        return _emulation(path)()
    return make


def _keep_before_adapting(model: "onnx.ModelProto", base_dir: Path | None, scratch: Path,
                          opset: int | None) -> tuple[Path, int] | None:
    """Write the exporter's model (before the opset adapters) to scratch when they are about to run,
    so validation can tell their share of a difference from the exporter's; None when they won't run
    or the model is too big to write twice."""
    from onnxbridge.adapters import default_opset

    have = default_opset(model)
    if opset is None or have == opset:
        return None
    path = _keep_graph(model, base_dir, scratch, "exported-before-adapters.onnx")
    return (path, have) if path is not None else None


def _backend_options(to: str, options: dict) -> dict:
    """The options backends declare, taken out of ``options`` (None/empty dropped); refused where ``to`` does not
    declare them, or a choice it does not offer."""
    from onnxbridge.plugins import BACKENDS

    given = {k: options.pop(k) for k in BACKENDS.options() if k in options}
    given = {k: v for k, v in given.items() if v is not None and v != () and v != []}
    _refuse_foreign(BACKENDS, to, given, f"--to {to}", "--to")
    return given


def _refuse_foreign(registry, name: str, given: dict, what: str, selector: str) -> None:
    """Refuse (exit 2) an option of ``given`` that plugin ``name`` does not declare, naming the plugins that do, and
    a choice it does not offer."""
    declared = registry.options()
    mine = {o.name: o for o in registry.plugin(name).options}
    for key, value in given.items():
        flag = "--" + key.replace("_", "-")
        if key not in mine:
            takers = ", ".join(f"{selector} {p}" for p in declared.get(key, {}))
            raise BadInputError(f"{flag} does not apply to {what}" + (f" (it applies to {takers})" if takers else ""))
        option = mine[key]
        if option.kind == "choice" and value not in option.choices:
            raise BadInputError(f"{flag} {value} does not apply to {what}; its choices: {', '.join(option.choices)}")


def _check_precision(to: str, backend, precision: str) -> None:
    """Refuse a precision the target does not apply (each backend declares ``PRECISIONS``, and may say what to do
    instead in ``PRECISION_HINTS``)."""
    declared = tuple(backend.PRECISIONS)
    if precision not in declared:
        hint = getattr(backend, "PRECISION_HINTS", {}).get(precision)
        raise BadInputError(f"--precision {precision} is not applied by --to {to} (it applies "
                            f"{', '.join(declared) or 'none'})", hint=hint)


def _check_opset(opset: int | None) -> None:
    """An opset beyond what the installed onnx defines is refused for every source (its checker and IR table are
    what vouch for the file)."""
    if opset is None:
        return
    import onnx

    from onnxbridge.adapters import MIN_OPSET, max_known_opset

    known = max_known_opset()
    if opset > known:
        raise BadInputError(f"--opset {opset} is newer than the installed onnx {onnx.__version__} defines (opsets up "
                            f"to {known}); the ONNX checker and IR version table cannot vouch for it",
                            hint=f"use --opset {known} or lower, or install a newer onnx")
    if opset < MIN_OPSET:
        raise BadInputError(f"--opset {opset} is below {MIN_OPSET}, the oldest opset onnxbridge delivers")


def _library(name: str) -> str:
    """The distributions behind a backend, with versions, for crash messages."""
    from onnxbridge.plugins import BACKENDS

    plugin = BACKENDS.plugin(name)
    found = [f"{d} {dist_version(d)}" for d in (*plugin.requires, *plugin.any_of) if dist_version(d)]
    return ", ".join(found) or name


def _hop_name(backend: str) -> str:
    """What a backend's hop is called (its ``to``): what really runs, e.g. the DLC's ``qnn-htp-simulator``."""
    from onnxbridge.plugins import module_of

    return getattr(module_of(backend), "HOP_NAME", backend)


def _open_backend_runner(name: str, spec_or_skip, artifact: Path, onnx_path: Path | None):
    """The backend's runner in the worker: the one its build described, else ``runner(artifact)``; raises
    HopSkipped where it cannot run here and ArtifactMismatch where the artifact is not the graph it claims."""
    from onnxbridge.plugins import BACKENDS
    from onnxbridge.errors import HopSkipped
    from onnxbridge.worker import RunnerSpec, open_runner

    if isinstance(spec_or_skip, HopSkipped):
        raise spec_or_skip
    spec = spec_or_skip or RunnerSpec(f"{BACKENDS.plugin(name).module}:runner",
                                      {"path": str(artifact), "onnx_path": str(onnx_path) if onnx_path else None},
                                      library=_library(name))
    if not spec.library:
        spec = RunnerSpec(spec.factory, spec.kwargs, _library(name))
    return open_runner(spec, f"the {name} runner of {artifact.name}")


def _backend_hop(name: str, reference, onnx_path: Path, artifact: Path, samples: list[Sample], tol,
                 built_runner=None, source=None, latency_runs: int = 0, precision: str = "fp32") -> dict:
    """The backend's hop: onnxruntime on the ONNX model it was built from against the backend's runner (or the
    one its build described), judged by what the backend computes (its runner's ``compute_precision``, else the
    ``precision`` it applied; fp16 against the fp16 emulation of that ONNX model). A backend that cannot run here
    gives a skipped hop that says why; an artifact that is not the graph it claims gives a failed one."""
    from onnxbridge.errors import ArtifactMismatch, HopSkipped
    from onnxbridge.validation import failed_hop, skipped_hop, validate_hop

    try:
        candidate = _open_backend_runner(name, built_runner, artifact, onnx_path)
    except HopSkipped as exc:
        return skipped_hop("onnx", _hop_name(name), samples, tol, exc.one_line())
    except ArtifactMismatch as exc:
        return failed_hop("onnx", _hop_name(name), samples, tol, exc.one_line())
    return validate_hop("onnx", _hop_name(name), reference, candidate, samples, reference.output_names, tol,
                        latency_runs, source=source, emulation=_emulation(onnx_path), computes=precision)


def _onnx_hop(before: tuple[Path, int], got, opset: int, samples: list[Sample], tol, source=None) -> dict:
    """The adapters' hop: the exporter's ONNX model against the adapted one (``got``, its runner; at ``opset``),
    on the same samples."""
    from onnxbridge import runtime
    from onnxbridge.validation import validate_hop

    path, have = before
    ref = runtime.open(path, what="the onnxruntime session of the exporter's model (before the opset adapters)")
    return validate_hop(f"onnx@{have}", f"onnx@{opset}", ref, got, samples, got.output_names, tol, source=source)


@deadline.bounded
def convert(source: Any, sample_inputs: Any = None, *, to: str | None = None, output: str | Path | None = None,
            opset: int | None = None, dynamic: Any = None, validate: bool = True, inputs: Any = None,
            input_shapes: Sequence[str | TensorSpec] = (), input_names: Sequence[str] | None = None,
            output_names: Sequence[str] | None = None, exporter: str = "auto", from_: str | None = None,
            trust: bool = False, precision: str = "fp32", atol: Any = None, rtol: Any = None, samples: int = 1,
            latency_runs: int = 0, seed: int = 0, external_data: bool | None = None, report: str | Path | None = None,
            progress: bool = False, target: str | None = None, renderers: dict | None = None,
            localize: bool | str | None = None, optimize: bool | str = False, timeout: float | None = None,
            **options: Any) -> ConversionResult:
    """Convert ``source`` to ONNX at exactly ``opset``, write it atomically and validate it.

    ``source``: a live model (nn.Module, ExportedProgram, ScriptModule, ModelProto), a file path, or
    ``"file.py:factory"`` / ``"pkg.mod:factory"`` returning ``model`` or ``(model, sample_inputs)``.
    Returns a ConversionResult whose ``report`` says whether the numbers held (it never raises for a
    numeric mismatch; call ``raise_for_status()`` for that). With ``output=None`` the model is returned
    in memory as ``.model``. ``to``: the backend (default: the one whose artifacts end like ``output``, else
    "onnx"); ``"coreml"`` (``.mlpackage``), ``"dlc"``, ``"tensorrt"`` (``.engine``),
    ``"openvino"`` (``.xml``) or any installed backend builds that backend's artifact from the ONNX model
    (``target``: a deployment target, e.g. "iOS16") and validates it as a hop of its own. Plugin options go in
    ``options`` under the names the plugins declare (``onnxbridge convert --help`` shows them; e.g. ``shapes``,
    ``workspace``, ``calibration``, ``allow_approx``, ``signature``). ``precision="fp16"`` writes an fp16 model
    (fp32 inputs and outputs; Core ML: fp16 compute) and validates with the fp16 tolerances. ``renderers``: more
    reports to write, format (junit, markdown, html) -> path. No output may name another or an input's file.
    ``localize``: on a failed hop, find the first node whose output diverges (``hop["localization"]``): True or
    "auto" for failed hops, "on" for every hop, False/None (default) for none. ``optimize``: simplify the graph
    (onnxbridge.optimize: True or "default", or "basic") and validate the result against the unoptimized graph as a
    hop of its own (``artifact["optimization"]`` records what was removed). ``timeout``: seconds the whole call may
    take (default ``ONNXBRIDGE_TIMEOUT_S``, else 3600; 0: no limit), then TimedOut (exit 2) naming the step.
    """
    arguments.check({**locals(), **options})
    run = _Conversion.plan(source, sample_inputs, to=to, output=output, opset=opset, dynamic=dynamic,
                           validate=validate, inputs=inputs, input_shapes=input_shapes, input_names=input_names,
                           output_names=output_names, exporter=exporter, from_=from_, trust=trust,
                           precision=precision, atol=atol, rtol=rtol, samples=samples, latency_runs=latency_runs,
                           seed=seed, external_data=external_data, report=report, progress=progress, target=target,
                           renderers=renderers, localize=localize, optimize=optimize, options=options)
    return run.run()


@dataclass
class _Conversion:
    """One ``convert`` run as its stages: load, export, finalize, optimize (``--optimize``), fp16 (``--precision
    fp16`` to ONNX), write, build, validate, localize (``--localize``), report. Each stage is a method; ``_stage``
    shows its progress line and times it (the report's ``timings``: ``load_s``, ``export_s``, ``build_s`` for
    finalize, ``optimize_s``, ``write_s``, ``backend_s`` for build, ``validate_s``, ``localize_s``, and
    ``total_s``; fp16 is not timed apart)."""

    source: Any
    sample_inputs: Any
    to: str
    backend: Any  # the backend module (onnxbridge.plugins.Backend)
    out_path: Path | None
    opset: int | None
    validate: bool
    inputs: Any
    spec: InputSpec
    input_names: Sequence[str] | None
    output_names: Sequence[str] | None
    exporter: str
    from_: str | None
    trust: bool
    precision: str
    tol: Any
    samples: int
    latency_runs: int
    seed: int
    external_data: bool | None
    report_path: str | Path | None
    renderers: dict | None
    target: str | None
    calibration: Any
    frontend_options: dict
    backend_options: dict
    steps: Progress
    localize: str = "off"
    inferred: str | None = None  # how ``to`` was chosen when not given (a note)
    optimize: str | None = None  # the optimizer's level, None for none
    optimization: dict | None = None  # what the optimizer removed (artifact["optimization"])
    timings: dict = field(default_factory=dict)
    staged: Path | None = None  # where the artifact is built and validated before ``deliver`` places it at -o
    planned_notes: list = field(default_factory=list)  # notes decided by ``plan``, added to the report at load

    @classmethod
    def plan(cls, source: Any, sample_inputs: Any, *, to: str, output, opset, dynamic, validate, inputs,
             input_shapes, input_names, output_names, exporter, from_, trust, precision, atol, rtol, samples,
             latency_runs, seed, external_data, report, progress, target, renderers, localize, options: dict,
             optimize: bool | str = False) -> "_Conversion":
        """Everything refused before any work: unknown backend, foreign options, precision, target, opset, paths."""
        from onnxbridge.localize.hops import mode_of
        from onnxbridge.plugins import BACKENDS
        from onnxbridge.sources import is_factory
        from onnxbridge.validation import Tolerance

        mode = "auto" if localize is True else mode_of(localize, "off")
        inferred, chosen = None, to is not None
        if to is None:  # the backend whose artifacts end like -o (an .mlpackage is Core ML), else the default
            from onnxbridge.plugins import for_file

            to = (for_file(output) if output is not None else None) or DEFAULT_BACKEND
            if to != DEFAULT_BACKEND:
                inferred = f"--to {to}: inferred from the output's name ({Path(output).name})"
        backend = BACKENDS.load(to)
        options = dict(options)
        backend_options = _backend_options(to, options)
        calibration = backend_options.pop("calibration", None)
        if "allow_approx" in backend_options:
            from onnxbridge.legalize.approx import check_names

            backend_options["allow_approx"] = check_names(backend_options["allow_approx"])
        onnx_artifact = getattr(backend, "ONNX_ARTIFACT", False)
        if output is None and not onnx_artifact:
            raise BadInputError(f"--to {to} needs an output path ({', '.join(backend.SUFFIXES)})")
        if output is not None and not onnx_artifact and not str(output).endswith(tuple(backend.SUFFIXES)):
            raise BadInputError(f"a {to} output must end with {' or '.join(backend.SUFFIXES)}")
        _check_target(to, backend, target)
        _check_precision(to, backend, precision)
        _check_opset(opset)
        spec = InputSpec.parse(input_shapes, dynamic)
        kept = _check_dynamic_kept(to, backend, spec)
        tol = Tolerance.for_precision(precision, atol, rtol)
        out_path = Path(output) if output is not None else None
        factory_file = source.rpartition(":")[0] if is_factory(source) else None
        beside = {f"-o's {p.name}": p for p in _companions(backend, out_path)} if out_path is not None else {}
        arguments.check_paths({"the source model": source, "the source's factory file": factory_file,
                               "--inputs": inputs, "--calibration": calibration},
                              {"-o": output, **beside, "--report": report,
                               "--timing-cache": backend_options.get("timing_cache"), **_renderer_flags(renderers)})
        if out_path is not None and onnx_artifact and not out_path.name.lower().endswith(tuple(backend.SUFFIXES)):
            _refuse_suffix(to, backend, out_path, chosen)
        run = cls(source, sample_inputs, to, backend, out_path, opset, validate, inputs, spec, input_names,
                  output_names, exporter, from_, trust, precision, tol, samples, latency_runs, seed, external_data,
                  report, renderers, target, calibration, options, backend_options, Progress(progress), mode, inferred,
                  ("default" if optimize is True else optimize) or None)
        run.planned_notes += kept
        return run

    @contextmanager
    def _stage(self, key: str | None, title: str):
        """A stage's progress line and its time, as ``timings[KEY_s]``."""
        with self.steps.step(title):
            t = time.perf_counter()
            yield
            if key is not None:
                self.timings[f"{key}_s"] = time.perf_counter() - t

    def run(self) -> ConversionResult:
        t0 = time.perf_counter()
        in_memory = None
        with output_lock(self.out_path):
            src = self.load()
            if self.validate:
                from onnxbridge.worker import prewarm

                prewarm()  # the worker imports onnxruntime while the exporter runs
            with workdir() as scratch, self._staging():
                exported = self.export(src, scratch)
                if not self.validate:
                    _let_go(src)  # nothing runs the source model again: its weights can go now
                model, base_dir, before = self.finalize(src, exported, scratch)
                model, unoptimized = self.optimize_graph(model, base_dir, scratch)
                model, full = self.reduce_precision(model, base_dir, scratch)
                dest = self.write(model, base_dir, scratch)
                del model
                reference, built = self.build(src, dest, scratch)
                if self.validate:
                    self.check(src, reference, before, built, unoptimized, full)
                if self.out_path is None:
                    from onnxbridge.fileio import load_onnx

                    in_memory = load_onnx(dest, load_external_data=True)
                _release()
                self.timings["total_s"] = time.perf_counter() - t0
                self.rep["timings"] = {k: round(v, 4) for k, v in self.timings.items()}
                reports.finish(self.rep, validated=self.validate)
                self.deliver()
        return ConversionResult(self.out_path, in_memory, self.rep)

    @contextmanager
    def _staging(self):
        """A folder beside -o, named for this run, where the artifact is written, built and validated
        (``self.staged``); ``deliver`` places it. Removed after, whatever happened: a run that fails or is killed
        leaves the output as it was (a later run removes a killed run's folder)."""
        import shutil

        from onnxbridge.fileio import staging_folder, writing

        if self.out_path is None:
            yield
            return
        with writing(self.out_path):
            folder = staging_folder(self.out_path)
        self.staged = folder / self.out_path.name
        try:
            yield
        except OnnxBridgeError as exc:  # a message names the output, not the folder it was built in
            text = str(exc)
            shown = self._outside(text)
            if shown == text:
                raise
            renamed = copy.copy(exc)
            renamed.args = (shown, *exc.args[1:])
            raise renamed from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _outside(self, text: str) -> str:
        """``text`` with the staging folder's paths as the output's (messages and reports name where files go)."""
        folder = self.staged.parent
        beside = "" if str(self.out_path.parent) == "." else str(self.out_path.parent) + os.sep
        for staged, out in ((self.staged, self.out_path), (folder.resolve() / self.staged.name, self.out_path.resolve())):
            text = text.replace(str(staged), str(out))
        return text.replace(str(folder.resolve()) + os.sep, str(self.out_path.parent.resolve()) + os.sep) \
            .replace(str(folder) + os.sep, beside)

    def deliver(self) -> None:
        """Put the validated artifact and its reports in place, so a path never holds a model its report does not
        describe: the old reports go first, then the artifact's files (external data and companions before the
        file that names them), then the new reports. Run by the process holding the output's lock, never by the
        worker, which only writes into the staging folder."""
        from onnxbridge.fileio import place, place_onnx, writing

        if self.out_path is not None:
            self.rep = _map_strings(self.rep, self._outside)
            for old in [self.report_path, *(self.renderers or {}).values()]:
                if old is not None and Path(old).is_file():
                    with writing(old):
                        Path(old).unlink()
            if getattr(self.backend, "ONNX_ARTIFACT", False):
                place_onnx(self.staged, self.out_path, self.rep["artifact"]["external_data"])
            else:
                for companion in _companions(self.backend, self.staged):
                    if companion.exists():
                        place(companion, self.out_path.parent / companion.name)
                place(self.staged, self.out_path)
        _write_reports(self.rep, self.report_path, self.renderers)

    def load(self) -> "SourceModel":
        """Load the source with its frontend; every name the user gave is checked against what it loaded."""
        with self._stage("load", "Loading the source model"):
            src = load_source(self.source, sample_inputs=self.sample_inputs, from_=self.from_,
                              input_shapes=self.spec.shapes, dynamic=list(self.spec.dynamic),
                              input_names=self.input_names, trust=self.trust, seed=self.seed,
                              **self.frontend_options)
        _check_loaded_names(src, self.input_names, self.spec)
        source_info = {**src.info(), "path": str(self.source) if isinstance(self.source, (str, Path)) else None}
        self.rep = reports.new_report("convert", source=source_info,
                                      frameworks=[d for d in (src.framework, src.converter) if d])
        if self.inferred:
            self.rep["notes"].append(self.inferred)
        self.rep["notes"] += self.planned_notes
        return src

    def export(self, src: "SourceModel", scratch: Path):
        with self._stage("export", f"Exporting {src.kind} to ONNX"):
            exported = src.export(scratch, opset=self.opset, output_names=self.output_names, exporter=self.exporter)
        self.rep["notes"] += exported.notes
        self.rep["warnings"] += exported.warnings
        _check_exported_names(src, exported.model, self.output_names, self.tol)
        return exported

    def finalize(self, src: "SourceModel", exported, scratch: Path):
        """The builder's pass (opset, IR, metadata) and the precisions the backend wants in the ONNX model itself;
        also the exporter's model kept for the adapters' hop. Returns (model, base_dir, before)."""
        from onnxbridge import builder
        from onnxbridge.fileio import detach_weights

        with self._stage("build", "Building the ONNX model"):
            model, base_dir = detach_weights(exported.model, exported.base_dir, scratch)
            del exported.model
            before = _keep_before_adapting(model, base_dir, scratch, self.opset) \
                if self.validate and src.frontend != "onnx" else None
            try:
                model, notes = builder.finalize(model, opset=self.opset, source={
                    "source_framework": src.framework, "source_framework_version": dist_version(src.framework),
                    "exporter": exported.exporter})
            except UnsupportedError as exc:  # say what the export already tried, and record every blocker
                if self.report_path is not None and self.opset is not None:
                    _write_blocked(self.report_path, self.rep, model, self.opset, str(exc))
                if not exported.notes:
                    raise
                raise UnsupportedError(f"{exc} [{'; '.join(exported.notes)}]", hint=exc.hint) from None
            self.rep["notes"] += notes
        return model, base_dir, before

    def reduce_precision(self, model: "onnx.ModelProto", base_dir: Path | None, scratch: Path
                         ) -> tuple["onnx.ModelProto", Path | None]:
        """The precisions the backend wants in the ONNX model itself (``ONNX_PRECISIONS``: fp16 weights and
        compute); also the fp32 graph kept in scratch for the hops (None when nothing is reduced or validated):
        the first hop checks the export in fp32, and a hop of its own the fp16 model against it."""
        if self.precision not in getattr(self.backend, "ONNX_PRECISIONS", ()):
            return model, None
        from onnxbridge.precision import to_fp16

        kept = _keep_graph(model, base_dir, scratch, "before-fp16.onnx") if self.validate else None
        if self.validate and kept is None:
            self.rep["notes"].append("the fp32 graph could not be kept for a hop of its own (over 2 GB, or its "
                                     "weights live outside the scratch folder): the first hop checks the fp16 model "
                                     "against the source at the fixed fp16 tolerance")
        with self._stage(None, "Converting to fp16"):
            model = to_fp16(model, base_dir=base_dir)
        self.rep["notes"].append("weights and compute in fp16; inputs and outputs stay fp32 (Casts at the edges)")
        return model, kept

    def optimize_graph(self, model: "onnx.ModelProto", base_dir: Path | None, scratch: Path
                       ) -> tuple["onnx.ModelProto", Path | None]:
        """``--optimize``: the simplified graph, and the unoptimized one kept in scratch for its hop (None when
        nothing is optimized or validated). Its weights stay where they are (external data is referenced)."""
        if self.optimize is None:
            return model, None
        from onnxbridge.optimize import optimize_model

        with self._stage("optimize", "Optimizing the graph"):
            kept = _keep_graph(model, base_dir, scratch, "before-optimize.onnx") if self.validate else None
            if self.validate and kept is None:
                self.rep["notes"].append("the graph before --optimize could not be kept for a hop of its own "
                                         "(its weights live outside the scratch folder): the first hop checks "
                                         "the optimized graph")
            model, record = optimize_model(model, level=self.optimize, base_dir=base_dir)
        self.optimization = record
        self.rep["notes"].append(f"--optimize ({record['level']}, {record['library']}): {record['before']} nodes -> "
                                 f"{record['after']}")
        return model, kept

    def write(self, model: "onnx.ModelProto", base_dir: Path | None, scratch: Path) -> Path:
        """The ONNX model every backend builds from: in the scratch folder, or at the output itself where the
        backend's artifact is that ONNX model (``ONNX_ARTIFACT``: written once, where it stays)."""
        from onnxbridge import builder
        from onnxbridge.fileio import save_onnx

        at_output = self.out_path is not None and getattr(self.backend, "ONNX_ARTIFACT", False)
        dest = self.staged if at_output else scratch / "model.onnx"
        with self._stage("write", f"Writing {dest.name}"):
            # the weights in this run's scratch folder are linked to the output, not copied, where they can be
            files = save_onnx(model, dest, base_dir=base_dir, external_data=self.external_data,
                              check=builder.check_file,
                              movable=base_dir is not None and scratch in (base_dir, *base_dir.parents))
        self.rep["artifact"] = _artifact(dest, "onnx", model, files)
        if at_output:
            self.rep["artifact"]["path"] = str(self.out_path)
        if self.optimize is not None:
            self.rep["artifact"]["optimization"] = self.optimization
        return dest

    def build(self, src: "SourceModel", dest: Path, scratch: Path):
        """The backend's build from the written ONNX model, in the worker. Returns the ONNX model the hops use as
        their reference (the artifact itself where the build placed that graph) and the BuildResult (None when
        nothing was built: no output path)."""
        from onnxbridge.plugins import BuildContext, BuildResult
        from onnxbridge.worker import RelayedProgress, call

        if self.out_path is None:
            return dest, None
        context = BuildContext(target=self.target, inputs=self.spec.with_dynamic(src.dynamic),
                               sample_shapes={k: tuple(v.shape) for k, v in src.sample.feeds.items()},
                               calibration=load_npz(self.calibration) if self.calibration is not None else None,
                               workdir=scratch, progress=RelayedProgress(self.steps.enabled))
        files = [self.staged, *_companions(self.backend, self.staged)]
        with self._stage("backend", f"Building the {self.to} model"):
            built = call(f"{self.backend.__name__}:build", (dest, self.staged),
                         {"target": self.target, "precision": self.precision, "context": context,
                          **self.backend_options},
                         step=f"building the {self.to} model {self.out_path.name}", library=_library(self.to),
                         progress=self.steps)
            if not isinstance(built, BuildResult):
                raise TypeError(f"backend '{self.to}': build() returned {type(built).__name__}, not a BuildResult")
        self.rep["warnings"] += built.warnings
        drawn = _random_calibration(self.calibration) if self.precision == "int8" else None
        if drawn:
            self.rep["warnings"].append(drawn)
        self.rep["notes"] += built.notes
        artifact = {**self.rep["artifact"], "path": str(self.out_path), "format": self.to,
                    "bytes": sum(_size(f) for f in files if f.exists())}
        if not built.same_graph:
            artifact["backend"] = built.facts
        if built.precision:
            artifact["precision"] = {"requested": self.precision, **built.precision}
        self.rep["artifact"] = artifact
        return (self.staged if built.same_graph else dest), built

    def check(self, src: "SourceModel", reference: Path, before, built, unoptimized: Path | None = None,
              full: Path | None = None) -> None:
        """The hops: source -> the ONNX model (in fp32: the graph before fp16 where ``full`` kept it); the
        adapters' (when they ran: the exporter's model against theirs); the optimizer's (with --optimize: the graph
        before it against the optimized one); the fp16 model's against that fp32 graph (``full``); and the
        backend's (unless its artifact is the ONNX model the first hop ran). The later hops tell which step made a
        difference the first hop found; each is judged by what its candidate computes."""
        from onnxbridge import runtime
        from onnxbridge.localize import hops as localizing
        from onnxbridge.validation import validate_hop

        graph = full or reference  # the fp32 graph the first hop checks
        opset = self.rep["artifact"]["opset"]
        count = self.samples
        if self.inputs is None and count < 2 and not src.dynamic and \
                any(TRACE_FROZE.search(w) for w in self.rep["warnings"]):
            # the export's own sample cannot show a value the trace froze: one more batch can (with --dynamic, the
            # batch at the second size is one)
            count = 2
            self.rep["notes"].append("the exporter warned that its trace may have frozen a value: validated on one "
                                     "more random batch besides the sample it traced")
        with self._stage("validate", "Validating against the source framework"):
            # the source model is let go before onnxruntime loads the weights, unless localization or latency
            # figures will run it again
            hop, used, source, onnx_runner = _hop(src, graph, self.inputs, self.tol, self.rep, count,
                                                  self.seed, self.latency_runs,
                                                  release=self.localize == "off" and not self.latency_runs)
            self.rep["hops"].append(hop)
            adapted = onnx_runner if unoptimized is None else \
                runtime.open(unoptimized, what="the onnxruntime session of the graph before --optimize")
            if before is not None:  # attribute a difference to the exporter or to the opset adapters
                self.rep["hops"].append(_onnx_hop(before, adapted, opset, used, self.tol, source))
            if unoptimized is not None:  # or to the optimizer
                self.rep["hops"].append(validate_hop(f"onnx@{opset}", f"onnx@{opset}:optimized", adapted, onnx_runner,
                                                     used, onnx_runner.output_names, self.tol, source=source))
            del adapted
            if full is not None:  # the fp16 model as written, against the fp32 graph and its fp16 emulation
                written = runtime.open(reference, what=f"the onnxruntime session of {_shown(reference)}")
                self.rep["hops"].append(validate_hop(
                    f"onnx@{opset}", f"onnx@{opset}:{self.precision}", onnx_runner, written, used,
                    onnx_runner.output_names, self.tol, self.latency_runs, source=source, emulation=_emulation(full),
                    computes=self.precision))
                del written
            if built is not None and not built.same_graph:
                self.rep["hops"].append(_backend_hop(self.to, onnx_runner, reference, self.staged, used, self.tol,
                                                     built.runner, source, self.latency_runs, self.precision))
            del onnx_runner
        if self.localize == "off":
            return
        with self._stage("localize", "Localizing"):
            first, *later = self.rep["hops"]
            mapped_on = before[0] if before is not None else None
            localizing.attach(first, self.localize, lambda: localizing.source_to_onnx(
                src, graph, _used_by(first, used), localizing.tolerance_of(first), mapped_on), self.steps)
            for h in later:
                if h["to"].endswith(":optimized"):
                    localizing.attach(h, self.localize, lambda h=h: localizing.onnx_to_onnx(
                        unoptimized, graph, _used_by(h, used), localizing.tolerance_of(h)), self.steps)
                elif h["to"].endswith(f":{self.precision}") and full is not None:
                    localizing.attach(h, self.localize, lambda h=h: localizing.onnx_to_onnx(
                        full, reference, _used_by(h, used), localizing.tolerance_of(h)), self.steps)
                elif before is not None and h["from"].startswith("onnx@"):
                    localizing.attach(h, self.localize, lambda h=h: localizing.onnx_to_onnx(
                        before[0], unoptimized or graph, _used_by(h, used), localizing.tolerance_of(h)),
                        self.steps)
                else:
                    localizing.attach(h, self.localize, lambda h=h: localizing.onnx_to_backend(
                        self.to, reference, self.staged, _used_by(h, used), localizing.tolerance_of(h)), self.steps)


def _random_calibration(calibration: Any) -> str | None:
    """The warning that int8 ranges come from random data: ``--calibration`` is an .npz ``onnxbridge inputs`` drew at
    random (marked in the file); None otherwise."""
    if calibration is None:
        return None
    from onnxbridge.inputfile import random_origin

    drawn = random_origin(calibration)
    if drawn is None:
        return None
    return (f"int8 calibrated from random data: --calibration {Path(calibration).name} holds {drawn}; int8 ranges "
            "from random batches may not fit real inputs, and the verdict is only as good as them (calibrate on real "
            "inputs)")


def _localize_artifact(src: "SourceModel", kind: str, source: Any, artifact: Path, samples: list[Sample], tol) -> dict:
    """Source -> a backend artifact: localized where the source is the ONNX model it was built from (its nodes name
    the artifact's intermediates); from a framework, there is no ONNX graph between them to name nodes by."""
    from onnxbridge.localize import hops as localizing

    if src.frontend != "onnx" or not isinstance(source, (str, Path)):
        return {"skipped": f"no ONNX model between the {src.frontend} source and the {kind} artifact to name nodes "
                           "by: validate the artifact against the ONNX model it was built from", "method": "none"}
    return localizing.onnx_to_backend(kind, Path(source), artifact, samples, tol)


def _used_by(hop: dict, samples: list[Sample]) -> list[Sample]:
    """The samples a hop compared on (a runner with static shapes takes only some)."""
    shapes = hop.get("sample_shapes") or []
    return [s for s in samples if s.shapes() in shapes] or list(samples)


def _refuse_suffix(to: str, backend, output: Path, chosen: bool) -> None:
    """An output the backend's files cannot be called: with ``--to`` given, its suffixes; without, no installed
    backend claims the name (the ONNX file would be written under a name that says otherwise, e.g. ``.tflite``)."""
    if chosen:
        raise BadInputError(f"-o {output.name}: --to {to} writes files ending with {' or '.join(backend.SUFFIXES)}")
    raise BadInputError(f"-o {output.name}: no installed backend writes files named like that; the backends and "
                        f"their suffixes: {installed_suffixes()}",
                        hint="end -o with the suffix of the format you want")


def installed_suffixes() -> str:
    """The installed backends and the suffixes of their files, in words: ``onnx (.onnx), coreml (.mlpackage), ...``."""
    from onnxbridge.plugins import BACKENDS, module_of

    return ", ".join(f"{n} ({', '.join(module_of(n).SUFFIXES)})" for n in BACKENDS.names()
                     if not BACKENDS.plugin(n).broken)


def dynamic_not_kept(to: str, backend, spec: InputSpec) -> tuple[list[DynamicAxis], str] | None:
    """The ``--dynamic`` axes that ``to`` cannot keep, and the hint: a backend whose models have static shapes
    (its module declares ``KEEPS_DYNAMIC = False``: a DLC) would fix them at the sample's size; ``--input-shape``
    fixing that input's size is the way (the rule ``check --targets`` applies: dynamic dims without
    ``--input-shape`` block). None when nothing is lost."""
    if getattr(backend, "KEEPS_DYNAMIC", True):
        return None
    fixed = spec.fixed()
    lost = [d for d in spec.dynamic if d.name not in fixed]
    if not lost:
        return None
    names = list(dict.fromkeys(d.name for d in lost))
    return lost, (f"fix the size with --input-shape {names[0]}:D1,D2,... instead; `onnxbridge check --targets {to}` "
                  "applies the same rule")


def _axes_text(axes: Sequence[DynamicAxis]) -> str:
    return ", ".join(f"{d.name}:{d.axis}" + (f":{d.label}" if d.label else "") for d in axes)


def _check_dynamic_kept(to: str, backend, spec: InputSpec) -> list[str]:
    """Refuse ``--dynamic`` to a backend that cannot keep it (``dynamic_not_kept``), before any work; the notes
    for dynamic axes it does not keep on inputs ``--input-shape`` fixes (built at that size)."""
    lost = dynamic_not_kept(to, backend, spec)
    if lost is not None:
        axes, hint = lost
        raise BadInputError(f"--dynamic {_axes_text(axes)}: --to {to} cannot keep a dynamic axis (its models have "
                            "static shapes): it would be fixed at the sample's size", hint=hint)
    if spec.dynamic and not getattr(backend, "KEEPS_DYNAMIC", True):
        fixed = spec.fixed()
        return [f"--dynamic {_axes_text(spec.dynamic)}: not kept by --to {to} (static shapes); built at "
                + ", ".join(f"{n} {list(fixed[n])}" for n in dict.fromkeys(d.name for d in spec.dynamic))
                + " (--input-shape)"]
    return []


def _check_target(to: str, backend, target: str | None) -> None:
    """``--target`` must name one of the deployment targets the backend declares (``TARGETS``)."""
    from onnxbridge.plugins import BACKENDS, module_of

    if target is None:
        return
    targets = tuple(getattr(backend, "TARGETS", ()))
    if not targets:
        takers = [n for n in BACKENDS.names() if not BACKENDS.plugin(n).broken and getattr(module_of(n), "TARGETS", ())]
        raise BadInputError(f"--target does not apply to --to {to}"
                            + (f" (it applies to {', '.join(f'--to {n}' for n in takers)})" if takers else ""))
    if target not in targets:
        raise BadInputError(f"unknown {to} target '{target}'; known: {', '.join(targets)}")


def _renderer_flags(renderers: dict | None) -> dict:
    """The rendered reports' paths by the flag that names each (--junit, --markdown, --html)."""
    return {f"--{fmt}": path for fmt, path in (renderers or {}).items()}


def _write_reports(rep: dict, report: str | Path | None, renderers: dict | None) -> None:
    """The JSON report, then the rendered ones (format -> path)."""
    from onnxbridge.renderers import write

    if report is not None:
        write_json(report, rep)
    for fmt, path in (renderers or {}).items():
        write(rep, path, fmt)


def _map_strings(value: Any, fn) -> Any:
    """``value`` (a report: dicts, lists, strings) with ``fn`` applied to every string in it."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, fn) for v in value]
    return value


def _release() -> None:
    """Free the sessions this run's runners held in the worker (before its scratch folder goes)."""
    from onnxbridge.worker import release

    release()


def _check_loaded_names(src: "SourceModel", input_names, spec: InputSpec) -> None:
    """Every input name the user gave must be one the loaded model has (a frontend that ignored one is caught)."""
    from onnxbridge.specs import check_names

    names = [s.name for s in src.input_specs]
    if input_names and list(input_names) != names:
        raise BadInputError(f"--input-name {', '.join(input_names)} was not applied: the model's inputs are "
                            f"{', '.join(map(repr, names))}")
    check_names("--input-shape", [s.name for s in spec.shapes], names)


def _check_exported_names(src: "SourceModel", model: "onnx.ModelProto", output_names, tol) -> None:
    """--dynamic, --output-name and per-output --atol/--rtol names against the exported model."""
    inits = {t.name for t in model.graph.initializer}
    onnx_inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    known = list(dict.fromkeys([*(s.name for s in src.input_specs), *onnx_inputs, *outputs]))
    unknown = [d.name for d in src.dynamic if d.name not in known]
    if unknown:
        raise BadInputError(f"--dynamic names {', '.join(map(repr, dict.fromkeys(unknown)))}, which the model does "
                            f"not have; its inputs are {', '.join(map(repr, onnx_inputs))} and its outputs "
                            f"{', '.join(map(repr, outputs))}")
    if output_names and list(output_names) != outputs:
        raise BadInputError(f"--output-name gives {len(output_names)} name(s) ({', '.join(output_names)}) and they "
                            f"were not applied: the exported model has {len(outputs)} output(s), "
                            f"{', '.join(map(repr, outputs))}")
    wrong = [n for n, _, _ in tol.per_output if n not in outputs]
    if wrong:
        raise BadInputError(f"--atol/--rtol name output(s) {', '.join(map(repr, wrong))} the model does not have; "
                            f"its outputs are {', '.join(map(repr, outputs))}")


def _artifact_hop(src: "SourceModel", kind: str, path: Path, source: Any, inputs: Any, tol, rep: dict, count: int,
                  seed: int, latency_runs: int, emulation=None) -> tuple[dict, list[Sample]]:
    """Source -> a saved backend artifact, run by the backend's own runner (skipped where it cannot run); also the
    samples it used."""
    from onnxbridge.errors import ArtifactMismatch, HopSkipped
    from onnxbridge.validation import failed_hop, skipped_hop

    info = inspect_artifact(path, kind)
    rep["artifact"] = {"path": str(path), "format": kind,
                       "bytes": _size(path),
                       "external_data": [], "backend": {k: v for k, v in info.items() if k not in ("path", "format")}}
    specs = [TensorSpec(i["name"], tuple(i["shape"] or ()), None) for i in info["inputs"]]
    onnx_path = Path(source) if isinstance(source, (str, Path)) and str(source).endswith(".onnx") else None
    try:
        candidate = _open_backend_runner(kind, None, path, onnx_path)
    except (HopSkipped, ArtifactMismatch) as exc:
        samples = _samples(src, inputs, specs, count, seed)
        rep["inputs"] = {"origin": samples[0].origin, "samples": [s.shapes() for s in samples]}
        if isinstance(exc, HopSkipped):
            return skipped_hop(src.frontend, _hop_name(kind), samples, tol, exc.one_line()), samples
        return failed_hop(src.frontend, _hop_name(kind), samples, tol, exc.one_line()), samples
    hop, samples, _ = _source_hop(src, _hop_name(kind), candidate, specs, [o["name"] for o in info["outputs"]], inputs,
                                  tol, rep, count, seed, latency_runs, emulation, tol.precision)
    return hop, samples


def inspect_artifact(path: str | Path, kind: str | None = None) -> dict:
    """What a model file holds (``kind``: its backend, default by suffix). Backend artifacts are read in the
    worker process: their readers (coremltools, TensorRT) are native code."""
    from onnxbridge.fileio import regular
    from onnxbridge.plugins import BACKENDS, for_file
    from onnxbridge.worker import call

    regular(path, "the model", folder=True)  # a FIFO or a device would never end
    kind = kind or for_file(path) or "onnx"

    return call(f"{BACKENDS.plugin(kind).module}:inspect", (str(path),), step=f"reading {Path(path).name}",
                library=_library(kind))


def _companions(backend, output: Path) -> list[Path]:
    """The files a backend writes beside its artifact (an OpenVINO IR's .bin): ``companions(output)``, if declared."""
    companions = getattr(backend, "companions", None)
    return [Path(p) for p in companions(output)] if companions is not None else []


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (an .mlpackage)."""
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _write_blocked(path: str | Path, rep: dict, model: "onnx.ModelProto", opset: int, error: str) -> None:
    """Write the report of a run the opset adapters refused, listing every blocking node."""
    from onnxbridge.adapters import check

    try:
        blockers = check(model, opset)
    except UnsupportedError as exc:  # e.g. an opset this onnx does not know
        blockers = [str(exc)]
    rep.update(status="blocked", blockers=blockers or [error])
    write_json(path, rep)


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
    from onnxbridge.fileio import load_onnx

    arguments.check({"model": model, "opset": opset, "report": report, "renderers": renderers}, required=("opset",))
    arguments.check_paths({"the model": model}, {"--report": report, **_renderer_flags(renderers)})
    proto = load_onnx(model) if isinstance(model, (str, Path)) else model
    wellformed.vet(model, f"'{Path(model).name}'" if isinstance(model, (str, Path)) else "the model")
    rep = reports.new_report("check", source=_onnx_source_info(model, proto))
    rep["blockers"] = check(proto, opset)
    rep["status"] = "blocked" if rep["blockers"] else "passed"
    _write_reports(rep, report, renderers)
    return rep


@deadline.bounded
def check_targets(model: "str | Path", targets: Sequence[str], *, opset: int | None = None,
                  input_shapes: Sequence[str | TensorSpec] = (), target: str | None = None,
                  report: str | Path | None = None, timeout: float | None = None) -> dict:
    """Every blocker that stops ``model`` (ONNX) from reaching each backend in ``targets`` (and ``opset`` when
    given; ``target``: a deployment target such as Core ML's iOS16), found without converting: a report with command ``check``, status ``passed`` or ``blocked``, the
    ``blockers`` (each prefixed with its target) and ``targets`` (per backend: available, reason, blockers, a hint per
    blocker or None, and the legalization ``rewrites`` its build would apply, as ``"RULE (node NAME)"``)."""
    from onnxbridge.plugins import BACKENDS, BuildContext, module_of
    from onnxbridge.hints import hint
    from onnxbridge.specs import check_names
    from onnxbridge.worker import call

    arguments.check_paths({"the model": model}, {"--report": report})
    _check_opset(opset)
    if opset is None:
        wellformed.vet(model, f"'{Path(model).name}'")
    rep = check_opset(model, opset, report=None) if opset is not None else \
        reports.new_report("check", source=_onnx_source_info(model))
    rep.setdefault("blockers", [])
    rep["blockers"] = [f"onnx@{opset}: {b}" for b in rep["blockers"]]
    spec = InputSpec.parse(input_shapes)
    check_names("--input-shape", [s.name for s in spec.shapes], [i["name"] for i in rep["source"]["inputs"]])
    context = BuildContext(target=target, inputs=spec)
    rep["targets"] = {}
    for target in targets:
        status = BACKENDS.status(target)  # also refuses an unknown name
        found, rewrites = [], []
        # in the worker: a backend's own checks run its native libraries (onnxruntime-qnn, ...)
        module = BACKENDS.plugin(target).module
        found = call(f"{module}:check", (Path(model), context), step=f"checking {Path(model).name} for {target}",
                     library=_library(target))
        if hasattr(module_of(target), "rewrites"):
            rewrites = call(f"{module}:rewrites", (Path(model), context), library=_library(target),
                            step=f"finding the rewrites {target} needs")
        rep["targets"][target] = {"available": status["available"], "reason": status["reason"], "blockers": found,
                                  "hints": [hint(b) for b in found], "rewrites": rewrites}
        rep["blockers"] += [f"{target}: {b}" for b in found]
    rep["status"] = "blocked" if rep["blockers"] else "passed"
    if report is not None:
        write_json(report, rep)
    return rep


def _onnx_source_info(model: "str | Path | onnx.ModelProto", proto: "onnx.ModelProto | None" = None) -> dict:
    """The report's ``source`` for an ONNX model (``proto``: the model at path ``model``, when already loaded)."""
    from onnxbridge.fileio import load_onnx

    proto = proto or (load_onnx(model) if isinstance(model, (str, Path)) else model)
    inits = {t.name for t in proto.graph.initializer}
    inputs = [TensorSpec(i.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                       for d in i.type.tensor_type.shape.dim), None).as_dict()
              for i in proto.graph.input if i.name not in inits]
    path = str(model) if isinstance(model, (str, Path)) else None
    name = Path(path).name if path else proto.graph.name
    return {"frontend": "onnx", "framework": "onnx", "kind": "ONNX", "path": path,
            "description": f"ONNX model {name}", "inputs": inputs, "dynamic": []}


def _artifact(path: Path, target: str, model: "onnx.ModelProto | None" = None,
              files: list[str] | None = None) -> dict:
    """Facts about the written model (read back from disk when ``model`` is not given)."""
    from onnxbridge.adapters import default_opset
    from onnxbridge.fileio import external_files, load_onnx

    if model is None:
        model = load_onnx(path)
        files = external_files(model)
        missing = [f for f in files if not (path.parent / f).is_file()]
        if missing:
            raise BadInputError(f"'{path}' refers to external data that is missing: {', '.join(missing)}")
    return {"path": str(path), "format": target, "opset": default_opset(model), "ir_version": model.ir_version,
            "bytes": path.stat().st_size + sum((path.parent / f).stat().st_size for f in files),
            "external_data": files}


@deadline.bounded
def validate(source: Any, converted: "str | Path | onnx.ModelProto", inputs: Any = None, *,
             sample_inputs: Any = None, from_: str | None = None, input_shapes: Sequence[str | TensorSpec] = (),
             trust: bool = False, precision: str = "fp32", atol: Any = None, rtol: Any = None, samples: int = 1,
             latency_runs: int = 0, seed: int = 0, report: str | Path | None = None, raise_on_failure: bool = False,
             progress: bool = False, renderers: dict | None = None, localize: bool | str | None = "auto",
             allow_skipped: bool = False, timeout: float | None = None, **options: Any) -> dict:
    """Compare a converted model with its source on the same inputs; returns the report.

    ``converted``: an ONNX model (path or proto) or a backend's artifact (.mlpackage, .dlc, .engine), run by
    that backend's runner; a backend that cannot run here gives a skipped hop, never a passed one.
    ``inputs``: a .npz path, a directory of .npy files or a name -> array mapping; by default the
    source's sample inputs (or seeded random ones from its input specs). Symbolic axes of the
    converted model are also checked at a second size. ``renderers``: more reports to write, as ``convert``'s.
    ``localize``: "auto" (default) finds the first diverging node of a failed hop, "on" of every hop, "off" none.
    ``raise_on_failure``: raise ValidationFailed when the hop failed, and ValidationSkipped (a ValidationFailed)
    when it did not run here (status ``skipped``), unless ``allow_skipped``. ``timeout``: as ``convert``'s.
    """
    arguments.check({**locals(), **options}, required=("converted",))
    from onnxbridge.localize import hops as localizing
    from onnxbridge.validation import Tolerance

    mode = "auto" if localize is True else localizing.mode_of(localize, "auto")
    arguments.check_paths({"the source model": source, "the converted model": converted, "--inputs": inputs},
                          {"--report": report, **_renderer_flags(renderers)})
    t0 = time.perf_counter()
    tol = Tolerance.for_precision(precision, atol, rtol)
    steps = Progress(progress)
    with steps.step("Loading the source model"):
        src = load_source(source, sample_inputs=sample_inputs, from_=from_, input_shapes=input_shapes,
                          trust=trust, seed=seed, **options)
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
                rep["artifact"] = _artifact(path, "onnx")
                hop, used, _, _ = _hop(src, path, inputs, tol, rep, samples, seed, latency_runs,
                                       emulation=_source_emulation(src, source, scratch))
                make = lambda: localizing.source_to_onnx(src, path, _used_by(hop, used),  # noqa: E731
                                                         localizing.tolerance_of(hop))
            else:
                hop, used = _artifact_hop(src, kind, path, source, inputs, tol, rep, samples, seed, latency_runs,
                                          _source_emulation(src, source, scratch))
                make = lambda: _localize_artifact(src, kind, source, path, _used_by(hop, used),  # noqa: E731
                                                  localizing.tolerance_of(hop))
            rep["hops"].append(hop)
        localizing.attach(hop, mode, make, steps)
        _release()
    rep["timings"] = {"total_s": round(time.perf_counter() - t0, 4)}
    reports.finish(rep, validated=True)
    _write_reports(rep, report, renderers)
    if raise_on_failure:
        _raise_for(rep, allow_skipped)
    return rep
