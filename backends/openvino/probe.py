"""Localization on the OpenVINO side: the IR cut at the asked tensors (a model whose results are those tensors'
ports, so only the ops they need run), compiled for the CPU plugin as the hop's runner compiles it. OpenVINO's ONNX
frontend keeps the ONNX tensor names on the ports and the node names as friendly names; ports its transformations
fused away lose their names and are not shown. A cut's results can stop the plugin fusing across them, so a cut is
close to, not identical with, the compiled IR."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.localize.probe import Checkpoint, Sides


class IrTensors:
    """The probe object (in the worker): ``shows`` finds ONNX tensor names on the IR's ports, ``tensors`` compiles
    and runs the IR cut at the asked ones (the last cut is kept compiled: bisection asks again on every sample)."""

    def __init__(self, path: str):
        from onnxbridge.backends.openvino.ir import read
        from onnxbridge.backends.openvino.run import Runner

        self.path = Path(path)
        self.runner = Runner(self.path, check_defaults=False)  # HopSkipped / UnsupportedError as the hop's runner
        self.ov, self.core, self.model = read(self.path)
        self.ports: dict[str, tuple[str, str]] = {}  # tensor name -> (node friendly name, node type)
        for node in self.model.get_ordered_ops():
            if node.get_type_name() in ("Result", "Constant", "Parameter"):
                continue
            for port in node.outputs():
                for name in port.get_names():
                    self.ports.setdefault(name, (node.get_friendly_name(), node.get_type_name()))
        self._cut: tuple[tuple[str, ...], object] | None = None

    def describe(self) -> str:
        return f"OpenVINO CPU plugin on {self.path.name} cut at the asked tensors (inference precision hint f32)"

    def shows(self, names: Sequence[str]) -> dict[str, str]:
        """ONNX tensor -> ``"TYPE (OpenVINO node NAME)"`` for the tensors some port of the IR carries."""
        return {n: f"{self.ports[n][1]} (OpenVINO node {self.ports[n][0]})" for n in names if n in self.ports}

    def _compiled(self, names: tuple[str, ...]):
        if self._cut is None or self._cut[0] != names:
            self._cut = None  # free the previous cut before compiling the next
            model = self.model.clone()
            found = {}
            for node in model.get_ordered_ops():
                for port in node.outputs():
                    for name in port.get_names() & set(names):
                        found.setdefault(name, port)
            missing = [n for n in names if n not in found]
            if missing:
                raise KeyError(f"the IR has no port named {', '.join(missing)}")
            cut = self.ov.Model([found[n] for n in names], model.get_parameters(), "localization cut")
            compiled = self.core.compile_model(cut, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            self._cut = (names, compiled)
        return self._cut[1]

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        compiled = self._compiled(tuple(names))
        request = compiled.create_infer_request()
        request.infer(list(self.runner.inputs_of(feeds).values()))  # by position, as the runner feeds them
        return {n: np.array(request.get_output_tensor(i).data, copy=True) for i, n in enumerate(names)}


def probe(artifact: Path, onnx_path: Path, checkpoints: Sequence[Checkpoint]) -> Sides:
    """The OpenVINO side of an ``onnx -> openvino`` hop: the IR cut at the asked tensors on the CPU plugin, showing
    the checkpoints of ``onnx_path`` whose tensor names the IR's ports keep (``source``: the OpenVINO node)."""
    from onnxbridge.backends.probing import open_sides
    from onnxbridge.worker import RunnerSpec

    spec = RunnerSpec("onnxbridge.backends.openvino.probe:IrTensors", {"path": str(artifact)}, library="openvino")
    return open_sides(spec, f"the OpenVINO probe of {Path(artifact).name}", checkpoints,
                      "IR ports matched to ONNX tensors by the names OpenVINO's ONNX frontend keeps")
