"""Opset adaptation speed on long chains: onnxbridge.adapt vs onnx.version_converter in the same run.

    .venv/bin/python benchmarks/bench_adapters.py [--nodes 20000] [--repeat 3]

Goals (issue: opset adapters): upgrade no slower than onnx.version_converter; downgrade linear,
<= 0.5 s for 20,000 nodes on the 2-core reference machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

import onnx
from onnx import TensorProto, helper


def chain(n: int, opset: int) -> onnx.ModelProto:
    """Relu/Add/Unsqueeze/Squeeze/Softmax repeated: type-only bumps, attribute<->input moves, a semantic step."""
    nodes, prev = [], "x"
    axes13 = opset >= 13
    inits = [onnx.numpy_helper.from_array(__import__("numpy").array([0], "int64"), "axes")] if axes13 else []
    for i in range(n):
        out = f"v{i}"
        kind = i % 5
        if kind == 0:
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"n{i}"))
        elif kind == 1:
            nodes.append(helper.make_node("Add", [prev, prev], [out], name=f"n{i}"))
        elif kind == 2:
            args = ([prev, "axes"], {}) if axes13 else ([prev], {"axes": [0]})
            nodes.append(helper.make_node("Unsqueeze", args[0], [out], name=f"n{i}", **args[1]))
        elif kind == 3:
            args = ([prev, "axes"], {}) if axes13 else ([prev], {"axes": [0]})
            nodes.append(helper.make_node("Squeeze", args[0], [out], name=f"n{i}", **args[1]))
        else:
            nodes.append(helper.make_node("Softmax", [prev], [out], axis=-1, name=f"n{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def timed(fn, repeat: int) -> float | None:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            fn()
        except Exception:
            return None
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    from onnxbridge.adapters import adapt

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.nodes}-node chain, median of {args.repeat}")
    print(f"{'move':>10s} {'onnxbridge s':>13s} {'converter s':>12s} {'ratio':>6s}")
    for src, dst in ((11, 13), (13, 21), (13, 11), (21, 13)):
        model = chain(args.nodes, src)
        ours = timed(lambda: adapt(model, dst), args.repeat)
        theirs = timed(lambda: onnx.version_converter.convert_version(model, dst), args.repeat)
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
        fmt = lambda v: f"{v:.3f}" if v is not None else "failed"  # noqa: E731
        print(f"{src:>4d} -> {dst:<3d} {fmt(ours):>13s} {fmt(theirs):>12s} {ratio:>6s}")


if __name__ == "__main__":
    main()
