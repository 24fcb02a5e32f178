"""The Keras source side of the source -> ONNX hop: layers matched to the tensors of their tf2onnx export, and
localization naming the layer that differs."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tests.frontends.tensorflow.conftest import keras, tf
from tests.helpers.source_side import all_agree, planted


def keras_check() -> dict:
    from onnxbridge.spine import load_source

    keras.backend.clear_session()  # layer names count from dense, dense_1, ... again
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
    found = {"rich": all_agree(src, sides, ex.model), "layers": [layer.name for layer in rich.layers]}

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
    found["chain"] = planted(src, sides, ex.model, matmuls[3].input[1])  # block_3's kernel

    a, b = keras.Input((4,), name="a"), keras.Input((3,), name="b")
    joined = keras.layers.Concatenate(name="join")([keras.layers.Dense(5, name="left")(a), b])
    two = keras.Model({"a": a, "b": b}, keras.layers.Dense(2, name="out")(joined))
    src = load_source(two, sample_inputs={"a": rng.standard_normal((2, 4)).astype("float32"),
                                          "b": rng.standard_normal((2, 3)).astype("float32")})
    with tempfile.TemporaryDirectory() as tmp:
        ex = src.export(Path(tmp), opset=None)
    found["two_inputs"] = all_agree(src, src.probe(ex.model), ex.model)

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)
    src = load_source(Subclassed(), sample_inputs=rng.standard_normal((2, 4)).astype("float32"))
    with tempfile.TemporaryDirectory() as tmp:
        found["subclassed"] = src.probe(src.export(Path(tmp), opset=None).model)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def plain(x):
        return tf.nn.relu(x) * 2.0
    src = load_source(plain)
    with tempfile.TemporaryDirectory() as tmp:
        found["tf_function"] = src.probe(src.export(Path(tmp), opset=None).model)
    return found


def test_keras_layers_match_and_localize():
    found = keras_check()
    rich = found["rich"]
    # every layer with ONNX nodes of its own; the conv and batch norm ones through tf2onnx's NCHW layout
    assert rich["sources"] == ["conv2d", "batch_normalization", "global_average_pooling2d", "dense", "dense_1", "add",
                               "layer_normalization", "dense_2"], rich
    assert rich["worst"] < 1e-5 and rich["runs"] == 1
    chain = found["chain"]
    assert chain["clean"] is None
    assert chain["first"]["source"] == "block_3" and chain["first"]["inputs_ok"], chain["first"]
    assert "tf2onnx node names" in chain["method"]
    assert found["two_inputs"]["sources"] == ["left", "join", "out"] and found["two_inputs"]["worst"] < 1e-5
    assert found["tf_function"] is None and found["subclassed"] is None  # no layers built on keras.Input
