"""A TF source as a SourceModel: tf2onnx export of a flat tf.function, reference runs in TF."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

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
# weights above this many bytes take tf2onnx's large-model path (default: onnxio.EXTERNAL_DATA_THRESHOLD, under
# protobuf's 2 GiB cap on the GraphDef tf2onnx freezes and the ModelProto it builds)
LARGE_MODEL_ENV = "ONNXBRIDGE_TF_LARGE_MODEL_BYTES"
WEIGHTS_FILE = "tf2onnx-weights.bin"  # in the export folder (the spine's own detach writes weights.bin)
_ALIGN = 4096


def large_model_threshold() -> int:
    """Weight bytes above which ``TFModel.export`` uses tf2onnx's large-model path (``$ONNXBRIDGE_TF_LARGE_MODEL_BYTES``
    overrides the default)."""
    from onnxbridge.onnxio import EXTERNAL_DATA_THRESHOLD

    value = os.environ.get(LARGE_MODEL_ENV, "").strip()
    if not value:
        return EXTERNAL_DATA_THRESHOLD
    try:
        return int(value)
    except ValueError:
        raise BadInputError(f"{LARGE_MODEL_ENV}={value!r} is not a number of bytes") from None


def weight_bytes(concrete) -> int:
    """Bytes of the variables and captured constants ``concrete`` reads: what freezing writes into the graph."""
    def nbytes(t) -> int:
        try:
            return int(t.shape.num_elements() or 0) * t.dtype.size
        except (TypeError, ValueError):  # unknown shape, or a dtype with no fixed size (strings)
            return 0

    total = sum(nbytes(v) for v in concrete.graph.variables)
    for external, _ in concrete.graph.captures:
        if external.dtype.name != "resource" and callable(getattr(external, "numpy", None)):
            total += nbytes(external)
    return total


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n:,} bytes"


class ExternalWriter:
    """tf2onnx's large-model path, written straight to disk: while active, tf2onnx's ``Node.get_value_attr`` (what
    ``make_model`` calls for every constant when given an ExternalTensorStorage) writes each constant over the
    storage's size threshold to ``folder/tf2onnx-weights.bin`` (page-aligned) as it reaches it, and points that
    node's tensor there in place. tf2onnx's own version deep-copies every such tensor and keeps a second copy of
    its bytes in the storage for the whole export (two extra copies of the weights); it also calls ``np.product``,
    which numpy 2 removed.

    Also, each of tf2onnx's optimizer passes (a dozen per round, two rounds or more) ends with ``update_proto`` on
    every node, which copies a constant's tensor into its NodeProto again; protobuf's arena keeps every earlier
    copy, so a 270 MB model peaked at 8.6 GB. A constant's NodeProto is only read when ``make_model`` rebuilds
    it (with the storage), so the passes skip constants while the writer is active."""

    def __init__(self, folder: Path):
        self.path = folder / WEIGHTS_FILE
        self.offset = self.total = 0

    def __enter__(self) -> Self:
        import tf2onnx.graph

        self.file = open(self.path, "wb")  # closed in __exit__
        self.original = tf2onnx.graph.Node.get_value_attr
        writer = self

        def get_value_attr(node, external_tensor_storage=None):
            return writer.value_attr(node, external_tensor_storage)

        def update_proto(node, external_tensor_storage=None):
            if external_tensor_storage is None and node.is_const():
                return  # an optimizer pass: make_model rebuilds a constant's proto (see the class docstring)
            return writer.original_update(node, external_tensor_storage)

        self.original_update = tf2onnx.graph.Node.update_proto
        tf2onnx.graph.Node.get_value_attr = get_value_attr
        tf2onnx.graph.Node.update_proto = update_proto
        return self

    def __exit__(self, *exc) -> None:
        import tf2onnx.graph

        tf2onnx.graph.Node.get_value_attr = self.original
        tf2onnx.graph.Node.update_proto = self.original_update
        self.file.close()

    def value_attr(self, node, storage):
        from onnx import AttributeProto, TensorProto

        a = node.attr["value"]
        t = a.t
        if storage is None or a.type != AttributeProto.TENSOR or t.data_location == TensorProto.EXTERNAL or \
                int(np.prod(t.dims)) <= storage.external_tensor_size_threshold or not t.HasField("raw_data"):
            return a
        raw = t.raw_data
        self.file.write(b"\0" * (-self.offset % _ALIGN))
        self.offset += -self.offset % _ALIGN
        self.file.write(raw)
        start, length = self.offset, len(raw)
        self.offset += length
        self.total += length
        del raw
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", WEIGHTS_FILE), ("offset", str(start)), ("length", str(length))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        return a


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

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
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
        concrete = flat.get_concrete_function()
        size = weight_bytes(concrete)
        large = size > large_model_threshold()

        writer = ExternalWriter(workdir)

        def convert(large: bool):
            with native_output_silenced(), quiet(warnings, LOGGERS), writer if large else contextlib.nullcontext():
                return tf2onnx.convert.from_function(flat, input_signature=specs, opset=use, large_model=large,
                                                     inputs_as_nchw=[f"{n}:0" for n in self.nchw] or None)
        try:
            try:
                proto, storage = convert(large)
            except ValueError as exc:  # constants built inside the graph took it past protobuf's cap
                if large or "2GB" not in str(exc).replace(" ", ""):
                    raise
                large = True
                proto, storage = convert(large)
        except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
            raise ExportError(f"tf2onnx failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None
        base_dir = None
        del storage  # empty: the writer wrote the large tensors
        if large:
            base_dir = workdir
            written = writer.total
            threshold = large_model_threshold()
            why = f"{_size(size)} of weights (over {_size(threshold)})" if size > threshold else \
                "the frozen graph is over protobuf's 2 GB cap"
            notes.append(f"{why}: exported through tf2onnx's large-model path, {_size(written)} of tensors kept "
                         "outside the protobuf")
        fold_captured_constants(proto, concrete, [s.name for s in self.tf_specs], notes)
        order_outputs(proto.graph, names, output_names)
        notes.extend(standardize(proto))  # TF ops tf2onnx leaves verbatim (Erfc from gelu, ...) -> standard ONNX
        if output_names:
            self.output_names = list(output_names)
        return Exported(proto, base_dir, f"tf2onnx {tf2onnx.__version__}", notes, warnings)

    def probe(self, model: onnx.ModelProto) -> Sides | None:
        """Keras layer outputs matched to ``model``'s tensors (``frontends/tensorflow/probe.py``); None for a
        SavedModel, TFLite file or tf.function, which record no layers."""
        from onnxbridge.frontends.tensorflow.probe import keras_sides

        return keras_sides(self, model)

    def release(self) -> None:
        """Let go of the TF function and what it holds (a loaded SavedModel's variables), so that its weights are
        freed before onnxruntime loads the ONNX model's; a live model the caller passed stays theirs. ``run`` and
        ``export`` fail after this. Traced functions hold their captured variables in reference cycles: they go
        when the spine collects garbage next."""
        self.fn = None

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        tf = import_tf()
        tensors = []
        for s in self.tf_specs:
            a = np.asarray(feeds[s.name])
            tensors.append(tf.constant(to_nhwc(a) if s.name in self.nchw else a))
        return [np.asarray(t) for t in self.fn.call(tensors)]
