"""TensorFlow test models, built in code once per session (this folder runs in a process of its own)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.extras import require

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require("tensorflow")
keras = require("keras")
require("tf2onnx")


def keras_cnn():
    """NHWC image -> class probabilities and an embedding (two named outputs)."""
    keras.utils.set_random_seed(0)
    image = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(image)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, padding="same")(x)
    embedding = keras.layers.GlobalAveragePooling2D(name="embedding")(x)
    probs = keras.layers.Dense(5, activation="softmax", name="probs")(embedding)
    model = keras.Model(image, [probs, embedding], name="cnn")
    # non-trivial BatchNorm statistics, so eval vs training mode matters
    bn = model.layers[2]
    bn.moving_mean.assign(np.linspace(-0.5, 0.5, 8).astype("float32"))
    bn.moving_variance.assign(np.linspace(0.5, 2.0, 8).astype("float32"))
    return model


def _example_module():
    """examples/convert_tensorflow.py, whose Scorer (a tf.Module with two signatures) the tests share."""
    import importlib.util

    from tests.conftest import ROOT

    path = ROOT / "examples" / "convert_tensorflow.py"
    spec = importlib.util.spec_from_file_location("convert_tensorflow_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Scorer = _example_module().Scorer  # serving_default (dict outputs: logits, norm) and scale


class Pooler(tf.Module):
    """Height and width unknown in the signature: --input-shape fixes them."""

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32, name="pixels")])
    def __call__(self, pixels):
        return tf.reduce_mean(pixels, axis=[1, 2]) + tf.reduce_max(pixels, axis=[1, 2])


@pytest.fixture(scope="session")
def cnn():
    return keras_cnn()


@pytest.fixture(scope="session")
def tf_files(tmp_path_factory, cnn):
    """Paths of every file kind, written once."""
    root = tmp_path_factory.mktemp("tf_models")
    cnn.save(root / "cnn.keras")
    cnn.save(root / "cnn.h5")
    scorer = Scorer()
    tf.saved_model.save(scorer, str(root / "scorer"), signatures={"serving_default": scorer.__call__,
                                                                 "scale": scorer.scale})
    tf.saved_model.save(Pooler(), str(root / "pooler"))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([scorer.__call__.get_concrete_function()], scorer)
    (root / "scorer.tflite").write_bytes(converter.convert())
    (root / "cnn.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(cnn).convert())
    x = keras.Input((4,), name="x")
    with_lambda = keras.Model(x, keras.layers.Lambda(lambda t: t * 3.0 + 1.0)(x))
    with_lambda.save(root / "lambda.keras")
    with_lambda.save(root / "lambda.h5")
    (root / "broken.keras").write_bytes(b"PK\x03\x04 not really a zip")
    (root / "broken.h5").write_bytes(b"not HDF5")
    (root / "broken.tflite").write_bytes(b"\x00" * 64)
    return root


def outputs_of(rep: dict) -> dict:
    """The first hop's per-output comparisons, by output name."""
    return {o["name"]: o for o in rep["hops"][0]["outputs"]}
