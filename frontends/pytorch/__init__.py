"""PyTorch frontend: live nn.Module, torch.export ``.pt2``, TorchScript ``.pt``; pickles only with trust."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from onnxbridge.options import Option
from onnxbridge.registry import Plugin
from onnxbridge.specs import DynamicAxis, TensorSpec

PLUGIN = Plugin("torch", "onnxbridge.frontends.pytorch", requires=("torch", "onnxscript"), extra="torch", priority=10,
                description="PyTorch nn.Module, factory module:function, torch.export .pt2, TorchScript .pt",
                node_kind="torch module",
                options=(Option("exporter", "PyTorch exporter (auto: the one that validates: TorchScript below opset "
                                "18, dynamo at 18 moved down by the adapters when TorchScript fails; else dynamo).",
                                kind="choice", choices=("auto", "dynamo", "torchscript"), default="auto",
                                commands=("convert",)),))

NAME = "torch"
SUFFIXES = (".pt2", ".pt", ".pth", ".ts", ".torchscript")


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        return Path(source).suffix.lower() in SUFFIXES
    return any(c.__module__.split(".")[0] == "torch" for c in type(source).__mro__)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0, exporter: str = "auto"):
    from onnxbridge.frontends.pytorch.model import TorchModel

    model = TorchModel.create(source, sample_inputs=sample_inputs, input_shapes=input_shapes, dynamic=dynamic,
                              input_names=input_names, trust=trust, seed=seed)
    model.exporter = model.check_exporter(exporter)
    return model
