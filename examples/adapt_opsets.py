"""Move an ONNX model across opsets with onnxbridge's adapters, and see where onnx.version_converter goes wrong.

    python examples/adapt_opsets.py [OUT_DIR]

Builds a small model in code (Softmax over a middle axis, Resize, ReduceMean with axes as an input) at
opset 18, moves it to 11, 13 and 21, and compares every result with the original in onnxruntime.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.adapters import check


def build(opset: int = 18) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=1, name="softmax_over_channels"),
        helper.make_node("Resize", ["s", "", "scales"], ["r"], mode="linear", name="upsample",
                         coordinate_transformation_mode="asymmetric"),
        helper.make_node("ReduceMean", ["r", "axes"], ["y"], keepdims=1, name="mean_over_width"),
    ]
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([3], np.int64), "axes")]
    graph = helper.make_graph(nodes, "demo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def main(out_dir: str = "out/adapt") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = out / "demo_opset18.onnx"
    onnx.save(build(), source)
    failed = 0
    for target in (11, 13, 21):
        result = onnxbridge.convert(source, output=out / f"demo_opset{target}.onnx", opset=target)
        diff = result.report["hops"][0]["outputs"][0]["max_abs"]
        print(f"onnxbridge             18 -> {target}: {result.report['status']}, max abs diff {diff:.1e}")
        failed += not result.passed
        try:
            onnx.version_converter.convert_version(onnx.load(source), target)
            print(f"onnx.version_converter 18 -> {target}: converted (check its numbers with onnxbridge validate)")
        except Exception as exc:
            print(f"onnx.version_converter 18 -> {target}: failed ({' '.join(str(exc).split())[-60:]})")
    print("blockers for opset 9:", check(source, 9) or "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
