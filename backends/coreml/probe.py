"""Localization on the Core ML side: the saved package's MIL program evaluated on the host (``evaluate``'s
kernels), stopped once the asked vars are computed and holding only the vars still needed. The lowering names the
MIL var of each ONNX node output after that tensor (``lower.Ctx.name``: ``_mil_name``); coremltools' fp16 pass
appends ``_cast_fp16`` to the ops it retypes, and its fusions drop some (a MatMul fused with its Add into ``linear``
keeps the Add's name), so the tensors shown are the ONNX names found among the program's vars."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np

    from onnxbridge.localize.probe import Checkpoint, Sides

# what a var named after an ONNX tensor may carry: coremltools' fp16 pass appends "_cast_fp16" to the ops it retypes
# (``FP16ComputePrecision``), and a rank-0 graph output's own var is "_rank0" (the plain name is its [1] output)
SUFFIXES = ("_rank0_cast_fp16", "_rank0", "_cast_fp16", "")


class MilTensors:
    """The probe object (in the worker): ``shows`` maps ONNX tensors to MIL vars, ``tensors`` evaluates a prefix."""

    def __init__(self, path: str):
        from onnxbridge.backends.coreml.runners import Runner

        self.runner = Runner(Path(path))
        self.ops = list(self.runner.function.operations)
        self.made: dict[str, tuple[int, str]] = {}  # MIL var -> (index of the op making it, op type)
        for index, op in enumerate(self.ops):
            for var in op.outputs:
                self.made[var.name] = (index, op.op_type)
        self.vars: dict[str, str] = {}  # ONNX tensor -> MIL var, filled by ``shows``
        self.path = Path(path)

    def describe(self) -> str:
        return (f"host evaluator (onnxbridge's numpy kernels) over prefixes of the MIL program saved in "
                f"{self.path.name}")

    def shows(self, names: Sequence[str]) -> dict[str, str]:
        """ONNX tensor -> ``"OP (mil var NAME)"`` for those a MIL var is named after; names that two ONNX
        tensors share once made identifiers are left out (ambiguous)."""
        from onnxbridge.backends.coreml.lower import _mil_name

        counts: dict[str, int] = {}
        for name in names:
            counts[_mil_name(name)] = counts.get(_mil_name(name), 0) + 1
        shown = {}
        for name in names:
            base = _mil_name(name)
            var = next((base + s for s in SUFFIXES if base + s in self.made), None)
            if var is None or counts[base] > 1 or self.made[var][1] == "const":
                continue
            self.vars[name] = var
            shown[name] = f"{self.made[var][1]} (mil var {var})"
        return shown

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Evaluate the program up to the last op making an asked var; fp16 values come back as fp32."""
        import numpy as np

        from onnxbridge.backends.coreml.evaluate import KERNELS, _value
        from onnxbridge.errors import UnsupportedError

        unknown = [n for n in names if n not in self.vars and not self.shows([n])]
        if unknown:
            raise KeyError(f"the Core ML program shows no var for tensor(s) {', '.join(unknown)}")
        wanted = {self.vars[n] for n in names}
        stop = max(self.made[v][0] for v in wanted)
        last_use = _last_uses(self.ops[:stop + 1])
        env: dict[str, Any] = dict(self.runner.feeds(feeds))
        kept: dict[str, np.ndarray] = {}
        for index, op in enumerate(self.ops[:stop + 1]):
            if op.op_type == "const":
                result: Any = np.asarray(op.outputs[0].val)
            else:
                fn = KERNELS.get(op.op_type)
                if fn is None:
                    raise UnsupportedError(f"the host evaluator has no kernel for MIL op '{op.op_type}'")
                result = fn(**{k: _value(v, env) for k, v in op.inputs.items()})
            for var, value in zip(op.outputs, result if isinstance(result, tuple) else (result,)):
                if var.name in wanted:
                    kept[var.name] = value
                if last_use.get(var.name, -1) > index:
                    env[var.name] = value
            for name in [n for n, last in last_use.items() if last == index]:
                env.pop(name, None)  # no later op reads it
        return {n: _fp32(kept[self.vars[n]]) for n in names}


def _last_uses(ops: Sequence) -> dict[str, int]:
    """MIL var -> index of the last op (of ``ops``) reading it."""
    last: dict[str, int] = {}

    def note(value, index):
        if isinstance(value, (tuple, list)):
            for v in value:
                note(v, index)
        elif getattr(value, "name", None) is not None:
            last[value.name] = index

    for index, op in enumerate(ops):
        for value in op.inputs.values():
            note(value, index)
    return last


def _fp32(value) -> np.ndarray:
    import numpy as np

    value = np.asarray(value)
    return value.astype(np.float32) if value.dtype == np.float16 else value


def probe(artifact: Path, onnx_path: Path, checkpoints: Sequence[Checkpoint]) -> Sides:
    """The Core ML side of an ``onnx -> coreml`` hop: the package's MIL program on the host evaluator, showing the
    checkpoints of ``onnx_path`` whose tensors name a MIL var (``source``: the MIL op and var)."""
    from onnxbridge.backends.probing import open_sides
    from onnxbridge.worker import RunnerSpec

    spec = RunnerSpec("onnxbridge.backends.coreml.probe:MilTensors", {"path": str(artifact)}, library="coremltools")
    return open_sides(spec, f"the Core ML probe of {Path(artifact).name}", checkpoints,
                      "MIL vars of the saved program matched to ONNX tensors through the lowering's names")
