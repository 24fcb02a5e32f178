"""PaddlePaddle frontend: a live ``paddle.nn.Layer`` (with InputSpecs or sample arrays) and inference
models from ``paddle.jit.save`` (``.json`` PIR or legacy ``.pdmodel``, each with ``.pdiparams``), converted
with paddle2onnx in a child process and checked against Paddle."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from onnxbridge.specs import DynamicAxis, TensorSpec

NAME = "paddle"
OPTIONS = ()
PARAMS = ".pdiparams"


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return any(path.glob(f"*{PARAMS}"))
        suffix = path.suffix.lower()
        return suffix in (".pdmodel", PARAMS) or (suffix == ".json" and path.with_suffix(PARAMS).exists())
    return any(c.__module__.split(".")[0] == "paddle" for c in type(source).__mro__)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0):
    from onnxbridge.frontends.paddle.model import PaddleModel

    return PaddleModel(source, sample_inputs=sample_inputs, input_shapes=input_shapes, dynamic=dynamic,
                       input_names=input_names, seed=seed)
