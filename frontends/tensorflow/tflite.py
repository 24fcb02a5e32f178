"""``.tflite`` files: tf2onnx's TFLite path for the export, the TFLite interpreter for reference runs. The file is
parsed here (its indices checked before any native code sees it); the interpreter, and tf2onnx which builds one,
run in the worker (``tflite_native``)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.frontends.tensorflow.model import order_outputs, tf2onnx_opset
from onnxbridge.frontends.tensorflow.signatures import (
    check_nchw,
    choose_signature,
    nchw_dynamic,
    nchw_spec,
    sample_for,
    to_nhwc,
)
from onnxbridge.frontends.tensorflow.standard_ops import standardize
from onnxbridge.frontends.tensorflow.tfimport import import_tf
from onnxbridge.frontends.tensorflow.tflite_graphs import TFLiteGraphs
from onnxbridge.frontends.tensorflow.unsafe_ops import check_tflite

from onnxbridge.errors import BadInputError, ExportError
from onnxbridge.pathchecks import regular
from onnxbridge.specs import DynamicAxis, TensorSpec, apply_overrides
from onnxbridge.worker import RunnerSpec, call, open_runner


NATIVE = "onnxbridge.frontends.tensorflow.tflite_native"
LIBRARY = "TFLite"


def _spec(name: str, detail: dict) -> TensorSpec:
    return TensorSpec(name, tuple(None if d < 0 else int(d) for d in detail["shape"]), detail["dtype"])


def _graphs(path: Path) -> TFLiteGraphs:
    """The parsed file, its indices checked."""
    try:
        graphs = TFLiteGraphs(path)
    except Exception as exc:  # noqa: BLE001 - a damaged flatbuffer fails in many ways
        raise BadInputError(f"'{path.name}' is not a TFLite model: {type(exc).__name__}: {exc}"[:300]) from None
    graphs.check_indices()
    return graphs


class TFLiteModel(SourceModel):
    frontend = "tensorflow"
    framework = "tensorflow"
    converter = "tf2onnx"
    kind = "TFLite"
    runs_in = "the worker process"

    def __init__(self, path: Path, *, signature: str | None, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
                 dynamic: Sequence[DynamicAxis], inputs_as_nchw: Sequence[str], seed: int, trust: bool = False):
        import_tf()
        regular(path, "the TFLite model")
        if not trust:
            check_tflite(path)
        self.path, self.description = path, f"TFLite model {path.name}"
        graphs = _graphs(path)
        signatures = graphs.signatures()
        if signatures:
            signature = choose_signature(signatures, signature, f"'{path.name}'")
            self.description += f" [{signature}]"
        elif signature is not None:
            raise BadInputError(f"'{path.name}' has no signatures (--signature does not apply)")
        self.signature = signature if signatures else None
        self.root = graphs.signature_subgraph(self.signature)  # tf2onnx converts subgraph 0 as the main graph
        seen = call(f"{NATIVE}:describe", (str(path), self.signature), step=f"reading the inputs of {path.name}",
                    library=LIBRARY)
        self.inputs, self.outputs, self.tensor_names = list(seen["inputs"]), seen["outputs"], seen["tensor_names"]
        specs = [_spec(n, d) for n, d in seen["inputs"].items()]
        self.runner = None  # the interpreter in the worker, opened by the first run
        graphs.check_ops(graphs.reachable(self.root))  # control flow tf2onnx cannot convert is refused, named
        del graphs
        self.tf_specs = apply_overrides(specs, input_shapes, dynamic, can_open=False)
        check_nchw(inputs_as_nchw, self.tf_specs)
        self.nchw = list(inputs_as_nchw)
        self.input_specs = [nchw_spec(s) if s.name in self.nchw else s for s in self.tf_specs]
        self.dynamic = nchw_dynamic(dynamic, self.tf_specs, self.nchw)
        self.sample = sample_for(self.tf_specs, sample_inputs, self.nchw, seed)
        self.output_names = list(self.outputs)

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        import_tf()
        import onnx
        import tf2onnx

        from onnxbridge.builder import rename_values

        notes: list[str] = []
        by_sig = {v: k for k, v in self.tensor_names.items()}
        path = self.path
        if self.root != 0:  # tf2onnx takes subgraph 0 as the main graph: convert a copy rooted at the signature's
            path = workdir / "signature.tflite"
            path.write_bytes(_graphs(self.path).rerooted(self.root))
            notes.append(f"converted the signature's subgraph {self.root} and the subgraphs it calls from a copy of "
                         "the file that starts with it")
        serialized, caught = call(f"{NATIVE}:from_tflite",
                                  (str(path), tf2onnx_opset(opset, notes), [by_sig[n] for n in self.nchw] or None,
                                   self.path.name), step=f"converting {self.path.name} with tf2onnx", library=LIBRARY)
        proto = onnx.ModelProto.FromString(serialized)
        graph_names = {v.name for v in [*proto.graph.input, *proto.graph.output]}
        if not {by_sig[n] for n in self.inputs + self.outputs} <= graph_names:
            raise ExportError(f"tf2onnx's graph of {self.path.name} lacks the signature's inputs or outputs")
        rename_values(proto.graph, {t: n for t, n in self.tensor_names.items() if t != n})
        order_outputs(proto.graph, self.outputs, output_names)
        notes.extend(standardize(proto))  # TF ops tf2onnx leaves verbatim -> standard ONNX, or refused by name
        if output_names:
            self.output_names = list(output_names)
        return Exported(proto, None, f"tf2onnx {tf2onnx.__version__}", notes, caught)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        arrays = {}
        for s in self.tf_specs:
            a = np.ascontiguousarray(feeds[s.name])
            arrays[s.name] = to_nhwc(a) if s.name in self.nchw else a
        if self.runner is None:
            spec = RunnerSpec(f"{NATIVE}:Reference", {"path": str(self.path), "signature": self.signature,
                                                        "outputs": self.outputs}, library=LIBRARY)
            self.runner = open_runner(spec, f"the TFLite interpreter on {self.path.name}")
        return self.runner(arrays)

    def release(self) -> None:
        """Let the worker free the interpreter (the spine calls this once nothing runs the source again)."""
        self.runner = None
