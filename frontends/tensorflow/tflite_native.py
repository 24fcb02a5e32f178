"""What runs TFLite's native code, called in the worker (``onnxbridge.worker``): the interpreter (the file's inputs
and outputs, the reference runs) and tf2onnx's TFLite path, which builds an interpreter of its own. A crafted file
that crashes them, or a WHILE that never ends, is then an error of that step, not the end of the run."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from onnxbridge.errors import BadInputError, ExportError
from onnxbridge.frontends.tensorflow.tfimport import LOGGERS, import_tf
from onnxbridge.quiet import native_output_silenced, quiet


def interpreter(path: str):
    """The TFLite interpreter on ``path``, with the built-in kernels only (no XNNPACK delegate: its own numerics,
    and a banner on stderr)."""
    tf = import_tf()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resolver = tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
            return tf.lite.Interpreter(model_path=path, experimental_op_resolver_type=resolver)
    except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
        raise _not_tflite(path, exc) from None


def _not_tflite(path: str, exc: Exception) -> BadInputError:
    return BadInputError(f"'{Path(path).name}' is not a TFLite model: {' '.join(str(exc).split())[:200]}")


def _detail(detail: Mapping) -> dict:
    return {"shape": [int(d) for d in detail.get("shape_signature", detail["shape"])],
            "dtype": np.dtype(detail["dtype"]).name}


def describe(path: str, signature: str | None) -> dict:
    """``signature``'s inputs and outputs (without one, subgraph 0's), in the interpreter's order: ``inputs`` maps
    each input's name to its shape (-1: unknown) and dtype, ``outputs`` lists the output names, ``tensor_names``
    maps the file's tensor names to them."""
    it = interpreter(path)
    try:
        if signature is not None:
            listed = it.get_signature_list()[signature]
            runner = it.get_signature_runner(signature)
            ins, outs = runner.get_input_details(), runner.get_output_details()
            ins, outs = [(n, ins[n]) for n in listed["inputs"]], [(n, outs[n]) for n in listed["outputs"]]
        else:
            it.allocate_tensors()
            ins, outs = it.get_input_details(), it.get_output_details()
            ins, outs = [(d["name"], d) for d in ins], [(d["name"], d) for d in outs]
    except (KeyError, ValueError, RuntimeError) as exc:  # what the interpreter raises on a file it cannot prepare
        raise _not_tflite(path, exc) from None
    return {"inputs": {n: _detail(d) for n, d in ins}, "outputs": [n for n, _ in outs],
            "tensor_names": {d["name"]: n for n, d in [*ins, *outs]}}


class Reference:
    """The interpreter on ``signature`` (None: subgraph 0), called with name -> array feeds; returns ``outputs``."""

    def __init__(self, path: str, signature: str | None, outputs: list[str]):
        self.interpreter = interpreter(path)
        self.runner = self.interpreter.get_signature_runner(signature) if signature is not None else None
        self.outputs = list(outputs)

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        if self.runner is not None:
            result = self.runner(**feeds)
            return [np.asarray(result[n]) for n in self.outputs]
        it = self.interpreter
        for d in it.get_input_details():
            it.resize_tensor_input(d["index"], feeds[d["name"]].shape)
        it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], feeds[d["name"]])
        it.invoke()
        return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def from_tflite(path: str, opset: int, inputs_as_nchw: list[str] | None, shown: str) -> tuple[bytes, list[str]]:
    """tf2onnx's conversion of the file at ``path`` (``shown`` in messages): the serialized ONNX model and the
    warnings it raised."""
    import_tf()
    import tf2onnx

    caught: list[str] = []
    try:
        with native_output_silenced(), quiet(caught, LOGGERS):
            proto, _ = tf2onnx.convert.from_tflite(path, opset=opset, inputs_as_nchw=inputs_as_nchw)
    except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
        raise ExportError(f"tf2onnx failed on {shown}: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:400]}") from None
    return proto.SerializeToString(), caught
