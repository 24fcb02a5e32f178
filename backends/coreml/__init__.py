"""Core ML backend: ONNX -> MIL (our own lowering table) -> ``.mlpackage`` with coremltools, validated on the
host by evaluating the saved MIL program with numpy (Core ML itself runs only on macOS)."""
from __future__ import annotations

from pathlib import Path

NAME = "coreml"
SUFFIXES = (".mlpackage",)
OPTIONS = ()


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32", context=None) -> dict:
    from onnxbridge.backends.coreml.package import build as build_package

    return build_package(onnx_path, output, target=target or "iOS16", precision=precision)


def check(onnx_path: Path, context=None) -> list[str]:
    """Every node the Core ML lowering cannot take, without converting."""
    from onnxbridge.backends.coreml.package import blockers
    from onnxbridge.fileio import load_onnx

    return blockers(load_onnx(onnx_path))


def runner(path: Path, *, onnx_path: Path | None = None):
    from onnxbridge.backends.coreml.package import Runner

    return Runner(path)


def inspect(path: str | Path) -> dict:
    """Inputs, outputs, spec version and MIL ops of a saved package, read without loading it into Core ML."""
    from onnxbridge.backends.coreml.package import Runner

    runner = Runner(Path(path))
    ops: dict[str, int] = {}
    for op in runner.function.operations:
        ops[op.op_type] = ops.get(op.op_type, 0) + 1
    return {"path": str(path), "format": "coreml", "spec_version": runner.spec_version,
            "inputs": [{"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype)} for v in
                       runner.function.inputs.values()],
            "outputs": [{"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype)} for v in
                        runner.function.outputs], "ops": ops}
