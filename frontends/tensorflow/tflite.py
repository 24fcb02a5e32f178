"""``.tflite`` files: tf2onnx's TFLite path for the export, the TFLite interpreter for reference runs."""
from __future__ import annotations

import warnings
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
from onnxbridge.frontends.tensorflow.tfimport import LOGGERS, import_tf
from onnxbridge.frontends.tensorflow.tflite_graphs import TFLiteGraphs
from onnxbridge.frontends.tensorflow.unsafe_ops import check_tflite

from onnxbridge.errors import BadInputError, ExportError
from onnxbridge.quiet import native_output_silenced, quiet
from onnxbridge.specs import DynamicAxis, TensorSpec, apply_overrides


def _spec(name: str, detail: dict) -> TensorSpec:
    dims = detail.get("shape_signature", detail["shape"])
    return TensorSpec(name, tuple(None if d < 0 else int(d) for d in dims), np.dtype(detail["dtype"]).name)


def _graphs(path: Path) -> TFLiteGraphs:
    try:
        return TFLiteGraphs(path)
    except Exception as exc:  # noqa: BLE001 - a damaged flatbuffer fails in many ways
        raise BadInputError(f"'{path.name}' is not a TFLite model: {type(exc).__name__}: {exc}"[:300]) from None


class TFLiteModel(SourceModel):
    frontend = "tensorflow"
    framework = "tensorflow"
    converter = "tf2onnx"
    kind = "TFLite"

    def __init__(self, path: Path, *, signature: str | None, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
                 dynamic: Sequence[DynamicAxis], inputs_as_nchw: Sequence[str], seed: int, trust: bool = False):
        tf = import_tf()
        if not path.is_file():
            raise BadInputError(f"'{path}' does not exist")
        if not trust:
            check_tflite(path)
        self.path, self.description = path, f"TFLite model {path.name}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # the built-in kernels only: no XNNPACK delegate (its own numerics, and a banner on stderr)
                resolver = tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                self.interpreter = tf.lite.Interpreter(model_path=str(path), experimental_op_resolver_type=resolver)
        except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
            raise BadInputError(f"'{path.name}' is not a TFLite model: {' '.join(str(exc).split())[:200]}") from None
        signatures = self.interpreter.get_signature_list()
        self.runner = None
        graphs = _graphs(path)
        self.root = 0  # the subgraph the chosen signature runs (tf2onnx converts subgraph 0 as the main graph)
        if signatures:
            signature = choose_signature(list(signatures), signature, f"'{path.name}'")
            self.root = graphs.signature_subgraph(signature)
            self.runner = self.interpreter.get_signature_runner(signature)
            ins, outs = self.runner.get_input_details(), self.runner.get_output_details()
            self.inputs = list(signatures[signature]["inputs"])
            self.outputs = list(signatures[signature]["outputs"])
            specs = [_spec(n, ins[n]) for n in self.inputs]
            self.tensor_names = {ins[n]["name"]: n for n in self.inputs} | {outs[n]["name"]: n for n in self.outputs}
            self.description += f" [{signature}]"
        else:
            if signature is not None:
                raise BadInputError(f"'{path.name}' has no signatures (--signature does not apply)")
            self.interpreter.allocate_tensors()
            ins, outs = self.interpreter.get_input_details(), self.interpreter.get_output_details()
            self.inputs, self.outputs = [d["name"] for d in ins], [d["name"] for d in outs]
            specs = [_spec(d["name"], d) for d in ins]
            self.tensor_names = {n: n for n in self.inputs + self.outputs}
        graphs.check_ops(graphs.reachable(self.root))  # control flow tf2onnx cannot convert is refused, named
        del graphs
        self.tf_specs = apply_overrides(specs, input_shapes, dynamic, can_open=False)
        check_nchw(inputs_as_nchw, self.tf_specs)
        self.nchw = list(inputs_as_nchw)
        self.input_specs = [nchw_spec(s) if s.name in self.nchw else s for s in self.tf_specs]
        self.dynamic = nchw_dynamic(dynamic, self.tf_specs, self.nchw)
        self.sample = sample_for(self.tf_specs, sample_inputs, self.nchw, seed)
        self.output_names = list(self.outputs)

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None,
               exporter: str = "auto") -> Exported:
        import_tf()
        import tf2onnx

        from onnxbridge.builder import rename_values

        notes: list[str] = []
        caught: list[str] = []
        by_sig = {v: k for k, v in self.tensor_names.items()}
        path = self.path
        if self.root != 0:  # tf2onnx takes subgraph 0 as the main graph: convert a copy rooted at the signature's
            path = workdir / "signature.tflite"
            path.write_bytes(_graphs(self.path).rerooted(self.root))
            notes.append(f"converted the signature's subgraph {self.root} and the subgraphs it calls from a copy of "
                         "the file that starts with it")
        try:
            with native_output_silenced(), quiet(caught, LOGGERS):
                proto, _ = tf2onnx.convert.from_tflite(
                    str(path), opset=tf2onnx_opset(opset, notes),
                    inputs_as_nchw=[by_sig[n] for n in self.nchw] or None)
        except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
            raise ExportError(f"tf2onnx failed on {self.path.name}: {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:400]}") from None
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
        if self.runner is not None:
            result = self.runner(**arrays)
            return [np.asarray(result[n]) for n in self.outputs]
        it = self.interpreter
        details = it.get_input_details()
        for d in details:
            it.resize_tensor_input(d["index"], arrays[d["name"]].shape)
        it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], arrays[d["name"]])
        it.invoke()
        return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]
