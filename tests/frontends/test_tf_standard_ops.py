"""TensorFlow ops tf2onnx leaves in a graph, on hand-built graphs (no TensorFlow needed): ``standard_ops`` rewrites
each into standard ONNX exactly, and refuses the rest by name."""
from __future__ import annotations

import pytest

from tests.helpers.extras import require


def _leaked(op_type: str, n_inputs: int, elem, **attrs):
    import onnx
    from onnx import helper

    names = ["x", "y"][:n_inputs]
    out_elem = onnx.TensorProto.INT32 if op_type == "Bucketize" else elem
    graph = helper.make_graph([helper.make_node(op_type, names, ["z"], name="tf_op", **attrs)], "g",
                              [helper.make_tensor_value_info(n, elem, [2, 5]) for n in names],
                              [helper.make_tensor_value_info("z", out_elem, [2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _reference(op_type: str, x, y):
    """What TF computes, in float64."""
    import numpy as np
    from scipy import special

    with np.errstate(divide="ignore"):
        return {"Erfc": lambda: special.erfc(x), "Expm1": lambda: np.expm1(x), "Log1p": lambda: np.log1p(x),
                "Xlogy": lambda: special.xlogy(x, y), "Xlog1py": lambda: special.xlog1py(x, y),
                "Xdivy": lambda: np.where(x == 0, 0, x / y), "MulNoNan": lambda: np.where(y == 0, 0, x * y),
                "Bucketize": lambda: np.searchsorted([-0.5, 0.0, 0.5], x, side="right")}[op_type]()


@pytest.mark.parametrize("op_type, n_inputs", [("Erfc", 1), ("Expm1", 1), ("Log1p", 1), ("Xlogy", 2), ("Xlog1py", 2),
                                               ("Xdivy", 2), ("MulNoNan", 2), ("Bucketize", 1)])
def test_standard_ops_rewrite_is_exact(op_type, n_inputs):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxbridge.frontends.tensorflow.standard_ops import standardize

    require("scipy")
    attrs = {"boundaries": [-0.5, 0.0, 0.5]} if op_type == "Bucketize" else {}
    model = _leaked(op_type, n_inputs, onnx.TensorProto.FLOAT, **attrs)
    notes = standardize(model)
    assert len(notes) == 1 and op_type in notes[0]
    assert op_type not in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model, full_check=True)
    x = np.linspace(-3, 3, 10, dtype="float32").reshape(2, 5)
    x[0, 0] = 0.0
    y = np.linspace(0.5, 4, 10, dtype="float32").reshape(2, 5)
    y[1, 1] = 0.0
    if op_type in ("Log1p", "Xlogy", "Xlog1py"):
        x, y = (abs(x), abs(y)) if op_type == "Log1p" else (x, abs(y))
    feeds = {"x": x, "y": y} if n_inputs == 2 else {"x": x}
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    want = _reference(op_type, x.astype("float64"), y.astype("float64"))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_standard_ops_refuses_ops_outside_the_standard_by_name():
    import onnx
    from onnxbridge.frontends.tensorflow.standard_ops import standardize

    from onnxbridge.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"Lgamma: log-gamma has no ONNX operator"):
        standardize(_leaked("Lgamma", 1, onnx.TensorProto.FLOAT))
    with pytest.raises(UnsupportedError, match=r"SomeCustomOp: tf2onnx has no conversion for it \(node tf_op\)"):
        standardize(_leaked("SomeCustomOp", 1, onnx.TensorProto.FLOAT))
    model = _leaked("Relu", 1, onnx.TensorProto.FLOAT)
    assert standardize(model) == [] and [n.op_type for n in model.graph.node] == ["Relu"]  # standard: untouched
