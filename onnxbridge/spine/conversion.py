"""``convert``: one run as its stages (``_Conversion``), each reading the request (``onnxbridge.request``)."""
from __future__ import annotations

import copy
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxbridge import arguments, deadline
from onnxbridge import report as reports
from onnxbridge.errors import BadInputError, OnnxBridgeError, UnsupportedError
from onnxbridge.locks import output_lock
from onnxbridge.progress import Progress
from onnxbridge.registry import dist_version
from onnxbridge.scratch import workdir
from onnxbridge.specs import InputSpec, load_npz

from onnxbridge.spine.artifacts import artifact_facts, backend_libraries, companion_files, shown_name, size_on_disk
from onnxbridge.spine.hops import backend_hop, first_hop, fp16_emulation, keep_before_adapting, keep_graph, onnx_hop, release_sessions
from onnxbridge.spine.loading import check_exported_names, check_loaded_names, let_go, load_source
from onnxbridge.spine.preflight import check_dynamic_kept, check_opset_known, check_precision, check_target, refuse_suffix, take_backend_options
from onnxbridge.spine.results import ConversionResult, map_strings, renderer_flags, write_blocked, write_reports
from onnxbridge.spine.samples import used_by

if TYPE_CHECKING:
    import onnx

    from onnxbridge.plugins import SourceModel


DEFAULT_BACKEND = "onnx"  # what convert builds when neither --to nor the output's name says


# an exporter's warning that its trace turned a computed value into a constant (torch's TracerWarning texts)
TRACE_FROZE = re.compile(r"might cause the trace to be incorrect|registered as constants in the trace|"
                         r"trace might not generalize")


@deadline.bounded
def convert(source: Any, sample_inputs: Any = None, *, timeout: float | None = None, **given: Any
            ) -> ConversionResult:
    """Convert ``source`` to ONNX at exactly ``opset``, write it atomically and validate it.

    ``source``: a live model (nn.Module, ExportedProgram, ScriptModule, ModelProto), a file path, or
    ``"file.py:factory"`` / ``"pkg.mod:factory"`` returning ``model`` or ``(model, sample_inputs)``.
    Returns a ConversionResult whose ``report`` says whether the numbers held (it never raises for a
    numeric mismatch; call ``raise_for_status()`` for that). With ``output=None`` the model is returned
    in memory as ``.model``. The keyword arguments are the options ``onnxbridge.request.CONVERT`` declares (the
    CLI's flags, same names: ``output``, ``to``, ``opset``, ``precision``, ``atol``, ``localize``, ``optimize``...)
    and those the plugins declare (``onnxbridge convert --help`` lists both; e.g. ``exporter``, ``shapes``,
    ``workspace``, ``calibration``, ``allow_approx``, ``signature``). ``to``: the backend (default: the one whose
    artifacts end like ``output``, else "onnx"); any installed backend builds its artifact from the ONNX model and
    validates it as a hop of its own. ``renderers``: more reports to write, format (junit, markdown, html) -> path.
    No output may name another or an input's file. ``timeout``: seconds the whole call may take (default
    ``ONNXBRIDGE_TIMEOUT_S``, else 3600; 0: no limit), then TimedOut (exit 2) naming the step.
    """
    from onnxbridge import request as requests

    run, options = requests.split("convert", given)
    arguments.check({"source": source, "sample_inputs": sample_inputs, **given})
    return _Conversion.plan(source, sample_inputs, run, options).run()


@dataclass
class _Conversion:
    """One ``convert`` run as its stages: load, export, finalize, optimize (``--optimize``), fp16 (``--precision
    fp16`` to ONNX), write, split (``--split-tail``), build, validate, localize (``--localize``), report. Each stage
    is a method that reads what the user asked in ``request`` (``onnxbridge.request``) and what ``plan`` derived from
    it here; ``_stage`` shows its progress line and times it (the report's ``timings``: ``load_s``, ``export_s``,
    ``build_s`` for finalize, ``optimize_s``, ``write_s``, ``split_s``, ``backend_s`` for build, ``validate_s``,
    ``localize_s``, and ``total_s``; fp16 is not timed apart)."""

    source: Any
    sample_inputs: Any
    request: Any  # onnxbridge.request's ConvertRequest: what the user asked, as given
    backend: Any  # the backend module (onnxbridge.plugins.Backend) of ``to``
    to: str  # the backend's name (the request's, or inferred from the output's name)
    out_path: Path | None
    spec: InputSpec  # --input-shape and --dynamic, parsed
    tol: Any  # validation.Tolerance
    frontend_options: dict  # the options plugins declare, by side
    backend_options: dict
    calibration: Any
    steps: Progress
    localize: str = "off"  # the mode: "auto" for ``localize=True``
    optimize: str | None = None  # the optimizer's level, None for none
    inferred: str | None = None  # how ``to`` was chosen when not given (a note)
    optimization: dict | None = None  # what the optimizer removed (artifact["optimization"])
    timings: dict = field(default_factory=dict)
    staged: Path | None = None  # where the artifact is built and validated before ``deliver`` places it at -o
    planned_notes: list = field(default_factory=list)  # notes decided by ``plan``, added to the report at load
    hops: list = field(default_factory=list)  # the Hops validated, in order (the report's ``hops``)
    cut: dict | None = None  # --split-tail: the cut made (head, tail and whole model paths, facts); None: no cut

    @classmethod
    def plan(cls, source: Any, sample_inputs: Any, run: Any, options: dict) -> "_Conversion":
        """Everything refused before any work: unknown backend, foreign options, precision, target, opset, paths."""
        from onnxbridge.localize.hops import mode_of
        from onnxbridge.plugins import BACKENDS
        from onnxbridge.sources import is_factory
        from onnxbridge.validation import Tolerance

        output, to = run.output, run.to
        inferred, chosen = None, to is not None
        if to is None:  # the backend whose artifacts end like -o (an .mlpackage is Core ML), else the default
            from onnxbridge.plugins import for_file

            to = (for_file(output) if output is not None else None) or DEFAULT_BACKEND
            if to != DEFAULT_BACKEND:
                inferred = f"--to {to}: inferred from the output's name ({Path(output).name})"
        backend = BACKENDS.load(to)
        options = dict(options)
        backend_options = take_backend_options(to, options)
        calibration = backend_options.pop("calibration", None)
        if "allow_approx" in backend_options:
            from onnxbridge.legalize.approx import check_names

            backend_options["allow_approx"] = check_names(backend_options["allow_approx"])
        onnx_artifact = getattr(backend, "ONNX_ARTIFACT", False)
        if output is None and not onnx_artifact:
            raise BadInputError(f"--to {to} needs an output path ({', '.join(backend.SUFFIXES)})")
        if output is not None and not onnx_artifact and not str(output).endswith(tuple(backend.SUFFIXES)):
            raise BadInputError(f"a {to} output must end with {' or '.join(backend.SUFFIXES)}")
        check_target(to, backend, run.target)
        if run.split_tail:
            from onnxbridge.spine.splitting import refuse_split

            refuse_split(to, backend)
        check_precision(to, backend, run.precision)
        check_opset_known(run.opset)
        spec = InputSpec.parse(run.input_shapes, run.dynamic)
        kept = check_dynamic_kept(to, backend, spec)
        tol = Tolerance.for_precision(run.precision, run.atol, run.rtol)
        out_path = Path(output) if output is not None else None
        factory_file = source.rpartition(":")[0] if is_factory(source) else None
        beside = {f"-o's {p.name}": p for p in companion_files(backend, out_path)} if out_path is not None else {}
        if run.split_tail and out_path is not None:
            from onnxbridge.split import tail_path

            beside[f"-o's tail {tail_path(out_path).name}"] = tail_path(out_path)
        arguments.check_paths({"the source model": source, "the source's factory file": factory_file,
                               "--inputs": run.inputs, "--calibration": calibration},
                              {"-o": output, **beside, "--report": run.report,
                               "--timing-cache": backend_options.get("timing_cache"),
                               **renderer_flags(run.renderers)})
        if out_path is not None and onnx_artifact and not out_path.name.lower().endswith(tuple(backend.SUFFIXES)):
            refuse_suffix(to, backend, out_path, chosen)
        conversion = cls(source, sample_inputs, run, backend, to, out_path, spec, tol, options, backend_options,
                         calibration, Progress(run.progress), localize="auto" if run.localize is True else
                         mode_of(run.localize, "off"), optimize=("default" if run.optimize is True else
                                                                  run.optimize) or None, inferred=inferred)
        conversion.planned_notes += kept
        return conversion

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
            if self.request.validate:
                from onnxbridge.worker import prewarm

                prewarm()  # the worker imports onnxruntime while the exporter runs
            with workdir() as scratch, self._staging():
                exported = self.export(src, scratch)
                if not self.request.validate:
                    let_go(src)  # nothing runs the source model again: its weights can go now
                model, base_dir, before = self.finalize(src, exported, scratch)
                model, unoptimized = self.optimize_graph(model, base_dir, scratch)
                model, full = self.reduce_precision(model, base_dir, scratch)
                dest = self.write(model, base_dir, scratch)
                del model
                whole = dest
                if self.request.split_tail:
                    dest = self.split(src, dest, scratch)
                reference, built = self.build(src, dest, scratch)
                if self.request.validate:
                    self.check(src, reference, before, built, unoptimized, full, whole)
                if self.out_path is None:
                    from onnxbridge.onnxio import load_onnx

                    in_memory = load_onnx(whole, load_external_data=True)
                release_sessions()
                self.rep["hops"] = [h.to_dict() for h in self.hops]
                self.timings["total_s"] = time.perf_counter() - t0
                self.rep["timings"] = {k: round(v, 4) for k, v in self.timings.items()}
                reports.finish(self.rep, validated=self.request.validate)
                self.deliver()
        return ConversionResult(self.out_path, in_memory, self.rep)

    @contextmanager
    def _staging(self):
        """A folder beside -o, named for this run, where the artifact is written, built and validated
        (``self.staged``); ``deliver`` places it. Removed after, whatever happened: a run that fails or is killed
        leaves the output as it was (a later run removes a killed run's folder)."""
        import shutil

        from onnxbridge.atomic import staging_folder
        from onnxbridge.pathchecks import writing

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
        file that names them; with --split-tail, the tail before the artifact, and a tail an earlier run left is
        removed when this one made none), then the new reports. Run by the process holding the output's lock, never
        by the worker, which only writes into the staging folder."""
        from onnxbridge.atomic import place
        from onnxbridge.onnxio import place_onnx
        from onnxbridge.pathchecks import writing

        if self.out_path is not None:
            self.rep = map_strings(self.rep, self._outside)
            for old in [self.request.report, *(self.request.renderers or {}).values()]:
                if old is not None and Path(old).is_file():
                    with writing(old):
                        Path(old).unlink()
            if self.request.split_tail:
                self._place_tail()
            if getattr(self.backend, "ONNX_ARTIFACT", False):
                place_onnx(self.staged, self.out_path, self.rep["artifact"]["external_data"])
            else:
                for companion in companion_files(self.backend, self.staged):
                    if companion.exists():
                        place(companion, self.out_path.parent / companion.name)
                place(self.staged, self.out_path)
        write_reports(self.rep, self.request.report, self.request.renderers)

    def _place_tail(self) -> None:
        """The tail at ``-o``'s tail path (``split.tail_path``), or, where this run made none, no file there."""
        from onnxbridge.onnxio import place_onnx
        from onnxbridge.pathchecks import writing
        from onnxbridge.split import tail_path

        out = tail_path(self.out_path)
        if self.cut:
            place_onnx(self.cut["tail"], out, self.cut["files"])
            return
        for old in (out, out.with_name(out.name + ".data")):
            if old.is_file():
                with writing(old):
                    old.unlink()

    def load(self) -> "SourceModel":
        """Load the source with its frontend; every name the user gave is checked against what it loaded."""
        with self._stage("load", "Loading the source model"):
            src = load_source(self.source, sample_inputs=self.sample_inputs, from_=self.request.from_,
                              input_shapes=self.spec.shapes, dynamic=list(self.spec.dynamic),
                              input_names=self.request.input_names, trust=self.request.trust, seed=self.request.seed,
                              **self.frontend_options)
        check_loaded_names(src, self.request.input_names, self.spec)
        source_info = {**src.info(), "path": str(self.source) if isinstance(self.source, (str, Path)) else None}
        self.rep = reports.new_report("convert", source=source_info,
                                      frameworks=[d for d in (src.framework, src.converter) if d])
        if self.inferred:
            self.rep["notes"].append(self.inferred)
        self.rep["notes"] += self.planned_notes
        return src

    def export(self, src: "SourceModel", scratch: Path):
        with self._stage("export", f"Exporting {src.kind} to ONNX"):
            exported = src.export(scratch, opset=self.request.opset, output_names=self.request.output_names)
        self.rep["notes"] += exported.notes
        self.rep["warnings"] += exported.warnings
        check_exported_names(src, exported.model, self.request.output_names, self.tol)
        return exported

    def finalize(self, src: "SourceModel", exported, scratch: Path):
        """The builder's pass (opset, IR, metadata) and the precisions the backend wants in the ONNX model itself;
        also the exporter's model kept for the adapters' hop. Returns (model, base_dir, before)."""
        from onnxbridge import builder
        from onnxbridge.external_data import detach_weights

        with self._stage("build", "Building the ONNX model"):
            model, base_dir = detach_weights(exported.model, exported.base_dir, scratch)
            del exported.model
            before = keep_before_adapting(model, base_dir, scratch, self.request.opset) \
                if self.request.validate and src.frontend != "onnx" else None
            try:
                model, notes = builder.finalize(model, opset=self.request.opset, source={
                    "source_framework": src.framework, "source_framework_version": dist_version(src.framework),
                    "exporter": exported.exporter})
            except UnsupportedError as exc:  # say what the export already tried, and record every blocker
                if self.request.report is not None and self.request.opset is not None:
                    write_blocked(self.request.report, self.rep, model, self.request.opset, str(exc))
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
        if self.request.precision not in getattr(self.backend, "ONNX_PRECISIONS", ()):
            return model, None
        from onnxbridge.precision import to_fp16

        kept = keep_graph(model, base_dir, scratch, "before-fp16.onnx") if self.request.validate else None
        if self.request.validate and kept is None:
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
            kept = keep_graph(model, base_dir, scratch, "before-optimize.onnx") if self.request.validate else None
            if self.request.validate and kept is None:
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
        from onnxbridge.onnxio import save_onnx

        at_output = self.out_path is not None and getattr(self.backend, "ONNX_ARTIFACT", False)
        dest = self.staged if at_output else scratch / "model.onnx"
        with self._stage("write", f"Writing {dest.name}"):
            # the weights in this run's scratch folder are linked to the output, not copied, where they can be
            files = save_onnx(model, dest, base_dir=base_dir, external_data=self.request.external_data,
                              check=builder.check_file,
                              movable=base_dir is not None and scratch in (base_dir, *base_dir.parents))
        self.rep["artifact"] = artifact_facts(dest, "onnx", model, files)
        if at_output:
            self.rep["artifact"]["path"] = str(self.out_path)
        if self.optimize is not None:
            self.rep["artifact"]["optimization"] = self.optimization
        return dest

    def _context(self, src: "SourceModel", scratch: Path):
        """The ``BuildContext`` the backend's build (and, with --split-tail, its check) gets."""
        from onnxbridge.plugins import BuildContext
        from onnxbridge.worker import RelayedProgress

        return BuildContext(target=self.request.target, inputs=self.spec.with_dynamic(src.dynamic),
                            sample_shapes={k: tuple(v.shape) for k, v in src.sample.feeds.items()},
                            calibration=load_npz(self.calibration) if self.calibration is not None else None,
                            workdir=scratch, progress=RelayedProgress(self.steps.enabled))

    def split(self, src: "SourceModel", dest: Path, scratch: Path) -> Path:
        """``--split-tail``: the backend's own check on the written ONNX model; where it refuses nodes, the model is
        cut before them (``spine.splitting.find_cut``): the head, in scratch, is what the backend builds (returned),
        the tail is staged beside the artifact for ``deliver``. Where the backend takes it all, ``dest`` as it was."""
        from onnxbridge.split import tail_path
        from onnxbridge.spine.splitting import check_context, find_cut, split_note, split_report

        head, tail = scratch / "head.onnx", self.staged.parent / tail_path(self.out_path).name
        with self._stage("split", f"Finding what {self.to} cannot take"):
            context = check_context(self.backend, self._context(src, scratch), dest)
            facts = find_cut(self.to, context, dest, head, tail)
        out = tail_path(self.out_path)
        if facts is None:
            self.rep["split"] = split_report(self.to, None, out, 0)
            self.rep["notes"].append(f"--split-tail: {self.to} takes the whole model; no tail written")
            return dest
        self.cut = {"whole": dest, "head": head, "tail": tail, "files": facts["tail_files"]}
        size = sum(size_on_disk(f) for f in [tail, *(tail.parent / n for n in facts["tail_files"])])
        self.rep["split"] = split_report(self.to, facts, out, size)
        self.rep["notes"].append(split_note(self.to, facts))
        return head

    def build(self, src: "SourceModel", dest: Path, scratch: Path):
        """The backend's build from the written ONNX model, in the worker. Returns the ONNX model the hops use as
        their reference (the artifact itself where the build placed that graph) and the BuildResult (None when
        nothing was built: no output path)."""
        from onnxbridge.plugins import BuildResult
        from onnxbridge.worker import call

        if self.out_path is None:
            return dest, None
        context = self._context(src, scratch)
        files = [self.staged, *companion_files(self.backend, self.staged)]
        with self._stage("backend", f"Building the {self.to} model"):
            built = call(f"{self.backend.__name__}:build", (dest, self.staged),
                         {"target": self.request.target, "precision": self.request.precision, "context": context,
                          **self.backend_options},
                         step=f"building the {self.to} model {self.out_path.name}", library=backend_libraries(self.to),
                         progress=self.steps)
            if not isinstance(built, BuildResult):
                raise TypeError(f"backend '{self.to}': build() returned {type(built).__name__}, not a BuildResult")
        self.rep["warnings"] += built.warnings
        drawn = random_calibration_warning(self.calibration) if self.request.precision == "int8" else None
        if drawn:
            self.rep["warnings"].append(drawn)
        self.rep["notes"] += built.notes
        artifact = {**self.rep["artifact"], "path": str(self.out_path), "format": self.to,
                    "bytes": sum(size_on_disk(f) for f in files if f.exists())}
        if not built.same_graph:
            artifact["backend"] = built.facts
        if built.precision:
            artifact["precision"] = {"requested": self.request.precision, **built.precision}
        self.rep["artifact"] = artifact
        return (self.staged if built.same_graph else dest), built

    def check(self, src: "SourceModel", reference: Path, before, built, unoptimized: Path | None = None,
              full: Path | None = None, whole: Path | None = None) -> None:
        """The hops: source -> the ONNX model (in fp32: the graph before fp16 where ``full`` kept it); the
        adapters' (when they ran: the exporter's model against theirs); the optimizer's (with --optimize: the graph
        before it against the optimized one); the fp16 model's against that fp32 graph (``full``); and the
        backend's (unless its artifact is the ONNX model the first hop ran). The later hops tell which step made a
        difference the first hop found; each is judged by what its candidate computes. With a --split-tail cut, the
        first hop checks the ``whole`` model, the backend's the head (``reference``), and one more the artifact and
        the tail as one pipeline against the source."""
        from onnxbridge import runtime
        from onnxbridge.localize import hops as localizing
        from onnxbridge.records import HopKind
        from onnxbridge.validation import validate_hop

        graph = full or (whole if self.cut else reference)  # the fp32 graph the first hop checks
        opset = self.rep["artifact"]["opset"]
        count = self.request.samples
        if self.request.inputs is None and count < 2 and not src.dynamic and \
                any(TRACE_FROZE.search(w) for w in self.rep["warnings"]):
            # the export's own sample cannot show a value the trace froze: one more batch can (with --dynamic, the
            # batch at the second size is one)
            count = 2
            self.rep["notes"].append("the exporter warned that its trace may have frozen a value: validated on one "
                                     "more random batch besides the sample it traced")
        with self._stage("validate", "Validating against the source framework"):
            # the source model is let go before onnxruntime loads the weights, unless localization or latency
            # figures will run it again
            hop, used, source, onnx_runner = first_hop(src, graph, self.request.inputs, self.tol, self.rep, count,
                                                  self.request.seed, self.request.latency_runs,
                                                  release=self.localize == "off" and not self.request.latency_runs)
            self.hops.append(hop)
            adapted = onnx_runner if unoptimized is None else \
                runtime.open(unoptimized, what="the onnxruntime session of the graph before --optimize")
            if before is not None:  # attribute a difference to the exporter or to the opset adapters
                self.hops.append(onnx_hop(before, adapted, opset, used, self.tol, source))
            if unoptimized is not None:  # or to the optimizer
                self.hops.append(validate_hop(HopKind.OPTIMIZER, f"onnx@{opset}", f"onnx@{opset}:optimized", adapted,
                                              onnx_runner, used, onnx_runner.output_names, self.tol, source=source))
            del adapted
            if full is not None:  # the fp16 model as written, against the fp32 graph and its fp16 emulation
                written = runtime.open(reference, what=f"the onnxruntime session of {shown_name(reference)}")
                self.hops.append(validate_hop(
                    HopKind.PRECISION, f"onnx@{opset}", f"onnx@{opset}:{self.request.precision}", onnx_runner, written,
                    used, onnx_runner.output_names, self.tol, self.request.latency_runs, source=source,
                    emulation=fp16_emulation(full), computes=self.request.precision))
                del written
            if built is not None and not built.same_graph and self.cut:
                from onnxbridge.spine.splitting import split_hops

                self.hops += split_hops(src, self.to, self.staged, built.runner, self.cut["head"], self.cut["tail"],
                                        onnx_runner.output_names, used, self.tol, source, self.request.latency_runs,
                                        self.request.precision)
            elif built is not None and not built.same_graph:
                self.hops.append(backend_hop(self.to, onnx_runner, reference, self.staged, used, self.tol, built.runner,
                                             source, self.request.latency_runs, self.request.precision))
            del onnx_runner
        if self.localize == "off":
            return
        # each kind of hop is localized between the two graphs (or the graph and the artifact) it compared
        sides = {HopKind.ADAPTERS: lambda: (before[0], unoptimized or graph),
                 HopKind.OPTIMIZER: lambda: (unoptimized, graph), HopKind.PRECISION: lambda: (full, reference)}
        with self._stage("localize", "Localizing"):
            mapped_on = before[0] if before is not None else None
            for h in self.hops:
                if h.kind is HopKind.PIPELINE:  # its backend hop localizes the head; the tail is onnxruntime's
                    continue
                tol = localizing.tolerance_of(h)
                if h.kind is HopKind.SOURCE:
                    make = lambda h=h, tol=tol: localizing.source_to_onnx(  # noqa: E731
                        src, graph, used_by(h, used), tol, mapped_on)
                elif h.kind in sides:
                    make = lambda h=h, tol=tol: localizing.onnx_to_onnx(  # noqa: E731
                        *sides[h.kind](), used_by(h, used), tol)
                else:
                    make = lambda h=h, tol=tol: localizing.onnx_to_backend(  # noqa: E731
                        self.to, reference, self.staged, used_by(h, used), tol)
                localizing.attach(h, self.localize, make, self.steps)


def random_calibration_warning(calibration: Any) -> str | None:
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
