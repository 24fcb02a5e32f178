"""onnxruntime, the reference runtime: sessions, input specs and runs with clean errors.

Sessions are made and run in the worker process (``open``), so a crash inside onnxruntime is an error here; the
in-process helpers (``session``, ``run``) are what the worker, backend builds and folding use there.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from onnxbridge.errors import BadInputError, UnsupportedError, listing
from onnxbridge.specs import TensorSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnxruntime

_ORT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
               "tensor(bfloat16)": "bfloat16", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
               "tensor(int16)": "int16", "tensor(uint16)": "uint16", "tensor(int32)": "int32",
               "tensor(uint32)": "uint32", "tensor(int64)": "int64", "tensor(uint64)": "uint64",
               "tensor(bool)": "bool", "tensor(string)": "str"}


def session(model: "str | Path | onnx.ModelProto | bytes", *, optimize: bool = True,
            base_dir: "str | Path | None" = None) -> "onnxruntime.InferenceSession":
    """A CPU session; load failures (unsupported opset, IR, op) become UnsupportedError. ``base_dir``: where a
    serialized model's external data lives."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # its own warnings would reach the terminal beside our one-line errors
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads must not slow the others
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if base_dir is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(base_dir))
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else \
        model if isinstance(model, bytes) else str(model)
    try:
        return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        msg = re.sub(r"/onnxruntime_src/\S+:\d+ \S+?\(.*?\) ", "", " ".join(str(exc).split()))  # C++ frames
        raise UnsupportedError(f"onnxruntime {ort.__version__} cannot load the model: {msg[:400]}") from None


def input_specs(sess: "onnxruntime.InferenceSession") -> list[TensorSpec]:
    return [TensorSpec(i.name, tuple(d if isinstance(d, int) else (d or None) for d in i.shape),
                       _ORT_DTYPES.get(i.type, "float32")) for i in sess.get_inputs()]


def output_names(sess: "onnxruntime.InferenceSession") -> list[str]:
    return [o.name for o in sess.get_outputs()]


def match_feeds(names: list[str], feeds: Mapping[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
    """Feeds for the model's inputs: by name; by position when no name matches and counts agree.

    Feeds the model does not take (inputs an exporter pruned as unused) are left out.
    """
    if all(n in feeds for n in names):
        return {n: feeds[n] for n in names}
    if not any(n in feeds for n in names) and len(feeds) == len(names):
        return dict(zip(names, feeds.values()))
    missing = [n for n in names if n not in feeds]
    raise BadInputError(f"inputs do not match the ONNX model: missing {listing(missing)}; model inputs are "
                        f"{listing(names)}, given {listing(feeds)}")


def run(sess: "onnxruntime.InferenceSession", feeds: Mapping[str, "np.ndarray"]) -> list["np.ndarray"]:
    import numpy as np

    names = [i.name for i in sess.get_inputs()]
    matched = match_feeds(names, feeds)
    out = sess.run(None, {n: np.require(v, requirements="C") for n, v in matched.items()})
    return [np.asarray(o) for o in out]


FP16_FILE_FACTOR = 2.0  # how many times the fp16 emulation's error an fp16 ONNX file may err


class Session:
    """An onnxruntime CPU session as a runner (made in the worker by ``open``).

    A model that computes in fp16 is first loaded once with default session options (the artifact must load as a
    user would load it; onnxruntime has crashed on fp16 graphs there), then run as ``emulation.of_fp16_file``
    rewrites it, so every intermediate really is fp16: onnxruntime's CPU provider would otherwise compute chains of
    fp16 ops in fp32. Where a value leaves fp16's range, the node-by-node evaluator (``fp16eval``) names the node.

    ``emulate="fp16"``: the model is an fp32 graph and the runner is its fp16 emulation (``emulation.of_fp32_graph``),
    the yardstick a reduced-precision hop's error is measured against.
    """

    def __init__(self, model: "str | bytes", *, optimize: bool = True, fp16: bool | None = None,
                 emulate: str | None = None):
        import onnx
        import onnxruntime as ort

        from onnxbridge import emulation, wellformed
        from onnxbridge.fp16eval import computes_in_fp16
        from onnxbridge.inplace import load_in_place

        source = model if isinstance(model, str) else onnx.load_from_string(model)
        # A file's large weights are neither parsed here nor copied by onnxruntime: the skeleton marks them as
        # external data located in the file itself, which onnxruntime maps into memory (GPT-2's 0.5 GB: session
        # 1.8 s -> 0.9 s, worker peak 850 -> 590 MB); the graph is the file's, byte for byte the same weights.
        skeleton = load_in_place(source) if isinstance(source, str) else source
        wellformed.vet_here(skeleton, f"'{Path(source).name}'" if isinstance(source, str) else "the model")
        base_dir = Path(source).resolve().parent if isinstance(source, str) else None
        self.source = source
        self.fp16 = computes_in_fp16(skeleton) if fp16 is None else fp16
        self.compute_precision = "fp16" if self.fp16 or emulate else "fp32"
        self._nodes = None  # the node-by-node evaluator: made when needed
        self._rounded = None  # the session on the rounded graph (fp16 files, emulations)
        self.last_notes: list[str] = []
        self.last_seconds: float | None = None
        version = f"onnxruntime {ort.__version__} CPU"
        if emulate:
            if self.fp16:
                raise BadInputError("an fp16 emulation is made of an fp32 graph; this model computes in fp16")
            self._rounded = session(emulation.of_fp32_graph(skeleton).SerializeToString(), base_dir=base_dir)
            self._session = None
            self.what_ran = (f"{version}: an fp16 emulation of the fp32 graph (inputs, weights and every float "
                             "value rounded to fp16 between ops, each op computed in fp32)")
        else:
            self._session = session(skeleton.SerializeToString(), optimize=optimize, base_dir=base_dir) \
                if isinstance(source, str) else session(source, optimize=optimize)
        self.input_specs = input_specs(self._session or self._rounded)
        self.output_names = output_names(self._session or self._rounded)
        if self.fp16:
            # its arithmetic is the emulation's (fp16 storage, fp32 inside each op): it may differ only where an op
            # was kept in fp32 or has a native fp16 kernel (measured: at most 1.1x rel rms, 1.3x max abs on 41 zoo
            # models), so its budget is tighter than a backend's
            self.emulation_factor = FP16_FILE_FACTOR
            try:
                self._rounded = session(emulation.of_fp16_file(skeleton).SerializeToString(), base_dir=base_dir)
                self.what_ran = (f"{version} on the fp16 graph with every fp16 value stored as fp16 (Casts after "
                                 "each op: rounded, inf beyond ±65504), each op computed in fp32; latency: the "
                                 "file in a default session")
            except emulation.CannotEmulate as exc:
                self._node_evaluator()
                control = self._nodes.control_flow
                self.what_ran = (f"{version}, one node at a time so every intermediate is stored in fp16 "
                                 f"({exc}); each op computes as its CPU kernel does"
                                 + (f"; inside {', '.join(control)} bodies onnxruntime's own precision"
                                    if control else "") + "; latency: the file in a default session")
        elif not emulate:
            self.what_ran = version + ("" if optimize else ", optimizations off")
        del skeleton

    def _node_evaluator(self):
        from onnxbridge.fp16eval import Fp16Evaluator

        if self._nodes is None:
            self._nodes = Fp16Evaluator(self.source)
        return self._nodes

    def __call__(self, feeds: Mapping[str, "np.ndarray"]) -> list["np.ndarray"]:
        """The outputs on ``feeds`` (fp16 graphs and emulations: their rounded graph, or node by node; then
        ``last_seconds`` is None, since that is not how fast the model runs: ``fresh`` times the file itself)."""
        import time

        import numpy as np

        if not self.fp16 and self._rounded is None:
            t = time.perf_counter()
            out = run(self._session, feeds)
            self.last_seconds = time.perf_counter() - t
            return out
        self.last_notes, self.last_seconds = [], None
        if self._rounded is not None:
            out = run(self._rounded, feeds)
            if self.fp16 and not all(np.isfinite(o).all() for o in out if o.dtype.kind == "f"):
                nodes = self._node_evaluator()  # name the node where a value left fp16's range
                nodes(match_feeds([s.name for s in self.input_specs], feeds))
                self.last_notes = list(nodes.last_notes)
            return out
        out = self._nodes(match_feeds([s.name for s in self.input_specs], feeds))
        self.last_notes = list(self._nodes.last_notes)
        return [np.asarray(o) for o in out]

    def fresh(self, feeds: Mapping[str, "np.ndarray"]) -> list["np.ndarray"]:
        """A run of the file as written, in its own session (what latency figures time)."""
        return run(self._session or self._rounded, feeds)


def open(model: "str | Path | onnx.ModelProto", *, optimize: bool = True, fp16: bool | None = None,
         what: str | None = None, emulate: str | None = None):
    """An onnxruntime session on ``model`` in the worker process: a runner with ``input_specs`` and
    ``output_names`` (``emulate="fp16"``: the fp16 emulation of an fp32 model). A crash while it is made or run
    raises NativeCrash naming ``what`` (default: the file)."""
    from onnxbridge.registry import dist_version
    from onnxbridge.worker import RunnerSpec, open_runner

    arg = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    name = what or (f"the onnxruntime session of {Path(model).name}" if isinstance(model, (str, Path))
                    else "an onnxruntime session")
    spec = RunnerSpec("onnxbridge.runtime:Session", {"model": arg, "optimize": optimize, "fp16": fp16,
                                                     "emulate": emulate},
                      library=f"onnxruntime {dist_version('onnxruntime')}")
    return open_runner(spec, name)


def fold_constants(src: Path, dest: Path, *, external_data: bool = False) -> None:
    """Write ``src`` with onnxruntime's basic graph optimizations applied (constant folding, redundant-node
    removal, Conv+BN/Add/Mul fusion) to ``dest``: plain ONNX, not tied to a provider (``external_data``: weights
    beside it in DEST.data, for models over 2 GB). Raises onnxruntime's error when it cannot load the model."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dest)
    so.log_severity_level = 3
    if external_data:
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{Path(dest).name}.data")
    ort.InferenceSession(str(src), sess_options=so, providers=["CPUExecutionProvider"])
