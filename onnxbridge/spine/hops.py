"""The hops a run validates: source -> ONNX, the adapters', the optimizer's, fp16's and the backend's, each with
the runners it compares (in the worker) and the fp16 emulation it is judged against."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence


from onnxbridge.records import Hop, HopKind
from onnxbridge.specs import Sample, TensorSpec

from onnxbridge.spine.artifacts import backend_libraries, hop_name, inspect_artifact, read_onnx_inputs, shown_name, size_on_disk
from onnxbridge.spine.loading import let_go, source_ran
from onnxbridge.spine.samples import check_dynamic, unexercised, validation_samples

if TYPE_CHECKING:
    import onnx

    from onnxbridge.plugins import SourceModel


def first_hop(src: "SourceModel", model_path: Path, samples_from: Any, tol, report: dict, count: int = 1,
              seed: int = 0, latency_runs: int = 0, release: bool = False,
              emulation=None) -> tuple[Hop, list[Sample], Any, Any]:
    """The first hop, source -> ONNX; also the samples every later hop uses, the source's outputs on them
    (computed once, shared by every hop) and the ONNX model's runner (the later hops' reference).

    ``release``: the source's outputs on every sample are computed first and the source model is let go (its
    ``release()``) before the onnxruntime session opens, so the two never hold the
    weights at once; nothing may run the source model after this hop."""
    from onnxbridge import runtime
    from onnxbridge.validation import SourceOutputs, validate_hop

    source, dynamic = SourceOutputs(src.run, source_ran(src)), {}
    samples = validation_samples(src, samples_from, read_onnx_inputs(model_path), count, seed, source=source,
                       model_path=model_path, dynamic=dynamic)
    report["inputs"] = {"origin": samples[0].origin, "samples": [s.shapes() for s in samples]}
    if release:
        source.prefetch(samples)
        let_go(src)  # before the session: collecting while the worker loads it raised GPT-2's peak 1.27x -> 1.50x
    candidate = runtime.open(model_path, what=f"the onnxruntime session of {shown_name(model_path)}")
    hop = validate_hop(HopKind.SOURCE, src.frontend, "onnx", source, candidate, samples, candidate.output_names, tol,
                       latency_runs,
                       emulation=emulation)
    hop.fail(*check_dynamic(src, candidate.input_specs))
    if dynamic:
        unexercised(hop, dynamic)
    return hop, samples, source, candidate


def _source_hop(src: "SourceModel", to: str, candidate, inputs: Sequence[TensorSpec], output_names: Sequence[str],
                samples_from: Any, tol, report: dict, count: int = 1, seed: int = 0,
                latency_runs: int = 0, emulation=None, computes: str | None = None) -> tuple[Hop, list[Sample], Any]:
    """Source framework -> ``candidate`` (any runner whose inputs are ``inputs``) on the validation samples."""
    from onnxbridge.validation import SourceOutputs, validate_hop

    source, dynamic = SourceOutputs(src.run, source_ran(src)), {}
    samples = validation_samples(src, samples_from, inputs, count, seed, source=source, dynamic=dynamic)
    report["inputs"] = {"origin": samples[0].origin, "samples": [s.shapes() for s in samples]}
    hop = validate_hop(HopKind.SOURCE, src.frontend, to, source, candidate, samples, output_names, tol, latency_runs,
                       emulation=emulation, computes=computes)
    if dynamic:
        unexercised(hop, dynamic)
    return hop, samples, source


def keep_graph(model: "onnx.ModelProto", base_dir: Path | None, scratch: Path, name: str) -> Path | None:
    """``model`` written to scratch as ``name`` beside the weights it references (or alone, where they are inline),
    for a hop of its own; None where it cannot be: over 2 GB inline, or weights outside the scratch folder."""
    if model.ByteSize() > 2**31 - 1 or (base_dir is not None and scratch not in (base_dir, *base_dir.parents)):
        return None
    path = (base_dir or scratch) / name
    path.write_bytes(model.SerializeToString())
    return path


def fp16_emulation(path: Path):
    """A factory of the fp16 emulation of the ONNX model at ``path`` (a runner in the worker), for hops that compute
    in fp16 against it; the factory gives None where that model computes in fp16 already."""
    def make():
        from onnxbridge import runtime
        from onnxbridge.fp16eval import computes_in_fp16
        from onnxbridge.inplace import load_in_place

        if computes_in_fp16(load_in_place(path)):
            return None
        return runtime.open(path, emulate="fp16", what=f"the fp16 emulation of {shown_name(path)}")
    return make


def source_emulation(src: "SourceModel", source: Any, scratch: Path):
    """For ``validate``: a factory of the fp16 emulation a reduced-precision candidate is judged against, of the
    source itself where it is an ONNX file, else of the source's own fp32 export (made only when a hop needs it;
    None where the export fails: the hop then takes the fixed tolerance and says so)."""
    if src.frontend == "onnx" and isinstance(source, (str, Path)):
        return fp16_emulation(Path(source))

    def make():
        from onnxbridge.errors import OnnxBridgeError
        from onnxbridge.onnxio import save_onnx

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
        return fp16_emulation(path)()
    return make


def keep_before_adapting(model: "onnx.ModelProto", base_dir: Path | None, scratch: Path,
                         opset: int | None) -> tuple[Path, int] | None:
    """Write the exporter's model (before the opset adapters) to scratch when they are about to run,
    so validation can tell their share of a difference from the exporter's; None when they won't run
    or the model is too big to write twice."""
    from onnxbridge.adapters import default_opset

    have = default_opset(model)
    if opset is None or have == opset:
        return None
    path = keep_graph(model, base_dir, scratch, "exported-before-adapters.onnx")
    return (path, have) if path is not None else None


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
                                      library=backend_libraries(name))
    if not spec.library:
        spec = RunnerSpec(spec.factory, spec.kwargs, backend_libraries(name))
    return open_runner(spec, f"the {name} runner of {artifact.name}")


def backend_hop(name: str, reference, onnx_path: Path, artifact: Path, samples: list[Sample], tol,
                built_runner=None, source=None, latency_runs: int = 0, precision: str = "fp32") -> Hop:
    """The backend's hop: onnxruntime on the ONNX model it was built from against the backend's runner (or the
    one its build described), judged by what the backend computes (its runner's ``compute_precision``, else the
    ``precision`` it applied; fp16 against the fp16 emulation of that ONNX model). A backend that cannot run here
    gives a skipped hop that says why; an artifact that is not the graph it claims gives a failed one."""
    from onnxbridge.errors import ArtifactMismatch, HopSkipped
    from onnxbridge.validation import failed_hop, skipped_hop, validate_hop

    try:
        candidate = _open_backend_runner(name, built_runner, artifact, onnx_path)
    except HopSkipped as exc:
        return skipped_hop(HopKind.BACKEND, "onnx", hop_name(name), samples, tol, exc.one_line())
    except ArtifactMismatch as exc:
        return failed_hop(HopKind.BACKEND, "onnx", hop_name(name), samples, tol, exc.one_line())
    return validate_hop(HopKind.BACKEND, "onnx", hop_name(name), reference, candidate, samples, reference.output_names, tol,
                        latency_runs, source=source, emulation=fp16_emulation(onnx_path), computes=precision)


def onnx_hop(before: tuple[Path, int], got, opset: int, samples: list[Sample], tol, source=None) -> Hop:
    """The adapters' hop: the exporter's ONNX model against the adapted one (``got``, its runner; at ``opset``),
    on the same samples."""
    from onnxbridge import runtime
    from onnxbridge.validation import validate_hop

    path, have = before
    ref = runtime.open(path, what="the onnxruntime session of the exporter's model (before the opset adapters)")
    return validate_hop(HopKind.ADAPTERS, f"onnx@{have}", f"onnx@{opset}", ref, got, samples, got.output_names, tol, source=source)


def artifact_hop(src: "SourceModel", kind: str, path: Path, source: Any, inputs: Any, tol, rep: dict, count: int,
                 seed: int, latency_runs: int, emulation=None) -> tuple[Hop, list[Sample]]:
    """Source -> a saved backend artifact, run by the backend's own runner (skipped where it cannot run); also the
    samples it used."""
    from onnxbridge.errors import ArtifactMismatch, HopSkipped
    from onnxbridge.validation import failed_hop, skipped_hop

    info = inspect_artifact(path, kind)
    rep["artifact"] = {"path": str(path), "format": kind,
                       "bytes": size_on_disk(path),
                       "external_data": [], "backend": {k: v for k, v in info.items() if k not in ("path", "format")}}
    specs = [TensorSpec(i["name"], tuple(i["shape"] or ()), None) for i in info["inputs"]]
    onnx_path = Path(source) if isinstance(source, (str, Path)) and str(source).endswith(".onnx") else None
    try:
        candidate = _open_backend_runner(kind, None, path, onnx_path)
    except (HopSkipped, ArtifactMismatch) as exc:
        samples = validation_samples(src, inputs, specs, count, seed)
        rep["inputs"] = {"origin": samples[0].origin, "samples": [s.shapes() for s in samples]}
        if isinstance(exc, HopSkipped):
            return skipped_hop(HopKind.SOURCE, src.frontend, hop_name(kind), samples, tol, exc.one_line()), samples
        return failed_hop(HopKind.SOURCE, src.frontend, hop_name(kind), samples, tol, exc.one_line()), samples
    hop, samples, _ = _source_hop(src, hop_name(kind), candidate, specs, [o["name"] for o in info["outputs"]], inputs,
                                  tol, rep, count, seed, latency_runs, emulation, tol.precision)
    return hop, samples


def localize_artifact(src: "SourceModel", kind: str, source: Any, artifact: Path, samples: list[Sample], tol) -> dict:
    """Source -> a backend artifact: localized where the source is the ONNX model it was built from (its nodes name
    the artifact's intermediates); from a framework, there is no ONNX graph between them to name nodes by."""
    from onnxbridge.localize import hops as localizing

    if src.frontend != "onnx" or not isinstance(source, (str, Path)):
        return {"skipped": f"no ONNX model between the {src.frontend} source and the {kind} artifact to name nodes "
                           "by: validate the artifact against the ONNX model it was built from", "method": "none"}
    return localizing.onnx_to_backend(kind, Path(source), artifact, samples, tol)


def release_sessions() -> None:
    """Free the sessions this run's runners held in the worker (before its scratch folder goes)."""
    from onnxbridge.worker import release

    release()
