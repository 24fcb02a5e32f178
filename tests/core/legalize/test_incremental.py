"""The legalization engine keeps its maps current rewrite by rewrite (issue 31): the maps after ``rewrite`` equal a
full ``refresh``, and legalizing grows linearly with the graph (``benchmarks/bench_legalize.py`` measures it)."""
from __future__ import annotations

import math
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.backends.dlc.legalize.rules import QNN_RULES
from onnxbridge.legalize import Graph, apply, rewrite


def _gelu(x: str, out: str, tag: str) -> list:
    """``out = x * 0.5 * (1 + Erf(x / sqrt2))``."""
    return [helper.make_node("Div", [x, "sqrt2"], [f"{tag}_d"], name=f"{tag}_div"),
            helper.make_node("Erf", [f"{tag}_d"], [f"{tag}_e"], name=f"{tag}_erf"),
            helper.make_node("Add", [f"{tag}_e", "one"], [f"{tag}_p"], name=f"{tag}_add"),
            helper.make_node("Mul", [x, f"{tag}_p"], [f"{tag}_m"], name=f"{tag}_mul"),
            helper.make_node("Mul", [f"{tag}_m", "half"], [out], name=f"{tag}_gelu")]


def _model(nodes: list, outputs: list[str], extra_inputs: list = ()) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(v, np.float32), k)
             for k, v in (("sqrt2", math.sqrt(2)), ("one", 1.0), ("half", 0.5))]
    inits += [numpy_helper.from_array(np.ones(8, np.float32), k) for k in ("gamma", "unit")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
                                           *extra_inputs],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def _gelu_chain(n: int) -> onnx.ModelProto:
    nodes = [node for i in range(n) for node in _gelu("x" if i == 0 else f"g{i - 1}", f"g{i}", f"b{i}")]
    return _model(nodes, [f"g{n - 1}"])


def _mixed() -> onnx.ModelProto:
    """GELUs, Identity, IsNaN, a LayerNorm with a run-time scale, a static Shape, an If whose branches read outer
    tensors the rules rewrite, and nodes no rule touches."""
    n = helper.make_node
    branch = {name: helper.make_graph([n("Identity", [src], [f"{name}_y"])], name, [],
                                      [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [2, 8])])
              for name, src in (("then", "ln"), ("else", "g1"))}
    nodes = [*_gelu("x", "g0", "a"), n("Identity", ["g0"], ["i0"], name="copy"), *_gelu("i0", "g1", "b"),
             n("IsNaN", ["g1"], ["nan"], name="isnan"), n("Mul", ["gamma", "unit"], ["scale"], name="scale"),
             n("LayerNormalization", ["g1", "scale"], ["ln"], name="ln"), n("Shape", ["ln"], ["shape"], name="shape"),
             n("Reshape", ["ln", "shape"], ["r"], name="reshape"), n("Relu", ["r"], ["relu"], name="relu"),
             n("If", ["c"], ["branch"], name="if", then_branch=branch["then"], else_branch=branch["else"]),
             n("Cast", ["nan"], ["nan_f"], to=TensorProto.FLOAT, name="cast"),
             n("Add", ["relu", "nan_f"], ["sum"], name="sum")]
    return _model(nodes, ["sum", "branch", "g1"], [helper.make_tensor_value_info("c", TensorProto.BOOL, [])])


def _maps(graph: Graph) -> tuple:
    """The maps, nodes by their serialization (the incremental ones hold other wrapper objects)."""
    producer = {o: n.SerializeToString() for o, n in graph.producer.items()}
    return (producer, dict(graph.consumers), {k: t.SerializeToString() for k, t in graph.initializers.items()},
            [n.SerializeToString() for n in graph.nodes])


def test_incremental_maps_equal_a_full_refresh():
    graph = Graph(_mixed())
    fired = rewrite(graph, QNN_RULES)
    assert {f.split(" ")[0] for f in fired} == {"gelu-erf-to-gelu", "isnan-to-not-equal", "shape-to-constant",
                                                "identity-to-reshape", "layernorm-to-reductions"}, fired
    incremental = _maps(graph)
    assert incremental[3] == [n.SerializeToString() for n in graph.graph.node]
    graph.refresh()
    assert incremental == _maps(graph)
    onnx.checker.check_model(apply(_mixed(), QNN_RULES)[0], full_check=True)


def _seconds(model: onnx.ModelProto, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        _, fired = apply(model, QNN_RULES)
        best = min(best, time.perf_counter() - start)
    assert len(fired) == sum(n.op_type == "Erf" for n in model.graph.node)
    return best


def test_legalizing_grows_linearly():
    """800 GELUs take about 8x 100 GELUs' time; re-indexing the whole graph after every rewrite took 50x (0.27 s vs
    13.9 s)."""
    small, large = _seconds(_gelu_chain(100), 3), _seconds(_gelu_chain(800), 2)
    assert large < 12 * small + 0.5, (small, large)
