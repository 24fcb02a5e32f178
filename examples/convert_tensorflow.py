"""Convert TensorFlow models built here with the Python API and print what the reports say.

    python examples/convert_tensorflow.py [OUT_DIR]

A Keras CNN (live, saved as .keras, and with NCHW inputs), a SavedModel with two signatures and the
same module as .tflite are converted at opset 13 and 17 and validated against TensorFlow at the
sample batch and at batch + 1.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import tensorflow as tf

import onnxbridge


def keras_cnn() -> keras.Model:
    keras.utils.set_random_seed(0)
    image = keras.Input((32, 32, 3), name="image")
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(image)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, keras.layers.Dense(10, activation="softmax", name="probs")(x), name="cnn")


class Scorer(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.random.stateless_normal([8, 4], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="features")])
    def __call__(self, features):
        return {"logits": tf.matmul(features, self.w), "norm": tf.reduce_sum(tf.square(features), axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def scale(self, x):
        return tf.nn.relu(x) * 2.0


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cnn = keras_cnn()
    cnn.save(out / "cnn.keras")
    scorer = Scorer()
    tf.saved_model.save(scorer, str(out / "scorer"), signatures={"serving_default": scorer.__call__,
                                                                "scale": scorer.scale})
    converter = tf.lite.TFLiteConverter.from_concrete_functions([scorer.__call__.get_concrete_function()], scorer)
    (out / "scorer.tflite").write_bytes(converter.convert())
    jobs = [("keras (live)", cnn, {}), ("keras .keras", out / "cnn.keras", {}),
            ("keras NCHW", cnn, {"inputs_as_nchw": ["image"]}), ("SavedModel", out / "scorer", {}),
            ("SavedModel [scale]", out / "scorer", {"signature": "scale"}), ("TFLite", out / "scorer.tflite", {})]
    failed = 0
    for i, (name, source, options) in enumerate(jobs):
        for opset in (13, 17):
            path = out / f"tf{i}_opset{opset}.onnx"
            result = onnxbridge.convert(source, output=path, opset=opset, report=path.with_suffix(".json"), **options)
            rep = result.report
            worst = max(o.get("max_abs", 0.0) for h in rep["hops"] for o in h["outputs"])
            print(f"{name:20s} opset {rep['artifact']['opset']:>2}  {rep['status']:7s} max abs diff {worst:.2e}  "
                  f"{rep['timings']['total_s']:.2f}s  -> {path}")
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
