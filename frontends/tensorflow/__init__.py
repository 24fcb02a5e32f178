"""TensorFlow frontend: SavedModel folders, Keras 3 ``.keras`` / legacy ``.h5``, live ``keras.Model``,
``tf.function`` and ``tf.Module``, and ``.tflite`` files; converted with tf2onnx, checked against TF."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnxbridge.options import Option
from onnxbridge.registry import Plugin
from onnxbridge.specs import DynamicAxis, TensorSpec

PLUGIN = Plugin("tensorflow", "onnxbridge.frontends.tensorflow", requires=("tensorflow", "tf2onnx"),
                extra="tensorflow", priority=20,
                description="TensorFlow SavedModel, Keras .keras/.h5, tf.keras.Model, tf.function, .tflite",
                node_kind="Keras layer",
                options=(Option("signature", "SavedModel signature to convert (default: serving_default).",
                                metavar="NAME"),
                         Option("inputs_as_nchw", "Take this NHWC input as NCHW in the ONNX model (repeatable).",
                                multiple=True, metavar="NAME")))

NAME = "tensorflow"
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
SUFFIXES = (*KERAS_SUFFIXES, ".tflite")


def is_saved_model(path: Path) -> bool:
    return path.is_dir() and (path / "saved_model.pb").is_file()


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        path = Path(source)
        return path.suffix.lower() in SUFFIXES or is_saved_model(path)
    return any(c.__module__.split(".")[0] in ("tensorflow", "keras", "tf_keras") for c in type(source).__mro__)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0, signature: str | None = None, inputs_as_nchw: Sequence[str] = ()):
    common = {"sample_inputs": sample_inputs, "input_shapes": input_shapes, "dynamic": dynamic,
              "inputs_as_nchw": list(inputs_as_nchw), "seed": seed}
    if isinstance(source, (str, Path)) and Path(source).suffix.lower() == ".tflite":
        from onnxbridge.frontends.tensorflow.tflite import TFLiteModel

        return TFLiteModel(Path(source), signature=signature, trust=trust, **common)
    from onnxbridge.frontends.tensorflow.model import TFModel
    from onnxbridge.frontends.tensorflow.sources import resolve

    return TFModel(resolve(source, signature=signature, trust=trust, sample_inputs=sample_inputs,
                           input_names=input_names), **common)
