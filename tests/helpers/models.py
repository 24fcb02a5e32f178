"""Small ONNX models built in code, shared by test modules of several folders."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_onnx(path: Path, opset: int = 17) -> Path:
    """MatMul -> Relu with a dynamic batch, at ``opset``, saved at ``path``."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.save(model, path)
    return path


def save_small_model(path: Path) -> None:
    """A two-node ONNX model with a dynamic batch (for the plugin tests)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def small_onnx(path: Path, *, external: str | None = None, tensors: int = 1, size: int = 300) -> Path:
    """y = x + w0 + w1 + ...; weights of ``size`` floats, in ``external`` (a location) when given."""
    ws = [numpy_helper.from_array(np.full(size, i, np.float32), f"w{i}") for i in range(tensors)]
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"h{i}", f"w{i}"], ["y" if i == tensors - 1 else f"h{i + 1}"])
             for i in range(tensors)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])], ws)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if external:
        onnx.save(model, path, save_as_external_data=True, location=external, size_threshold=0)
    else:
        onnx.save(model, path)
    return path
