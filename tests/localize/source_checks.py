"""Keras and Paddle source-side checks, run by tests/localize/test_sources.py each in a process of its own
(tensorflow and paddle cannot share one). Each check prints one JSON line of findings for the test to assert on.
The Paddle models live here, in a file: paddle.jit.save reads forward's source code."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GLOG_minloglevel", "2")


def _all_agree(src, sides, model) -> dict:
    """Every checkpoint the source side shows against onnxruntime on the export (all tensors as outputs)."""
    import onnx
    import onnxruntime as ort

    names = [c.tensor for c in sides.checkpoints]
    full = onnx.ModelProto()
    full.CopyFrom(model)
    del full.graph.output[:]
    full.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    feeds = dict(src.sample.feeds)
    want = dict(zip(names, ort.InferenceSession(full.SerializeToString()).run(names, feeds)))
    got = sides.probe.tensors(names, feeds)
    worst = max(float(np.max(np.abs(got[n].astype(np.float64) - want[n]))) for n in names)
    return {"checkpoints": len(names), "sources": [c.source for c in sides.checkpoints], "worst": worst,
            "runs": sides.probe.runs}


def _planted(src, sides, model, scale_initializer: str) -> dict:
    """Localize the source against the export with one weight (initializer or Constant) scaled by 1.05."""
    import onnx
    from onnx import numpy_helper

    from onnxbridge.localize.bisect import localize
    from onnxbridge.localize.onnx_probe import OnnxProbe
    from onnxbridge.validation import Tolerance

    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    consts = [a.t for n in bad.graph.node if n.op_type == "Constant" and n.output[0] == scale_initializer
              for a in n.attribute if a.name == "value"]  # paddle2onnx writes its weights as Constants
    weight = next((t for t in [*bad.graph.initializer, *consts] if t.name in (scale_initializer, "")), None)
    assert weight is not None, scale_initializer
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.05), weight.name))
    report = localize(sides.probe, OnnxProbe(bad), sides.checkpoints, [src.sample], Tolerance.for_precision("fp32"),
                      method=sides.method)
    same = localize(sides.probe, OnnxProbe(model), sides.checkpoints, [src.sample], Tolerance.for_precision("fp32"),
                    method=sides.method)
    return {"first": report["first_divergent"], "runs": report["runs"], "clean": same["first_divergent"],
            "method": sides.method}


# Keras ------------------------------------------------------------------------------------------------------
def keras_check() -> dict:
    import keras

    from onnxbridge.spine import load_source

    keras.utils.set_random_seed(0)
    # default layer names (dense, dense_1, ...): tf2onnx's scopes are dense_1, dense_1_2, ... (pair_scopes)
    inp = keras.Input((6, 6, 3), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    d = keras.layers.Dense(16, activation="sigmoid")(h)
    h = keras.layers.Add()([keras.layers.Dense(16)(d), d])
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.Dropout(0.2)(h)
    out = keras.layers.Dense(4, activation="softmax")(h)
    rich = keras.Model(inp, out)
    rng = np.random.default_rng(0)
    src = load_source(rich, sample_inputs=rng.standard_normal((2, 6, 6, 3)).astype("float32"))
    with tempfile.TemporaryDirectory() as tmp:
        ex = src.export(Path(tmp), opset=None)
    sides = src.probe(ex.model)
    found = {"rich": _all_agree(src, sides, ex.model), "layers": [layer.name for layer in rich.layers]}

    x = inp = keras.Input((16,), name="x")
    for i in range(6):
        x = keras.layers.Add(name=f"res_{i}")([x, keras.layers.Dense(16, activation="tanh", name=f"block_{i}")(x)])
    chain = keras.Model(inp, keras.layers.Dense(4, name="head")(x))
    src = load_source(chain, sample_inputs=rng.standard_normal((3, 16)).astype("float32"))
    with tempfile.TemporaryDirectory() as tmp:
        ex = src.export(Path(tmp), opset=None)
    sides = src.probe(ex.model)
    weights = {t.name for t in ex.model.graph.initializer}
    matmuls = [n for n in ex.model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    found["chain"] = _planted(src, sides, ex.model, matmuls[3].input[1])  # block_3's kernel

    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    joined = keras.layers.Concatenate(name="join")([keras.layers.Dense(5, name="left")(a), b])
    two = keras.Model({"a": a, "b": b}, keras.layers.Dense(2, name="out")(joined))
    src = load_source(two, sample_inputs={"a": rng.standard_normal((2, 4)).astype("float32"),
                                          "b": rng.standard_normal((2, 3)).astype("float32")})
    with tempfile.TemporaryDirectory() as tmp:
        ex = src.export(Path(tmp), opset=None)
    found["two_inputs"] = _all_agree(src, src.probe(ex.model), ex.model)

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)
    src = load_source(Subclassed(), sample_inputs=rng.standard_normal((2, 4)).astype("float32"))
    with tempfile.TemporaryDirectory() as tmp:
        found["subclassed"] = src.probe(src.export(Path(tmp), opset=None).model)

    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def plain(x):
        return tf.nn.relu(x) * 2.0
    src = load_source(plain)
    with tempfile.TemporaryDirectory() as tmp:
        found["tf_function"] = src.probe(src.export(Path(tmp), opset=None).model)
    return found


# Paddle -----------------------------------------------------------------------------------------------------
def paddle_check() -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import paddle
    from onnxbridge.spine import load_source

    class Block(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(8, 8)
            self.ln = paddle.nn.LayerNorm(8)

        def forward(self, x):
            return x + self.ln(paddle.nn.functional.gelu(self.fc(x)))

    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.blocks = paddle.nn.LayerList([Block() for _ in range(5)])
            self.head = paddle.nn.Linear(8, 4)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return paddle.nn.functional.softmax(self.head(x))

    paddle.seed(0)
    net = Net()
    src = load_source(net, sample_inputs=(np.random.default_rng(0).standard_normal((3, 8)).astype("float32"),))
    with tempfile.TemporaryDirectory() as tmp:
        ex = src.export(Path(tmp), opset=None)
    sides = src.probe(ex.model)
    return {"all": _all_agree(src, sides, ex.model),
            "planted": _planted(src, sides, ex.model, net.blocks[2].fc.weight.name)}


if __name__ == "__main__":
    result = {"keras": keras_check, "paddle": paddle_check}[sys.argv[1]]()
    print(json.dumps(result, default=str))
