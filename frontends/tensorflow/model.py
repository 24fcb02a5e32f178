"""A TF source as a SourceModel: tf2onnx export of a flat tf.function, reference runs in TF."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.frontends.tensorflow.signatures import check_nchw, nchw_dynamic, nchw_spec, sample_for, to_nhwc
from onnxbridge.frontends.tensorflow.sources import TFFunction
from onnxbridge.frontends.tensorflow.standard_ops import standardize
from onnxbridge.frontends.tensorflow.tfimport import LOGGERS, import_tf

from onnxbridge.errors import BadInputError, ExportError
from onnxbridge.quiet import native_output_silenced, quiet
from onnxbridge.specs import DynamicAxis, TensorSpec, apply_overrides

if TYPE_CHECKING:
    import onnx

    from onnxbridge.localize.probe import Sides

MIN_OPSET, MAX_OPSET = 13, 18  # what tf2onnx 1.17 emits well; the builder adapts to anything else


def tf2onnx_opset(opset: int | None, notes: list[str]) -> int:
    """The opset to ask tf2onnx for: the requested one when it can emit it, else the nearest."""
    from tf2onnx import constants

    if opset is None:
        return constants.PREFERRED_OPSET
    use = min(max(opset, MIN_OPSET), MAX_OPSET)
    if use != opset:
        notes.append(f"tf2onnx exported at opset {use} (it emits {MIN_OPSET}-{MAX_OPSET}); adapted to {opset}")
    return use


def order_outputs(graph, names: Sequence[str], rename: Sequence[str] | None) -> None:
    """Put graph outputs in ``names`` order, then rename them to ``rename`` if given."""
    from onnxbridge.builder import rename_values

    by_name = {o.name: o for o in graph.output}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ExportError(f"tf2onnx lost output(s) {', '.join(missing)}")
    ordered = [by_name[n] for n in names]
    kept = [type(o)() for o in ordered]
    for k, o in zip(kept, ordered):
        k.CopyFrom(o)
    del graph.output[:]
    graph.output.extend(kept)
    if rename:
        if len(rename) != len(names):
            raise BadInputError(f"{len(rename)} output names for {len(names)} outputs ({', '.join(names)})")
        rename_values(graph, dict(zip(names, rename)))


def fold_captured_constants(proto, concrete, inputs: Sequence[str], notes: list[str]) -> None:
    """Make the constants the function captures (a Keras ``Normalization`` built with ``mean``/``variance``, any
    eager tensor a layer closes over) initializers: tf2onnx leaves them as extra graph inputs nobody feeds."""
    from onnx import numpy_helper

    extra = {i.name for i in proto.graph.input} - set(inputs)
    if not extra:
        return
    values = {}
    for external, internal in concrete.graph.captures:
        name = internal.name.removesuffix(":0")
        value = getattr(external, "numpy", None)  # eager constants have one; resources and symbols do not
        if (internal.name in extra or name in extra) and callable(value) and external.dtype.name != "resource":
            values[internal.name if internal.name in extra else name] = np.asarray(value())
    if not values:
        return
    kept = [i for i in proto.graph.input if i.name not in values]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    proto.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in values.items())
    notes.append(f"{len(values)} captured constant(s) tf2onnx left as graph inputs made initializers")


class TFModel(SourceModel):
    frontend = "tensorflow"
    framework = "tensorflow"
    converter = "tf2onnx"

    def __init__(self, fn: TFFunction, *, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
                 dynamic: Sequence[DynamicAxis], inputs_as_nchw: Sequence[str], seed: int):
        self.fn = fn
        self.kind, self.description = fn.kind, fn.description
        self.tf_specs = apply_overrides(fn.specs, input_shapes, dynamic, can_open=fn.can_open)
        check_nchw(inputs_as_nchw, self.tf_specs)
        self.nchw = list(inputs_as_nchw)
        self.input_specs = [nchw_spec(s) if s.name in self.nchw else s for s in self.tf_specs]
        self.dynamic = nchw_dynamic(dynamic, self.tf_specs, self.nchw)
        self.sample = sample_for(self.tf_specs, sample_inputs, self.nchw, seed)
        self.output_names: list[str] = list(fn.outputs)

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None,
               exporter: str = "auto") -> Exported:
        tf = import_tf()
        import tf2onnx

        notes: list[str] = []
        warnings: list[str] = []
        specs = [tf.TensorSpec(s.shape, s.dtype, name=s.name) for s in self.tf_specs]
        fn, names = self.fn, self.fn.outputs

        @tf.function(input_signature=specs)
        def flat(*tensors):
            return {n: tf.identity(t) for n, t in zip(names, fn.call(list(tensors)))}

        use = tf2onnx_opset(opset, notes)
        try:
            with native_output_silenced(), quiet(warnings, LOGGERS):
                proto, _ = tf2onnx.convert.from_function(flat, input_signature=specs, opset=use,
                                                         inputs_as_nchw=[f"{n}:0" for n in self.nchw] or None)
        except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
            raise ExportError(f"tf2onnx failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None
        fold_captured_constants(proto, flat.get_concrete_function(), [s.name for s in self.tf_specs], notes)
        order_outputs(proto.graph, names, output_names)
        notes.extend(standardize(proto))  # TF ops tf2onnx leaves verbatim (Erfc from gelu, ...) -> standard ONNX
        if output_names:
            self.output_names = list(output_names)
        return Exported(proto, None, f"tf2onnx {tf2onnx.__version__}", notes, warnings)

    def probe(self, model: onnx.ModelProto) -> Sides | None:
        """Keras layer outputs matched to ``model``'s tensors (``frontends/tensorflow/probe.py``); None for a
        SavedModel, TFLite file or tf.function, which record no layers."""
        from onnxbridge.frontends.tensorflow.probe import keras_sides

        return keras_sides(self, model)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        tf = import_tf()
        tensors = []
        for s in self.tf_specs:
            a = np.asarray(feeds[s.name])
            tensors.append(tf.constant(to_nhwc(a) if s.name in self.nchw else a))
        return [np.asarray(t) for t in self.fn.call(tensors)]
