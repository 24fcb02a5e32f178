"""Every TF source as one flat function: named input specs in, named outputs out, in a fixed order."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnxbridge.frontends.tensorflow import KERAS_SUFFIXES, is_saved_model
from onnxbridge.frontends.tensorflow.signatures import choose_signature, output_names
from onnxbridge.frontends.tensorflow.tfimport import import_tf
from onnxbridge.frontends.tensorflow.unsafe_ops import check_saved_model

from onnxbridge.errors import BadInputError, UnsafeInputError
from onnxbridge.pathchecks import regular
from onnxbridge.specs import TensorSpec, as_arrays


@dataclass
class TFFunction:
    """``call`` takes TF tensors in ``specs`` order and returns the outputs in ``outputs`` order."""

    specs: list[TensorSpec]
    call: Callable[[list], list]
    outputs: list[str]
    kind: str
    description: str
    can_open: bool = True  # whether an axis the specs fix can be made dynamic (``call`` accepts other sizes)
    keras: Any = None  # the keras.Model behind ``call``, when it is one (localization reads its layers)


def resolve(source: Any, *, signature: str | None, trust: bool, sample_inputs: Any,
            input_names: Sequence[str] | None) -> TFFunction:
    tf = import_tf()
    if isinstance(source, (str, Path)):
        path = Path(source)
        if is_saved_model(path):
            return _saved_model(path, signature, trust)
        if path.suffix.lower() in KERAS_SUFFIXES:
            fn = _keras(_load_keras(path, trust), sample_inputs, input_names)
            fn.kind, fn.description = f"Keras {path.suffix}", f"Keras model {path.name}"
            return fn
        raise BadInputError(f"'{path}' is not a SavedModel folder (no saved_model.pb) or a Keras file")
    if signature is not None:
        raise BadInputError("--signature applies to SavedModel folders and .tflite files")
    import keras

    if isinstance(source, keras.Model):
        return _keras(source, sample_inputs, input_names)
    if isinstance(source, tf.types.experimental.PolymorphicFunction) or hasattr(source, "get_concrete_function"):
        return _function(source, sample_inputs, input_names, "tf.function")
    if isinstance(source, tf.Module) and callable(source) and hasattr(source.__call__, "get_concrete_function"):
        return _function(source.__call__, sample_inputs, input_names, "tf.Module")
    raise BadInputError(f"a {type(source).__name__} is not a keras.Model, tf.function or tf.Module with a "
                        "tf.function __call__")


def _load_keras(path: Path, trust: bool):
    import keras

    regular(path, "the Keras file")
    try:
        return keras.saving.load_model(str(path), compile=False, safe_mode=not trust)
    except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
        text = " ".join(str(exc).split())
        if "safe_mode" in text or "arbitrary code" in text:
            raise UnsafeInputError(f"{path.name} holds Python code (a Lambda layer) that would run on load; "
                                   "pass --trust only if you trust its source") from None
        raise BadInputError(f"cannot load Keras model '{path}': {type(exc).__name__}: {text[:300]}") from None


def _spec(name: str, shape, dtype) -> TensorSpec:
    dims = tuple(None if d is None or (isinstance(d, int) and d < 0) else int(d) for d in shape)
    return TensorSpec(name, dims, str(getattr(dtype, "name", dtype)))


def _sample_specs(sample_inputs: Any, names: list[str] | None, what: str, fix: str) -> list[TensorSpec]:
    if sample_inputs is None:
        raise BadInputError(f"this {what} has no input signature: pass sample inputs (or {fix})")
    if names is None:
        count = len(sample_inputs) if isinstance(sample_inputs, (list, tuple)) else 1
        names = ["x"] if count == 1 else [f"input_{i}" for i in range(count)]
    arrays = as_arrays(sample_inputs, names)
    return [_spec(n, a.shape, a.dtype) for n, a in arrays.items()]


def _keras(model, sample_inputs: Any, input_names: Sequence[str] | None) -> TFFunction:
    tf = import_tf()
    structure = _keras_inputs(model)
    if structure is not None:
        flat = tf.nest.flatten(structure)
        names = list(input_names) if input_names else [t.name for t in flat]
        if len(names) != len(flat):
            raise BadInputError(f"{len(names)} input names for {len(flat)} inputs")
        specs = [_spec(n, t.shape, t.dtype) for n, t in zip(names, flat)]

        def call(tensors: list) -> list:
            return tf.nest.flatten(model(tf.nest.pack_sequence_as(structure, tensors), training=False))
    else:
        specs = _sample_specs(sample_inputs, list(input_names) if input_names else None, "Keras model",
                              "build it on keras.Input")
        specs = [TensorSpec(s.name, (None, *s.shape[1:]) if s.shape else s.shape, s.dtype) for s in specs]

        def call(tensors: list) -> list:
            return tf.nest.flatten(model(tensors[0] if len(tensors) == 1 else tensors, training=False))
    count = len(call([tf.zeros([d or 1 for d in s.shape], s.dtype) for s in specs]))
    paths = [""] if count == 1 else [str(i) for i in range(count)]
    preferred = list(getattr(model, "output_names", None) or [])
    return TFFunction(specs, call, output_names(paths, preferred), "keras.Model",
                      f"Keras {type(model).__name__} '{model.name}'", keras=model)


def _keras_inputs(model):
    """The model's symbolic inputs in the structure its call takes; None for a subclassed or unbuilt model."""
    try:
        return model.input
    except (AttributeError, ValueError):
        pass
    try:  # a Sequential that starts with keras.Input has ``inputs`` but no ``input`` until called
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    return inputs[0] if inputs and len(inputs) == 1 else inputs or None


def _function(fn, sample_inputs: Any, input_names: Sequence[str] | None, kind: str) -> TFFunction:
    tf = import_tf()
    signature = getattr(fn, "input_signature", None)
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    if signature:
        flat = tf.nest.flatten(signature)
        names = list(input_names) if input_names else [s.name or (params[i] if i < len(params) else f"input_{i}")
                                                       for i, s in enumerate(flat)]
        if len(names) != len(flat):
            raise BadInputError(f"{len(names)} input names for {len(flat)} inputs")
        specs = [_spec(n, s.shape, s.dtype) for n, s in zip(names, flat)]
        structured = fn.get_concrete_function().structured_outputs
    else:
        names = list(input_names) if input_names else (params if sample_inputs is not None and
                                                       len(params) == _count(sample_inputs) else None)
        specs = _sample_specs(sample_inputs, names, kind, "give it an input_signature")
        structured = fn.get_concrete_function(*[tf.TensorSpec(s.shape, s.dtype) for s in specs]).structured_outputs
    paths = _paths(structured)

    def call(tensors: list) -> list:
        return tf.nest.flatten(fn(*tensors))
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "python_function", None), "__name__", "function")
    # an input_signature binds every call: an axis it fixes cannot be opened with --dynamic
    return TFFunction(specs, call, output_names(paths), kind, f"{kind} {name}", can_open=not signature)


def _count(sample: Any) -> int:
    return len(sample) if isinstance(sample, (list, tuple, dict)) else 1


def _paths(structure, prefix: str = "") -> list[str]:
    """Leaf paths in tf.nest order (dict keys sorted, then list indices); '' for a single tensor."""
    if isinstance(structure, dict):
        return [p for k in sorted(structure) for p in _paths(structure[k], f"{prefix}/{k}" if prefix else str(k))]
    if isinstance(structure, (list, tuple)):
        return [p for i, v in enumerate(structure) for p in _paths(v, f"{prefix}/{i}" if prefix else str(i))]
    return [prefix]


def _saved_model(path: Path, signature: str | None, trust: bool) -> TFFunction:
    """The chosen signature; without ``trust`` the SavedModel is checked statically before it is loaded."""
    tf = import_tf()
    if not trust:
        check_saved_model(path, signature)
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
        raise BadInputError(f"cannot load SavedModel '{path}': {' '.join(str(exc).split())[:300]}") from None
    signatures = dict(loaded.signatures)
    if not signatures:
        raise BadInputError(f"SavedModel '{path}' has no signatures to convert")
    signature = choose_signature(list(signatures), signature, f"SavedModel '{path}'")
    concrete = signatures[signature]
    args = concrete.structured_input_signature[1]
    specs = []
    for name, s in args.items():
        if s.shape.rank is None:
            raise BadInputError(f"signature input '{name}' has an unknown rank; give --input-shape {name}:D1,D2,...")
        specs.append(_spec(name, s.shape.as_list(), s.dtype))
    outs = _paths(concrete.structured_outputs)

    def call(tensors: list) -> list:
        result = concrete(**dict(zip(args, tensors)))
        return tf.nest.flatten(result)
    fn = TFFunction(specs, call, output_names(outs), "SavedModel", f"SavedModel {path.name} [{signature}]")
    fn.loaded = loaded  # keep the trackable objects (variables) alive
    return fn
