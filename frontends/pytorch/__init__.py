"""PyTorch frontend: live nn.Module, torch.export ``.pt2``, TorchScript ``.pt``; pickles only with trust."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from onnxbridge.registry import Plugin
from onnxbridge.specs import DynamicAxis, TensorSpec

PLUGIN = Plugin("torch", "onnxbridge.frontends.pytorch", requires=("torch", "onnxscript"), extra="torch", priority=10,
                description="PyTorch nn.Module, factory module:function, torch.export .pt2, TorchScript .pt")

NAME = "torch"
SUFFIXES = (".pt2", ".pt", ".pth", ".ts", ".torchscript")


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        return Path(source).suffix.lower() in SUFFIXES
    return any(c.__module__.split(".")[0] == "torch" for c in type(source).__mro__)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0):
    from onnxbridge.frontends.pytorch.model import TorchModel

    return TorchModel.create(source, sample_inputs=sample_inputs, input_shapes=input_shapes, dynamic=dynamic,
                             input_names=input_names, trust=trust, seed=seed)
