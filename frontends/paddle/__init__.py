"""PaddlePaddle frontend: a live ``paddle.nn.Layer`` (with InputSpecs or sample arrays) and inference
models from ``paddle.jit.save`` (``.json`` PIR or legacy ``.pdmodel``, each with ``.pdiparams``), named by
the program file, the weights file, the path prefix or a folder holding one model; converted with
paddle2onnx in a child process (from an environment of its own where it is not installed here: see
``environment``) and checked against Paddle."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnxbridge.registry import Plugin, Setup
from onnxbridge.specs import DynamicAxis, TensorSpec

# paddle2onnx pins onnx<=1.17: onnxbridge[all] has Paddle, and paddle2onnx runs from an environment of its own,
# which `onnxbridge setup paddle2onnx` makes (``environment``). ``import paddle`` after ``import tensorflow`` crashes
PLUGIN = Plugin("paddle", "onnxbridge.frontends.paddle", requires=("paddlepaddle", "paddle2onnx"), extra="paddle",
                toolchain="onnxbridge.frontends.paddle.environment:elsewhere", priority=30,
                install="onnxbridge setup paddle2onnx (its own environment: it pins onnx<=1.17), or pip install "
                        "'onnxbridge[paddle]' in an environment for Paddle alone",
                description="PaddlePaddle nn.Layer + InputSpec, inference models (.json PIR, .pdmodel + .pdiparams)",
                conflicts=("tensorflow",), node_kind="Paddle op",
                setups=(Setup("paddle2onnx", "onnxbridge.frontends.paddle.environment:setup_command",
                              help="paddle2onnx pins onnx<=1.17, so onnxbridge[all] installs Paddle but runs "
                                   "paddle2onnx from an environment of its own (found without configuration)",
                              dir_help="paddle2onnx: $ONNXBRIDGE_HOME/paddle2onnx, ~/.cache/onnxbridge"),))

NAME = "paddle"
PROGRAMS = (".json", ".pdmodel")
PARAMS = ".pdiparams"


def is_pir_json(path: Path) -> bool:
    """True for a PIR program: its first bytes carry the ``"magic":"pir"`` header jit.save writes."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return b'"magic":"pir"' in head.replace(b" ", b"")


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return any(path.glob(f"*{PARAMS}"))
        if not path.exists():  # a path prefix, as given to paddle.jit.save
            return any(Path(f"{path}{s}").is_file() for s in PROGRAMS)
        suffix = path.suffix.lower()
        if suffix == ".json":  # not every .json file: only a program with its weights or a PIR header
            return path.with_suffix(PARAMS).exists() or is_pir_json(path)
        return suffix in (".pdmodel", PARAMS)
    return any(c.__module__.split(".")[0] == "paddle" for c in type(source).__mro__)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0):
    from onnxbridge.frontends.paddle.model import PaddleModel

    return PaddleModel(source, sample_inputs=sample_inputs, input_shapes=input_shapes, dynamic=dynamic,
                       input_names=input_names, seed=seed, trust=trust)
