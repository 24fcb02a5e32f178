"""Benchmark the DLC backend's legalization (``onnxbridge.legalize.apply`` with ``QNN_RULES``) on growing graphs.

Models, built with ``onnx.helper``: a chain of N exact-GELU blocks in their erf form, ``x * 0.5 * (1 + Erf(x /
sqrt2))`` (one ``gelu-erf-to-gelu`` rewrite each), for N in ``--sizes``; and a 24-layer transformer-like chain
(LayerNormalization with a run-time scale, attention MatMuls and Softmax, an erf-GELU MLP, residual Adds: two
rewrites a layer). Printed: seconds per model (the best of ``--repeat`` runs) and the ratio t(largest) / t(smallest)
of the GELU chains; linear scaling makes it the ratio of their sizes (32 for 100 -> 3200). Goals (issue 31): 800
GELUs <= 1 s, t(3200) / t(100) <= 40.

    .venv/bin/python benchmarks/bench_legalize.py [--sizes 100,200,400,800,1600,3200] [--repeat 3] [--layers 24]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GOAL_800 = 1.0
GOAL_RATIO = 40.0
WIDTH = 64


def _consts(**values: float) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in values.items()]


def _gelu(x: str, out: str, tag: str) -> list[onnx.NodeProto]:
    """``out = x * 0.5 * (1 + Erf(x / sqrt2))`` as torch's TorchScript exporter writes it."""
    return [helper.make_node("Div", [x, "sqrt2"], [f"{tag}_d"], name=f"{tag}_div"),
            helper.make_node("Erf", [f"{tag}_d"], [f"{tag}_e"], name=f"{tag}_erf"),
            helper.make_node("Add", [f"{tag}_e", "one"], [f"{tag}_p"], name=f"{tag}_add"),
            helper.make_node("Mul", [x, f"{tag}_p"], [f"{tag}_m"], name=f"{tag}_mul"),
            helper.make_node("Mul", [f"{tag}_m", "half"], [out], name=f"{tag}_gelu")]


def _model(nodes: list, inits: list, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, WIDTH])],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def gelu_chain(n: int) -> onnx.ModelProto:
    """``n`` exact-GELU blocks, each feeding the next."""
    nodes, x = [], "x"
    for i in range(n):
        nodes += _gelu(x, f"g{i}", f"b{i}")
        x = f"g{i}"
    return _model(nodes, _consts(sqrt2=math.sqrt(2), one=1.0, half=0.5))


def _layer(i: int, x: str, rng: np.random.Generator) -> tuple[list, list, str]:
    """One pre-norm layer: LayerNorm (scale computed at run time, so it is legalized), single-head attention, LayerNorm,
    MLP with erf GELU, residuals."""
    t = f"l{i}"
    w = {f"{t}_{k}": (rng.standard_normal(s) * 0.05).astype(np.float32)
         for k, s in (("wq", (WIDTH, WIDTH)), ("wk", (WIDTH, WIDTH)), ("wv", (WIDTH, WIDTH)), ("wo", (WIDTH, WIDTH)),
                      ("w1", (WIDTH, 4 * WIDTH)), ("w2", (4 * WIDTH, WIDTH)))}
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    n = helper.make_node
    nodes = [n("Mul", ["gamma", "unit"], [f"{t}_g"], name=f"{t}_gamma"),
             n("LayerNormalization", [x, f"{t}_g", "beta"], [f"{t}_ln1"], name=f"{t}_ln1"),
             *(n("MatMul", [f"{t}_ln1", f"{t}_w{k}"], [f"{t}_{k}"], name=f"{t}_{k}") for k in "qkv"),
             n("Transpose", [f"{t}_k"], [f"{t}_kt"], perm=[0, 2, 1], name=f"{t}_kt"),
             n("MatMul", [f"{t}_q", f"{t}_kt"], [f"{t}_s"], name=f"{t}_scores"),
             n("Mul", [f"{t}_s", "scale"], [f"{t}_ss"], name=f"{t}_scale"),
             n("Softmax", [f"{t}_ss"], [f"{t}_a"], axis=-1, name=f"{t}_softmax"),
             n("MatMul", [f"{t}_a", f"{t}_v"], [f"{t}_c"], name=f"{t}_context"),
             n("MatMul", [f"{t}_c", f"{t}_wo"], [f"{t}_o"], name=f"{t}_o"),
             n("Add", [x, f"{t}_o"], [f"{t}_r1"], name=f"{t}_res1"),
             n("LayerNormalization", [f"{t}_r1", "gamma", "beta"], [f"{t}_ln2"], name=f"{t}_ln2"),
             n("MatMul", [f"{t}_ln2", f"{t}_w1"], [f"{t}_h"], name=f"{t}_fc1"),
             *_gelu(f"{t}_h", f"{t}_gh", f"{t}_act"),
             n("MatMul", [f"{t}_gh", f"{t}_w2"], [f"{t}_f"], name=f"{t}_fc2"),
             n("Add", [f"{t}_r1", f"{t}_f"], [f"{t}_out"], name=f"{t}_res2")]
    return nodes, inits, f"{t}_out"


def transformer_chain(layers: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        more, weights, x = _layer(i, x, rng)
        nodes += more
        inits += weights
    shared = _consts(sqrt2=math.sqrt(2), one=1.0, half=0.5, scale=1 / math.sqrt(WIDTH)) + [
        numpy_helper.from_array(np.ones(WIDTH, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(WIDTH, np.float32), "beta"),
        numpy_helper.from_array(np.ones(WIDTH, np.float32), "unit")]
    return _model(nodes, inits + shared)


def time_legalize(model: onnx.ModelProto, repeat: int, want: int) -> float:
    """The best of ``repeat`` timings of ``legalize(model)``, checking ``want`` rewrites fired."""
    from onnxbridge.backends.dlc.prepare import legalize

    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        _, fired = legalize(model)
        best = min(best, time.perf_counter() - start)
        assert len(fired) == want, (len(fired), want)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,200,400,800,1600,3200")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", type=int, default=24, help="transformer-like layers (0: skip)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    times = {}
    print(f"{'model':>24}  {'nodes':>7}  {'seconds':>8}")
    for n in sizes:
        model = gelu_chain(n)
        times[n] = time_legalize(model, args.repeat, n)
        print(f"{f'{n} GELUs':>24}  {len(model.graph.node):>7}  {times[n]:8.3f}")
    if args.layers:
        model = transformer_chain(args.layers)
        t = time_legalize(model, args.repeat, 2 * args.layers)
        print(f"{f'{args.layers}-layer transformer':>24}  {len(model.graph.node):>7}  {t:8.3f}")
    missed = []
    if len(sizes) > 1:
        lo, hi = min(sizes), max(sizes)
        ratio = times[hi] / times[lo]
        print(f"t({hi}) / t({lo}) = {ratio:.1f} (sizes' ratio {hi / lo:g}; goal <= {GOAL_RATIO:g} for 3200 / 100)")
        if (lo, hi) == (100, 3200) and ratio > GOAL_RATIO:
            missed.append("ratio")
    if 800 in times and times[800] > GOAL_800:
        missed.append("800 GELUs")
    print("goals: " + (f"missed {', '.join(missed)}" if missed else "met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
