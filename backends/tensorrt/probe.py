"""Localization on the TensorRT side: engines cut at the asked tensors. The ONNX model is prepared as the build
prepared it (``preflight.prepare``), parsed, its outputs replaced by the asked tensors (``mark_output``), and built
with the engine's precision and profiles (from its sidecar), then run like the hop's engine. Marking a tensor as an
output can stop TensorRT fusing across it, so a cut is close to, not identical with, the built engine.

Engines run only on a CUDA device: without one, ``probe`` raises ``HopSkipped`` ("no CUDA device"), as the hop
does. (Written against the tensorrt / tensorrt-rtx network API; not exercised on a machine without a GPU.)"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.localize.probe import Checkpoint, Sides


class EngineTensors:
    """The probe object (in the worker): the prepared model's network layers by output tensor, and the last cut
    engine (bisection asks the same cut for every sample)."""

    def __init__(self, path: str, onnx_path: str):
        from onnxbridge.backends.tensorrt import artifact, engine, preflight
        from onnxbridge.backends.tensorrt.run import Runner
        from onnxbridge.errors import HopSkipped

        self.path = Path(path)
        self.hop = Runner(self.path)  # HopSkipped ("no CUDA device", no runtime) where the hop cannot run either
        self.flavour = self.hop.flavour
        side, why = artifact.read_sidecar(self.path, artifact.read_engine(self.path))
        if side is None:
            raise HopSkipped(f"cutting {self.path.name} needs the precision and profiles it was built with: {why}")
        self.precision, self.profiles = side["precision"], side.get("profiles") or {}
        if self.precision == "int8":
            raise HopSkipped("an int8 engine is cut from its calibrated Q/DQ model, which the engine does not keep")
        self._folder = tempfile.TemporaryDirectory(prefix="onnxbridge-trt-probe-")
        self.folder = Path(self._folder.name)
        self.prepared, _, _ = preflight.prepare(Path(onnx_path), self.folder, self.flavour, self.precision, None)
        self.flags = engine.network_flags(self.flavour, self.precision)
        _, network, parser, _ = engine.parse(self.flavour, self.prepared, self.flags)
        self.layers = {name: source for name, (_, source) in layer_outputs(network).items()}
        del network, parser
        self._cut: tuple[tuple[str, ...], object] | None = None

    def describe(self) -> str:
        return (f"{self.flavour.name} {self.flavour.version}: engines cut at the asked tensors (built like "
                f"{self.path.name}, {self.precision}) on {self.hop.memory.device_name()}")

    def shows(self, names: Sequence[str]) -> dict[str, str]:
        return {n: self.layers[n] for n in names if n in self.layers}

    def _build(self, names: tuple[str, ...]) -> Path:
        """An engine of the prepared model whose outputs are ``names``, written into the probe's folder."""
        from onnxbridge.backends.tensorrt import engine
        from onnxbridge.errors import UnsupportedError

        trt = self.flavour.trt
        builder, network, parser, _ = engine.parse(self.flavour, self.prepared, self.flags)  # parser: owns weights
        mark_only(network, names)
        with self.flavour.capture() as log:
            config = builder.create_builder_config()
            if self.precision == "fp16" and self.flavour.features["fp16_flag"]:
                config.set_flag(trt.BuilderFlag.FP16)
            if self.profiles:
                profile = builder.create_optimization_profile()
                for name, p in self.profiles.items():
                    profile.set_shape(name, p["min"], p["opt"], p["max"])
                config.add_optimization_profile(profile)
            plan = builder.build_serialized_network(network, config)
        del parser  # the network's weights may live in the parser: kept until the engine is built
        if plan is None:
            errors = [m for sev, m in log if sev in ("ERROR", "INTERNAL_ERROR")]
            raise UnsupportedError(f"{self.flavour.name} could not build the engine cut at {', '.join(names)}: "
                                   + ("; ".join(errors[:3]) or "no reason logged"))
        out = self.folder / "cut.engine"
        out.write_bytes(bytes(plan))
        return out

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        from onnxbridge.backends.tensorrt.run import Runner

        key = tuple(names)
        if self._cut is None or self._cut[0] != key:
            self._cut = None
            self._cut = (key, Runner(self._build(key), self.flavour.name))
        runner = self._cut[1]
        values = dict(zip(runner.outputs, runner(feeds)))
        return {n: (values[n].astype(np.float32) if values[n].dtype == np.float16 else values[n]) for n in names}

    def close(self) -> None:
        self._cut = None
        self._folder.cleanup()


def layer_outputs(network) -> dict:
    """Tensor name -> (the tensor, ``"TYPE (TensorRT layer NAME)"``) for every layer output of ``network``."""
    out = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        kind = str(layer.type).rsplit(".", 1)[-1]
        for j in range(layer.num_outputs):
            out.setdefault(layer.get_output(j).name, (layer.get_output(j), f"{kind} (TensorRT layer {layer.name})"))
    return out


def mark_only(network, names: Sequence[str]) -> None:
    """Make the tensors ``names`` the network's outputs, in that order, and nothing else (KeyError if one is
    not a layer output)."""
    tensors = layer_outputs(network)
    missing = [n for n in names if n not in tensors]
    if missing:
        raise KeyError(f"the TensorRT network has no tensor {', '.join(missing)}")
    while network.num_outputs:
        network.unmark_output(network.get_output(0))
    for name in names:
        network.mark_output(tensors[name][0])


def _has_cuda_device() -> bool:
    """Whether a CUDA device is visible (torch with CUDA, else cuda-python), without loading TensorRT."""
    try:
        import torch

        if torch.cuda.is_available():
            return True
    except ImportError:
        pass
    try:
        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            from cuda import cudart
        err, count = cudart.cudaGetDeviceCount()
        return int(err) == 0 and count > 0
    except Exception:  # noqa: BLE001 - no cuda-python, or no driver
        return False


def probe(artifact: Path, onnx_path: Path, checkpoints: Sequence[Checkpoint]) -> Sides:
    """The TensorRT side of an ``onnx -> tensorrt`` hop: engines cut at the asked tensors of ``onnx_path`` (the
    network's tensors keep the ONNX names; ``source``: the TensorRT layer). HopSkipped without a CUDA device."""
    from onnxbridge.backends.probing import open_sides
    from onnxbridge.errors import HopSkipped
    from onnxbridge.worker import RunnerSpec

    if not _has_cuda_device():
        raise HopSkipped("no CUDA device: TensorRT engines (and their cuts) run only on a GPU")
    spec = RunnerSpec("onnxbridge.backends.tensorrt.probe:EngineTensors",
                      {"path": str(artifact), "onnx_path": str(onnx_path)}, library="tensorrt")
    return open_sides(spec, f"the TensorRT probe of {Path(artifact).name}", checkpoints,
                      "TensorRT network tensors (parsed from the prepared ONNX model) matched by name")
