"""What every frontend hands to the spine."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from onnxbridge.specs import DynamicAxis, Sample, TensorSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx


@dataclass
class Exported:
    """An exported ONNX model; tensors marked external live under ``base_dir``."""

    model: "onnx.ModelProto"
    base_dir: Path | None
    exporter: str
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class SourceModel(ABC):
    """A loaded source model: its inputs, a sample, an ONNX export and reference runs."""

    frontend: str = ""  # registry name, e.g. "torch"
    framework: str = ""  # distribution name, for versions in reports
    converter: str = ""  # distribution name of the exporter it uses (e.g. "tf2onnx"), if not the framework
    kind: str = ""  # what was loaded, e.g. "nn.Module", "torch.export .pt2"
    description: str = ""
    input_specs: list[TensorSpec]
    sample: Sample | None = None
    dynamic: list[DynamicAxis]

    @abstractmethod
    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None,
               exporter: str = "auto") -> Exported:
        """Write an ONNX model under ``workdir`` and return it."""

    @abstractmethod
    def run(self, feeds: Mapping[str, "np.ndarray"]) -> list["np.ndarray"]:
        """Reference outputs from the source framework, flattened in ONNX output order."""

    def info(self) -> dict:
        return {"frontend": self.frontend, "framework": self.framework, "kind": self.kind, "description": self.description,
                "inputs": [s.as_dict() for s in self.input_specs],
                "dynamic": [{"name": d.name, "axis": d.axis, "label": d.dim_label} for d in self.dynamic]}
