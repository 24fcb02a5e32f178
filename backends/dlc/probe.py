"""Localization on the DLC side: what the hop runs (the ONNX model prepared at the DLC's input shapes, fp16 when the
DLC is, on onnxruntime-qnn's x86 HTP simulator) cut at the asked tensors: prefix models of the prepared model, each
on the simulator. Preparing folds constants and applies the QNN legalization rules, so some tensors of the original
model are gone or renamed: those are matched by name only and otherwise not shown (``Sides.method`` names them)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.localize.probe import Checkpoint, Sides


class PreparedTensors:
    """The probe object (in the worker): the prepared model and the simulator session of its last cut (bisection
    asks the same cut for every sample)."""

    def __init__(self, path: str, onnx_path: str):
        import onnx

        from onnxbridge.backends.dlc import container
        from onnxbridge.backends.dlc.convert import _input_shapes
        from onnxbridge.backends.dlc.prepare import prepare
        from onnxbridge.errors import BadInputError, HopSkipped, UnavailableError, UnsupportedError

        self.path = Path(path)
        dlc = container.read(self.path)
        if any(t.quantized for g in dlc.graphs for t in g.tensors.values()):
            raise HopSkipped("a quantized DLC's simulator check needs the QDQ model made from the calibration data; "
                             "it cannot be localized from the DLC alone")
        self._folder = tempfile.TemporaryDirectory(prefix="onnxbridge-dlc-probe-")
        folder = Path(self._folder.name)
        try:
            prepared = prepare(Path(onnx_path), folder, _input_shapes(dlc, Path(onnx_path)))
            model = onnx.load(prepared.path)
            if "float16" in {t.dtype for g in dlc.graphs for t in g.tensors.values()}:
                from onnxbridge.precision import to_fp16

                model = to_fp16(model)
        except (BadInputError, UnsupportedError, UnavailableError) as exc:
            self.close()
            raise HopSkipped(f"the DLC's ONNX model cannot be prepared here: {exc.one_line()}") from None
        from onnxbridge.localize.onnx_probe import value_types

        self.model, self.folder = model, folder
        self.types = value_types(model)
        makers = {o: n for n in model.graph.node for o in n.output if o}
        self.made = {}  # tensor -> (node, op); an fp32 output Cast of to_fp16 is labelled by the node it casts
        for name, node in makers.items():
            inner = makers.get(node.input[0]) if node.op_type == "Cast" and node.input else None
            shown = inner if inner is not None and node.name.endswith("_to_fp32") else node
            self.made[name] = (shown.name, shown.op_type)
        self._cut: tuple[tuple[str, ...], object] | None = None

    def describe(self) -> str:
        from onnxbridge.backends.dlc.qnn import version

        return (f"onnxruntime-qnn {version() or ''} x86 HTP simulator on prefix models of the prepared ONNX model "
                f"of {self.path.name} (fp16 compute)")

    def shows(self, names: Sequence[str]) -> dict[str, str]:
        """ONNX tensor -> ``"OP (prepared node NAME)"`` for the tensors the prepared model still makes."""
        return {n: f"{self.made[n][1]} (prepared node {self.made[n][0]})" for n in names if n in self.made}

    def _runner(self, names: tuple[str, ...]):
        import onnx

        from onnxbridge.backends.dlc.qnn import HtpRunner
        from onnxbridge.localize.onnx_probe import prefix_model

        if self._cut is None or self._cut[0] != names:
            self._cut = None
            missing = [n for n in names if n not in self.made]
            if missing:
                raise KeyError(f"the prepared model makes no tensor {', '.join(missing)}")
            path = self.folder / "cut.onnx"
            onnx.save(prefix_model(self.model, names, self.types), path)
            self._cut = (names, HtpRunner(path))
        return self._cut[1]

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        outputs = self._runner(tuple(names))(feeds)
        return {n: (v.astype(np.float32) if v.dtype == np.float16 else v) for n, v in zip(names, outputs)}

    def close(self) -> None:
        self._cut = None
        self._folder.cleanup()


def probe(artifact: Path, onnx_path: Path, checkpoints: Sequence[Checkpoint]) -> Sides:
    """The DLC side of an ``onnx -> dlc`` hop (``qnn-htp-simulator``): prefix models of the prepared ONNX model on
    the HTP simulator, showing the checkpoints of ``onnx_path`` the prepared model still makes, matched by name
    (``source``: the prepared node). HopSkipped where the hop's simulator check cannot run here."""
    from onnxbridge.backends.probing import open_sides
    from onnxbridge.worker import RunnerSpec

    spec = RunnerSpec("onnxbridge.backends.dlc.probe:PreparedTensors",
                      {"path": str(artifact), "onnx_path": str(onnx_path)}, library="onnxruntime-qnn")
    return open_sides(spec, f"the DLC probe of {Path(artifact).name}", checkpoints,
                      "tensors of the prepared ONNX model (folded, legalized for QNN) matched to the original's by "
                      "name")
