"""Small non-PyTorch models for ``examples/matrix.toml``, as ``module:factory`` sources.

Each factory builds a seeded model in code (nothing downloaded) and imports its framework inside the function:
a matrix cell imports this file whole, and TensorFlow and Paddle must never load into the same process.
"""
from __future__ import annotations


def keras_cnn():
    """A Keras CNN on 32x32 RGB images (NHWC): conv, batch norm, pooling, a softmax head. Inputs come from the
    model's own signature (batch left dynamic)."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    keras.utils.set_random_seed(0)
    image = keras.Input((32, 32, 3), name="image")
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(image)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, keras.layers.Dense(10, activation="softmax", name="probs")(x), name="keras_cnn")


def paddle_convnet():
    """A Paddle conv net (conv, batch norm, mean pooling, softmax) and its InputSpec (batch dynamic)."""
    import os

    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    class ConvNet(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = paddle.nn.Conv2D(3, 16, 3, padding=1)
            self.bn = paddle.nn.BatchNorm2D(16)
            self.fc = paddle.nn.Linear(16, 10)

        def forward(self, image):
            y = paddle.nn.functional.relu(self.bn(self.conv(image)))
            return paddle.nn.functional.softmax(self.fc(y.mean(axis=[2, 3])))

    paddle.seed(0)
    net = ConvNet()
    net.eval()
    return net, [paddle.static.InputSpec([None, 3, 32, 32], "float32", name="image")]


def sklearn_regressor():
    """A fitted StandardScaler + Ridge pipeline on 6 float features, and 200 sample rows."""
    import numpy as np
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 6)).astype(np.float32)
    y = x @ np.arange(1, 7, dtype=np.float32) + 0.1 * rng.standard_normal(200).astype(np.float32)
    return make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(x, y), x
