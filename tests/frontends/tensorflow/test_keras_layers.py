"""The Keras layer sweep: one tiny model per built-in layer and activation that has an ONNX meaning, each
converted with ``onnxbridge.convert`` and validated against Keras (this folder runs in a process of its own).

A case either passes validation or is refused with one of our own errors naming the reason (``REFUSED``); anything
else (a crash, an unexpected error class, a numeric mismatch) fails its test. Each case is converted once, when its
first test asks for it. The fast tier (``-m "not slow"``) converts ``FAST``, one case of each kind.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.frontends.tensorflow.conftest import keras

ACTIVATIONS = ("relu", "gelu", "elu", "selu", "softplus", "softsign", "swish", "silu", "tanh", "sigmoid",
               "hard_sigmoid", "hard_silu", "exponential", "leaky_relu", "relu6", "mish", "log_softmax",
               "softmax", "linear", "celu", "glu", "log_sigmoid", "hard_tanh", "tanh_shrink", "soft_shrink",
               "hard_shrink", "squareplus", "sparse_plus")


def _dense(activation):
    def build(keras):
        x = keras.Input((6,), name="x")
        return keras.Model(x, keras.layers.Dense(4, activation=activation)(x))
    return build


def _seq(shape, *layers):
    """A model of ``layers`` (callables keras -> layer) applied in turn to one input of ``shape``."""
    def build(keras):
        x = keras.Input(shape, name="x")
        y = x
        for make in layers:
            y = make(keras)(y)
        return keras.Model(x, y)
    return build


def _two(shape, make):
    """A layer taking a list of two inputs of ``shape``."""
    def build(keras):
        a, b = keras.Input(shape, name="a"), keras.Input(shape, name="b")
        return keras.Model([a, b], make(keras)([a, b]))
    return build


def _gelu_layernorm(keras):
    x = keras.Input((8,), name="x")
    y = keras.layers.Dense(16, activation="gelu")(x)
    return keras.Model(x, keras.layers.LayerNormalization()(y))


def _mha(keras):
    q, v = keras.Input((5, 8), name="q"), keras.Input((7, 8), name="v")
    return keras.Model([q, v], keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(q, v))


def _attention(cls):
    def build(keras):
        q, v = keras.Input((5, 8), name="q"), keras.Input((7, 8), name="v")
        return keras.Model([q, v], getattr(keras.layers, cls)()([q, v]))
    return build


def _bn(keras):
    x = keras.Input((6, 6, 4), name="x")
    bn = keras.layers.BatchNormalization()
    y = bn(x)
    bn.moving_mean.assign([0.1, -0.2, 0.3, 0.0])
    bn.moving_variance.assign([0.5, 1.5, 2.0, 1.0])
    return keras.Model(x, y)


def _tf():
    import tensorflow

    return tensorflow


def _int_input(make):
    """A layer applied to a batch of 5 integer ids."""
    def build(keras):
        ids = keras.Input((5,), dtype="int32", name="ids")
        return keras.Model(ids, make(keras)(ids))
    return build


CASES = {
    **{f"Dense[{a}]": _dense(a) for a in ACTIVATIONS},
    "Dense+gelu+LayerNormalization": _gelu_layernorm,
    "Activation[gelu_tanh]": _seq((6,), lambda k: k.layers.Lambda(lambda t: k.activations.gelu(t, approximate=True))),
    "Conv1D": _seq((10, 3), lambda k: k.layers.Conv1D(4, 3, padding="same", activation="relu")),
    "Conv1D[dilated,causal]": _seq((10, 3), lambda k: k.layers.Conv1D(4, 3, padding="causal", dilation_rate=2)),
    "Conv2D": _seq((8, 8, 3), lambda k: k.layers.Conv2D(4, 3, strides=2, padding="same")),
    "Conv3D": _seq((6, 6, 6, 2), lambda k: k.layers.Conv3D(3, 3)),
    "Conv1DTranspose": _seq((6, 3), lambda k: k.layers.Conv1DTranspose(4, 3, strides=2, padding="same")),
    "Conv2DTranspose": _seq((5, 5, 3), lambda k: k.layers.Conv2DTranspose(4, 3, strides=2)),
    "Conv3DTranspose": _seq((4, 4, 4, 2), lambda k: k.layers.Conv3DTranspose(3, 3, strides=2, padding="same")),
    "DepthwiseConv1D": _seq((10, 3), lambda k: k.layers.DepthwiseConv1D(3, depth_multiplier=2)),
    "DepthwiseConv2D": _seq((8, 8, 3), lambda k: k.layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same")),
    "SeparableConv1D": _seq((10, 3), lambda k: k.layers.SeparableConv1D(4, 3)),
    "SeparableConv2D": _seq((8, 8, 3), lambda k: k.layers.SeparableConv2D(4, 3, padding="same")),
    "MaxPooling1D": _seq((10, 3), lambda k: k.layers.MaxPooling1D(2)),
    "MaxPooling2D": _seq((8, 8, 3), lambda k: k.layers.MaxPooling2D(2)),
    "MaxPooling3D": _seq((4, 4, 4, 2), lambda k: k.layers.MaxPooling3D(2)),
    "AveragePooling1D": _seq((10, 3), lambda k: k.layers.AveragePooling1D(2)),
    "AveragePooling2D[same]": _seq((7, 7, 3), lambda k: k.layers.AveragePooling2D(3, strides=2, padding="same")),
    "AveragePooling3D": _seq((4, 4, 4, 2), lambda k: k.layers.AveragePooling3D(2)),
    "GlobalMaxPooling1D": _seq((10, 3), lambda k: k.layers.GlobalMaxPooling1D()),
    "GlobalAveragePooling1D": _seq((10, 3), lambda k: k.layers.GlobalAveragePooling1D()),
    "GlobalMaxPooling2D": _seq((6, 6, 3), lambda k: k.layers.GlobalMaxPooling2D()),
    "GlobalAveragePooling2D": _seq((6, 6, 3), lambda k: k.layers.GlobalAveragePooling2D()),
    "GlobalMaxPooling3D": _seq((4, 4, 4, 2), lambda k: k.layers.GlobalMaxPooling3D()),
    "GlobalAveragePooling3D": _seq((4, 4, 4, 2), lambda k: k.layers.GlobalAveragePooling3D()),
    "BatchNormalization": _bn,
    "LayerNormalization": _seq((5, 8), lambda k: k.layers.LayerNormalization()),
    "LayerNormalization[rms_scaling]": _seq((5, 8), lambda k: k.layers.LayerNormalization(rms_scaling=True)),
    "GroupNormalization": _seq((6, 6, 8), lambda k: k.layers.GroupNormalization(groups=4)),
    "UnitNormalization": _seq((8,), lambda k: k.layers.UnitNormalization()),
    "RMSNormalization": _seq((5, 8), lambda k: k.layers.RMSNormalization()),
    "Embedding": _int_input(lambda k: k.layers.Embedding(11, 4)),
    "CategoryEncoding[multi_hot]": _int_input(lambda k: k.layers.CategoryEncoding(11, output_mode="multi_hot")),
    "Hashing[int]": _int_input(lambda k: k.layers.Hashing(7)),
    "IntegerLookup": _int_input(lambda k: k.layers.IntegerLookup(vocabulary=[1, 3, 4, 9])),
    "SimpleRNN": _seq((5, 3), lambda k: k.layers.SimpleRNN(4)),
    "LSTM": _seq((5, 3), lambda k: k.layers.LSTM(4, return_sequences=True)),
    "GRU": _seq((5, 3), lambda k: k.layers.GRU(4)),
    "Bidirectional[LSTM]": _seq((5, 3), lambda k: k.layers.Bidirectional(k.layers.LSTM(4))),
    "Bidirectional[GRU]": _seq((5, 3), lambda k: k.layers.Bidirectional(k.layers.GRU(4, return_sequences=True))),
    "ConvLSTM2D": _seq((3, 5, 5, 2), lambda k: k.layers.ConvLSTM2D(2, 3)),
    "MultiHeadAttention": _mha,
    "Attention": _attention("Attention"),
    "AdditiveAttention": _attention("AdditiveAttention"),
    "Reshape": _seq((4, 6), lambda k: k.layers.Reshape((3, 8))),
    "Permute": _seq((4, 6, 2), lambda k: k.layers.Permute((3, 1, 2))),
    "Flatten": _seq((4, 3, 2), lambda k: k.layers.Flatten()),
    "RepeatVector": _seq((6,), lambda k: k.layers.RepeatVector(3)),
    "Cropping1D": _seq((8, 3), lambda k: k.layers.Cropping1D((1, 2))),
    "Cropping2D": _seq((8, 8, 3), lambda k: k.layers.Cropping2D(((1, 2), (2, 1)))),
    "Cropping3D": _seq((6, 6, 6, 2), lambda k: k.layers.Cropping3D(1)),
    "ZeroPadding1D": _seq((8, 3), lambda k: k.layers.ZeroPadding1D(2)),
    "ZeroPadding2D": _seq((6, 6, 3), lambda k: k.layers.ZeroPadding2D(((1, 2), (0, 1)))),
    "ZeroPadding3D": _seq((4, 4, 4, 2), lambda k: k.layers.ZeroPadding3D(1)),
    "UpSampling1D": _seq((5, 3), lambda k: k.layers.UpSampling1D(2)),
    "UpSampling2D[nearest]": _seq((5, 5, 3), lambda k: k.layers.UpSampling2D(2)),
    "UpSampling2D[bilinear]": _seq((5, 5, 3), lambda k: k.layers.UpSampling2D(2, interpolation="bilinear")),
    "UpSampling3D": _seq((3, 3, 3, 2), lambda k: k.layers.UpSampling3D(2)),
    "Resizing[bilinear]": _seq((8, 8, 3), lambda k: k.layers.Resizing(5, 6)),
    "Resizing[nearest]": _seq((8, 8, 3), lambda k: k.layers.Resizing(4, 4, interpolation="nearest")),
    "Rescaling": _seq((6, 6, 3), lambda k: k.layers.Rescaling(1 / 127.5, offset=-1.0)),
    "CenterCrop": _seq((8, 8, 3), lambda k: k.layers.CenterCrop(4, 6)),
    "Normalization": _seq((5,), lambda k: k.layers.Normalization(mean=[0, 1, 2, 3, 4], variance=[1, 2, 3, 4, 5])),
    "Dropout+SpatialDropout+GaussianNoise": _seq(
        (6, 4), lambda k: k.layers.Dropout(0.5), lambda k: k.layers.SpatialDropout1D(0.5),
        lambda k: k.layers.GaussianNoise(0.3), lambda k: k.layers.GaussianDropout(0.3)),
    "ReLU+LeakyReLU+ELU+PReLU": _seq(
        (6,), lambda k: k.layers.ReLU(max_value=2.0, threshold=0.1), lambda k: k.layers.LeakyReLU(0.2),
        lambda k: k.layers.ELU(0.7), lambda k: k.layers.PReLU(alpha_initializer="random_uniform")),
    "Softmax[axis=1]": _seq((4, 5), lambda k: k.layers.Softmax(axis=1)),
    "Add": _two((4, 3), lambda k: k.layers.Add()),
    "Subtract": _two((4, 3), lambda k: k.layers.Subtract()),
    "Multiply": _two((4, 3), lambda k: k.layers.Multiply()),
    "Average": _two((4, 3), lambda k: k.layers.Average()),
    "Maximum": _two((4, 3), lambda k: k.layers.Maximum()),
    "Minimum": _two((4, 3), lambda k: k.layers.Minimum()),
    "Concatenate": _two((4, 3), lambda k: k.layers.Concatenate(axis=1)),
    "Dot": _two((4, 3), lambda k: k.layers.Dot(axes=2, normalize=True)),
    "Lambda[erfc,expm1,log1p,xlogy]": _seq((6,), lambda k: k.layers.Lambda(
        lambda t: k.ops.expm1(t) + k.ops.log1p(k.ops.abs(t)) + _tf().math.erfc(t) + _tf().math.xlogy(t, k.ops.abs(t)))),
    "Lambda[lgamma]": _seq((6,), lambda k: k.layers.Lambda(lambda t: _tf().math.lgamma(k.ops.abs(t) + 1.0))),
    "Lambda[erfinv]": _seq((6,), lambda k: k.layers.Lambda(lambda t: k.ops.erfinv(k.ops.tanh(t)))),
    "Conv2D[groups=2]": _seq((6, 6, 4), lambda k: k.layers.Conv2D(4, 3, groups=2)),
    "TimeDistributed[Dense]": _seq((5, 3), lambda k: k.layers.TimeDistributed(k.layers.Dense(2))),
    "Discretization": _seq((4,), lambda k: k.layers.Discretization(bin_boundaries=[-0.5, 0.0, 0.5])),
    "ActivityRegularization+AlphaDropout": _seq((6,), lambda k: k.layers.ActivityRegularization(0.1),
                                                lambda k: k.layers.AlphaDropout(0.2)),
    "Conv2D[channels_first]": _seq((3, 8, 8), lambda k: k.layers.Conv2D(4, 3, data_format="channels_first")),
    "MaxPooling2D[channels_first]": _seq((3, 8, 8), lambda k: k.layers.MaxPooling2D(2, data_format="channels_first")),
    "SimpleRNN[return_sequences,go_backwards]": _seq(
        (5, 3), lambda k: k.layers.SimpleRNN(4, return_sequences=True, go_backwards=True)),
    "LSTM[stacked]": _seq((5, 3), lambda k: k.layers.LSTM(4, return_sequences=True), lambda k: k.layers.LSTM(2)),
    "Identity+Masking": _seq((5, 3), lambda k: k.layers.Identity(), lambda k: k.layers.Masking(0.0),
                             lambda k: k.layers.GlobalAveragePooling1D()),
}


_IDS = "Embedding", "CategoryEncoding[multi_hot]", "Hashing[int]", "IntegerLookup"
SAMPLES = {n: lambda np: np.array([[0, 3, 10, 2, 7], [1, 1, 4, 9, 0]], "int32") for n in _IDS}

# Cases refused on purpose, with the reason the refusal must name (a substring of the error's one line).
REFUSED: dict[str, tuple[str, str]] = {
    "Lambda[lgamma]": ("UnsupportedError", "Lgamma: log-gamma has no ONNX operator"),
    "Lambda[erfinv]": ("UnsupportedError", "Erfinv: the inverse error function has no ONNX operator"),
    # Keras (TF backend) runs a grouped convolution as a jit_compile tf.function, which tf2onnx cannot inline
    "Conv2D[groups=2]": ("UnsupportedError", "StatefulPartitionedCall: a nested tf.function tf2onnx could not inline"),
    "Hashing[int]": ("UnsupportedError", "StringToHashBucketFast: FarmHash string hashing"),
    "IntegerLookup": ("UnsupportedError", "LookupTableFindV2: a TF hash-table lookup"),
}
# Cases whose conversion must say which TF op it rewrote into standard ONNX (frontends/tensorflow/standard_ops.py)
REWRITTEN = {"Dense[gelu]": "Erfc", "Dense+gelu+LayerNormalization": "Erfc", "Dense[celu]": "Expm1",
             "Lambda[erfc,expm1,log1p,xlogy]": "Xlogy", "Discretization": "Bucketize"}


# the fast tier's cases: plain, convolution, recurrent, a TF op rewritten into standard ONNX, a refusal
FAST = {"Dense[relu]", "Conv2D", "LSTM[stacked]", "Dense[gelu]", "Lambda[lgamma]"}


def convert_case(name: str, output: Path) -> dict:
    """Convert case ``name`` to ``output``: {status, error_class, error, max_abs, notes}."""
    import numpy as np

    import onnxbridge
    from onnxbridge.errors import OnnxBridgeError

    keras.utils.set_random_seed(0)
    try:
        model = CASES[name](keras)
        sample = SAMPLES[name](np) if name in SAMPLES else None
        rep = onnxbridge.convert(model, sample, output=output).report
        hop = rep["hops"][0]
        return {"status": rep["status"], "notes": rep.get("notes", []),
                "max_abs": max((o.get("max_abs") or 0.0) for o in hop.get("outputs", [])) if
                hop.get("outputs") else None}
    except OnnxBridgeError as exc:
        return {"status": "refused", "error_class": type(exc).__name__, "error": exc.one_line()}
    except Exception as exc:  # noqa: BLE001 - a crash is what the test reports
        return {"status": "crashed", "error_class": type(exc).__name__, "error": " ".join(str(exc).split())[:400]}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The record of a case by name, converted on first use."""
    folder = tmp_path_factory.mktemp("keras_sweep")
    records: dict[str, dict] = {}

    def record(name: str) -> dict:
        if name not in records:
            records[name] = convert_case(name, folder / f"m{len(records)}.onnx")
        return records[name]
    return record


def cases(names) -> list:
    """``names`` sorted, each outside ``FAST`` marked slow."""
    return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in sorted(names)]


@pytest.mark.parametrize("name", cases(set(CASES) - set(REFUSED)))
def test_layer_converts_and_validates(sweep, name):
    record = sweep(name)
    assert record["status"] == "passed", record
    assert record["max_abs"] is not None and record["max_abs"] < 1e-4, record


@pytest.mark.parametrize("name", cases(REWRITTEN))
def test_leaked_tf_ops_are_rewritten_and_noted(sweep, name):
    record = sweep(name)
    assert record["status"] == "passed", record
    assert any(f"TensorFlow {REWRITTEN[name]} node" in n and "standard ONNX" in n for n in record["notes"]), record


@pytest.mark.parametrize("name", cases(REFUSED))
def test_layer_is_refused_clearly(sweep, name):
    error_class, reason = REFUSED[name]
    record = sweep(name)
    assert record["status"] == "refused", record
    assert record["error_class"] == error_class and reason in record["error"], record
