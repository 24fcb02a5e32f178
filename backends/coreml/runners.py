"""Running a saved package: the host evaluator over its MIL program (anywhere), or Core ML itself (macOS), with the
package's input and output conventions."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from onnxbridge.backends.coreml.ctimport import import_ct
from onnxbridge.backends.coreml.lower import INT32, _mil_name
from onnxbridge.backends.coreml.package import SCALAR_OUTPUTS


class Runner:
    """Evaluates the saved package's MIL program with the numpy kernels in ``evaluate``."""

    def __init__(self, path: Path):
        from onnxbridge.backends.coreml.mlpackage import read

        package = read(Path(path))
        spec = package.spec
        self.function = package.function
        self.spec_version = spec.specificationVersion
        self.description = spec.description
        self.inputs = [d.name for d in spec.description.input]
        self.dtypes = {name: var.dtype for name, var in self.function.inputs.items()}
        self.outputs = [d.name for d in spec.description.output]
        self.ranges = {d.name: _input_ranges(d) for d in spec.description.input}
        # inputs fixed at build: validation gives the package only samples of these shapes ([1] may be rank 0)
        self.static_shapes = {n: [lo for lo, _ in r] for n, r in self.ranges.items()
                              if all(lo == hi for lo, hi in r) and [lo for lo, _ in r] != [1]}
        marked = spec.description.metadata.userDefined.get(SCALAR_OUTPUTS, "")
        self.scalar_outputs = set(marked.split(",")) if marked else set()
        self.what_ran = (f"host evaluator: onnxbridge's numpy kernels over the MIL program saved in {Path(path).name} "
                         "(not Core ML, which runs only on macOS; its latency is the evaluator's)")

    def feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The inputs as the package takes them: MIL names, int32 (saturated) or fp32, rank 0 as [1]; a shape the
        package does not take (outside a fixed shape or a flexible dim's range) is refused, as Core ML would."""
        from coremltools.converters.mil.mil import types

        named = {_mil_name(k): np.asarray(v) for k, v in feeds.items()}
        for name, dtype in self.dtypes.items():
            value = named[name]
            if value.ndim == 0 and self.function.inputs[name].rank == 1:  # a rank-0 ONNX input is [1] in Core ML
                value = named[name] = value.reshape(1)
            if not all(lo <= n and (hi < 0 or n <= hi) for n, (lo, hi) in zip(value.shape, self.ranges[name])) \
                    or value.ndim != len(self.ranges[name]):
                raise ValueError(f"the package takes '{name}' with dims {_dims_text(self.ranges[name])}, not "
                                 f"{list(value.shape)}")
            if dtype == types.int32:
                named[name] = np.clip(value, INT32.min, INT32.max).astype(np.int32)
            elif value.dtype != np.float32:
                named[name] = value.astype(np.float32)
        return {n: named[n] for n in self.inputs}

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs on ``feeds``; a package the host evaluator cannot run (``EvaluatorGap``) is not judged here:
        HopSkipped, never a failure of the package."""
        from onnxbridge.backends.coreml.evaluate import run
        from onnxbridge.backends.coreml.gaps import EvaluatorGap
        from onnxbridge.errors import HopSkipped

        try:
            return self._outputs(run(self.function, self.feeds(feeds)))
        except EvaluatorGap as exc:
            raise HopSkipped(f"{exc} (the package may run on Core ML itself: validate it on macOS)") from None

    def _outputs(self, result: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs in order: fp16 as fp32, the rank-0 ONNX ones (``SCALAR_OUTPUTS``) as rank 0."""
        out = []
        for name in self.outputs:
            value = np.asarray(result[name])
            value = value.astype(np.float32) if value.dtype == np.float16 else value
            out.append(value.reshape(()) if name in self.scalar_outputs and value.size == 1 else value)
        return out


def _input_ranges(description) -> list[tuple[int, int]]:
    """(low, high) per dim of a package input: its fixed size twice, or a flexible dim's range (high -1: none)."""
    array = description.type.multiArrayType
    ranges = array.shapeRange.sizeRanges
    if ranges:
        return [(int(r.lowerBound), int(r.upperBound)) for r in ranges]
    return [(int(n), int(n)) for n in array.shape]


def _dims_text(ranges: list[tuple[int, int]]) -> str:
    return "[" + ", ".join(str(lo) if lo == hi else f"{lo}..{hi if hi >= 0 else ''}" for lo, hi in ranges) + "]"


class PredictRunner(Runner):
    """Core ML itself (``MLModel.predict``, macOS only), with the same input and output handling as ``Runner``."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.model = import_ct().models.MLModel(str(path))
        self.what_ran = f"Core ML (MLModel.predict, macOS) on {Path(path).name}"

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return self._outputs(self.model.predict(self.feeds(feeds)))
