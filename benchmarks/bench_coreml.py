"""Core ML conversion time: our ONNX -> MIL lowering vs the onnx2torch + coremltools detour, same run.

    .venv/bin/python benchmarks/bench_coreml.py [--model light_resnet50] [--repeat 3] [--json FILE]

Both paths start from the same ONNX file (the light zoo model the onnx wheel ships) and end with a saved
fp32 .mlpackage for iOS 16; imports are warmed first, then each conversion is timed ``--repeat`` times and the
median kept. Detour: ``onnx2torch.convert`` -> ``torch.jit.trace`` -> ``ct.convert`` (the path coremltools'
maintainers advise). Goal (issue 5): ours <= 0.5x the detour.

onnx2torch is not a dependency (``.venv/bin/pip install --no-deps onnx2torch``). It imports torchvision at
module level for its NMS and RoiAlign converters only; when torchvision is missing (it does not import beside
this torch), a placeholder module stands in and fails if either converter is ever called (resnet50 uses
neither). Without onnx2torch the script says so and prints our time alone.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path


def light_model(name: str) -> Path:
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    if not path.exists():
        raise SystemExit(f"{path} not found: this onnx wheel ships no light zoo models")
    return path


def ours(src: Path, out: Path) -> None:
    from onnxbridge.backends.coreml.package import build

    build(src, out, target="iOS16", precision="fp32")


def _torchvision_placeholder() -> str | None:
    """Make ``import torchvision`` succeed for onnx2torch when it is missing; returns a note, or None."""
    try:
        import torchvision  # noqa: F401
        return None
    except Exception:
        pass

    def missing(*_, **__):
        raise RuntimeError("torchvision placeholder: this converter needs the real torchvision")

    tv = types.ModuleType("torchvision")
    tv.ops = types.ModuleType("torchvision.ops")
    tv.ops.nms = tv.ops.box_convert = tv.ops.roi_align = missing
    sys.modules.update({"torchvision": tv, "torchvision.ops": tv.ops})
    return "torchvision missing: a placeholder stood in for onnx2torch's NMS/RoiAlign converters (unused here)"


def detour(src: Path, out: Path) -> None:
    import numpy as np
    import onnx
    import onnx2torch
    import torch

    from onnxbridge.backends.coreml.ctimport import import_ct

    ct = import_ct()
    model = onnx.load(str(src))
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]  # onnx2torch takes initializers listed as graph inputs (IR < 4) for real inputs
    model.graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, 4)  # initializers that are not inputs
    _materialise(model)
    shapes = [tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in inputs]
    module = onnx2torch.convert(model).eval()
    sample = tuple(torch.from_numpy(np.random.default_rng(0).standard_normal(s).astype(np.float32)) for s in shapes)
    with torch.no_grad():
        traced = torch.jit.trace(module, sample)
    mlmodel = ct.convert(traced, inputs=[ct.TensorType(name=f"x{k}", shape=s) for k, s in enumerate(shapes)],
                         convert_to="mlprogram", minimum_deployment_target=ct.target.iOS16,
                         compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    mlmodel.save(str(out))


def _materialise(model) -> None:
    """Turn constant-only nodes into initializers: light zoo models build their weights with ConstantOfShape,
    and onnx2torch wants Conv/Gemm weights as initializers (this prep is counted in the detour's time)."""
    from onnx import numpy_helper

    from onnxbridge.backends.coreml.package import fold

    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    keep = []
    for node in model.graph.node:
        out = fold(node, values, opset) if all(n in values for n in node.input if n) else None
        if out is None:
            keep.append(node)
            continue
        values.update(zip(node.output, out))
        model.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in zip(node.output, out))
    del model.graph.node[:]
    model.graph.node.extend(keep)


def timed(fn, src: Path, repeat: int) -> list[float]:
    times = []
    for i in range(repeat + 1):  # the first run warms imports and caches and is not counted
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            fn(src, Path(tmp) / "m.mlpackage")
            if i:
                times.append(time.perf_counter() - t)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="light_resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import contextlib
    import io
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    src = light_model(args.model)
    result: dict = {"model": args.model, "repeat": args.repeat}
    with contextlib.redirect_stderr(io.StringIO()):  # coremltools' progress bars
        result["ours_s"] = statistics.median(timed(ours, src, args.repeat))
    print(f"{args.model}: ours (ONNX -> MIL -> .mlpackage)           {result['ours_s']:7.2f} s")
    note = _torchvision_placeholder()
    try:
        import onnx2torch  # noqa: F401
    except Exception as exc:
        print(f"onnx2torch + coremltools detour: not measured (onnx2torch does not import: {exc}); "
              "install it with `.venv/bin/pip install --no-deps onnx2torch`")
    else:
        if note:
            print(f"note: {note}")
            result["note"] = note
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                result["detour_s"] = statistics.median(timed(detour, src, args.repeat))
        except Exception as exc:
            print(f"onnx2torch + coremltools detour: failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")
        else:
            result["ratio"] = result["ours_s"] / result["detour_s"]
            verdict = "meets" if result["ratio"] <= 0.5 else "misses"
            print(f"{args.model}: onnx2torch + trace + ct.convert            {result['detour_s']:7.2f} s")
            print(f"ratio ours/detour {result['ratio']:.2f} ({verdict} the <= 0.5x goal)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
