"""Core ML conversion time: our ONNX -> MIL lowering vs the onnx2torch + coremltools detour, same run; with
``--evaluator``, the host evaluator's latency against onnxruntime's CPU provider instead.

    .venv/bin/python benchmarks/bench_coreml.py [--model light_resnet50] [--repeat 3] [--json FILE]
    .venv/bin/python benchmarks/bench_coreml.py --evaluator [--precision fp32|fp16] [--threads N] [--repeat 3]

Both paths start from the same ONNX file (the light zoo model the onnx wheel ships) and end with a saved
fp32 .mlpackage for iOS 16; imports are warmed first, then each conversion is timed ``--repeat`` times and the
median kept. Detour: ``onnx2torch.convert`` -> ``torch.jit.trace`` -> ``ct.convert`` (the path coremltools'
maintainers advise). Goal (issue 5): ours <= 0.5x the detour.

onnx2torch is not a dependency (``.venv/bin/pip install --no-deps onnx2torch``). It imports torchvision at
module level for its NMS and RoiAlign converters only; when torchvision is missing (it does not import beside
this torch), a placeholder module stands in and fails if either converter is ever called (resnet50 uses
neither). Without onnx2torch the script says so and prints our time alone.

``--evaluator``: a ResNet-18 (the torchvision architecture written out with onnx.helper, random weights, BN after
every conv) at 1x3x224x224 is converted to an iOS16 .mlpackage, then the host evaluator (``Runner``, what
validation runs on Linux) and an onnxruntime CPU session of the ONNX file each run the same input once to warm up
and ``--repeat`` times timed; the medians, their ratio and the outputs' max abs difference are printed. Goal
(issue 20): evaluator <= 10x onnxruntime. ``--threads`` sets both BLAS's (numpy) and onnxruntime's thread count.
"""
from __future__ import annotations

import argparse
import json
import os
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

    from onnxbridge.backends.coreml.fold import fold

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


def resnet18(seed: int = 0, size: int = 224):
    """ResNet-18 (basic blocks [2, 2, 2, 2], BN after each conv) as an ONNX graph with random weights."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def add(op, inputs, **attrs):
        out = f"{op.lower()}{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def const(a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), f"w{len(inits)}"))
        return inits[-1].name

    def conv_bn(x, cin, cout, k, stride):
        w = const(rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k)))
        y = add("Conv", [x, w], kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4)
        stats = [1 + 0.1 * rng.standard_normal(cout), 0.1 * rng.standard_normal(cout),
                 0.1 * rng.standard_normal(cout), 1 + 0.1 * rng.random(cout)]
        return add("BatchNormalization", [y, *map(const, stats)])

    def block(x, cin, cout, stride):
        y = conv_bn(add("Relu", [conv_bn(x, cin, cout, 3, stride)]), cout, cout, 3, 1)
        shortcut = conv_bn(x, cin, cout, 1, stride) if stride != 1 or cin != cout else x
        return add("Relu", [add("Add", [y, shortcut])])

    x = add("Relu", [conv_bn("input", 3, 64, 7, 2)])
    x = add("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        x = block(block(x, cin, cout, stride), cout, cout, 1)
        cin = cout
    x = add("Flatten", [add("GlobalAveragePool", [x])])
    nodes.append(helper.make_node("Gemm", [x, const(rng.standard_normal((1000, 512)) * 0.03), const(np.zeros(1000))],
                                  ["logits"], transB=1))
    graph = helper.make_graph(nodes, "resnet18", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                [1, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _latency(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def evaluator(precision: str, repeat: int, threads: int | None) -> dict:
    """The host evaluator vs onnxruntime (CPU) on ResNet-18 at 1x3x224x224: ms per inference, ratio, max abs diff."""
    import contextlib
    import io

    import numpy as np
    import onnx
    import onnxruntime as ort

    from onnxbridge.backends.coreml.package import build
    from onnxbridge.backends.coreml.runners import Runner

    with tempfile.TemporaryDirectory() as tmp:
        src, pkg = Path(tmp) / "resnet18.onnx", Path(tmp) / "resnet18.mlpackage"
        onnx.save(resnet18(), src)
        with contextlib.redirect_stderr(io.StringIO()):
            build(src, pkg, target="iOS16", precision=precision)
        runner = Runner(pkg)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        session = ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
        ours = runner({"input": x})[0]
        ref = session.run(None, {"input": x})[0]
        ours_s = _latency(lambda: runner({"input": x}), repeat)
        ort_s = _latency(lambda: session.run(None, {"input": x}), repeat)
    return {"model": "resnet18 1x3x224x224", "precision": precision, "threads": threads, "repeat": repeat,
            "evaluator_ms": ours_s * 1e3, "onnxruntime_ms": ort_s * 1e3, "ratio": ours_s / ort_s,
            "max_abs_diff": float(np.abs(ours.astype(np.float32) - ref).max()),
            "max_abs_reference": float(np.abs(ref).max())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="light_resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--evaluator", action="store_true",
                        help="time the host evaluator against onnxruntime on ResNet-18 instead")
    parser.add_argument("--precision", choices=["fp32", "fp16"], default="fp32", help="with --evaluator")
    parser.add_argument("--threads", type=int, help="with --evaluator: BLAS and onnxruntime threads")
    args = parser.parse_args(argv)
    if args.evaluator:
        if args.threads:  # before numpy loads its BLAS
            for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ[var] = str(args.threads)
        import logging
        import warnings

        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        r = evaluator(args.precision, args.repeat, args.threads)
        print(f"{r['model']} {r['precision']} (threads {r['threads'] or 'default'}, median of {r['repeat']} after a "
              f"warm-up)")
        print(f"host evaluator      {r['evaluator_ms']:9.1f} ms/inference")
        print(f"onnxruntime (CPU)   {r['onnxruntime_ms']:9.1f} ms/inference")
        verdict = "meets" if r["ratio"] <= 10 else "misses"
        print(f"ratio evaluator/onnxruntime {r['ratio']:.2f} ({verdict} the <= 10x goal)")
        print(f"max abs difference {r['max_abs_diff']:.3g} (max |onnxruntime output| {r['max_abs_reference']:.3g})")
        if args.json:
            args.json.write_text(json.dumps(r, indent=2))
        return 0
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
