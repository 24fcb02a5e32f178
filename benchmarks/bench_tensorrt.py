"""TensorRT backend build cost: wall time of ``backends.tensorrt.build`` (preflight + parse + engine build + write)
and engine size against the ONNX model's size, per precision, for MLPs of growing width built in code.

    .venv/bin/python benchmarks/bench_tensorrt.py [--widths 256,1024,2048] [--layers 6] [--repeat 3] [--json FILE]

Needs a TensorRT flavour (``pip install 'onnxbridge[tensorrt]'``); with TensorRT-RTX no GPU is needed to build.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def mlp(path: Path, width: int, layers: int) -> Path:
    """``layers`` x (MatMul + Add + Relu) at ``width``, batch axis dynamic."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        weight = (rng.standard_normal((width, width)) / width**0.5).astype(np.float32)
        inits += [numpy_helper.from_array(weight, f"w{i}"),
                  numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        x = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", width])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="256,1024,2048")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from onnxbridge.plugins import BuildContext
    from onnxbridge.backends.tensorrt import build

    rows = []
    print(f"{'width':>6s} {'precision':9s} {'onnx MB':>8s} {'engine MB':>9s} {'build s':>8s} {'trt build s':>11s}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for width in (int(w) for w in args.widths.split(",")):
            src = mlp(tmp / f"mlp{width}.onnx", width, args.layers)
            cal = {"x": np.random.default_rng(1).standard_normal((4, 8, width)).astype(np.float32)}
            for precision in ("fp32", "fp16", "int8"):
                walls, inner, size = [], [], 0
                for _ in range(args.repeat):
                    ctx = BuildContext(sample_shapes={"x": (8, width)}, workdir=tmp,
                                       calibration=cal if precision == "int8" else None)
                    out = tmp / f"mlp{width}_{precision}.engine"
                    t = time.perf_counter()
                    facts = build(src, out, precision=precision, context=ctx)
                    walls.append(time.perf_counter() - t)
                    inner.append(facts["build_s"])
                    size = facts["engine_bytes"]
                row = {"width": width, "layers": args.layers, "precision": precision, "flavour": facts["flavour"],
                       "version": facts["version"], "onnx_bytes": src.stat().st_size, "engine_bytes": size,
                       "build_s": statistics.median(walls), "trt_build_s": statistics.median(inner)}
                rows.append(row)
                print(f"{width:6d} {precision:9s} {row['onnx_bytes'] / 1e6:8.2f} {size / 1e6:9.2f} "
                      f"{row['build_s']:8.2f} {row['trt_build_s']:11.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
