"""TensorFlow models over ~2 GB take tf2onnx's large-model path into the external-data layout. No test needs 2 GB:
the threshold comes down through ``$ONNXBRIDGE_TF_LARGE_MODEL_BYTES`` (benchmarks/tf_large_savedmodel.py runs a
real 2.2 GB SavedModel)."""
from __future__ import annotations

import numpy as np
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from onnxbridge.frontends.tensorflow.model import LARGE_MODEL_ENV, large_model_threshold, weight_bytes
from tests.frontends.tensorflow.conftest import keras, tf

UNITS, FEATURES, OUT = 96, 32, 16
WEIGHTS = (FEATURES * UNITS + UNITS + UNITS * OUT + OUT) * 4  # float32 kernels and biases of the two Dense layers
OUTSIDE = (FEATURES * UNITS + UNITS * OUT) * 4  # tf2onnx keeps tensors of over 1024 elements outside: the kernels


class Mlp(tf.Module):
    def __init__(self):
        super().__init__()
        keras.utils.set_random_seed(0)
        x = keras.Input((FEATURES,), name="x")
        self.model = keras.Model(x, keras.layers.Dense(OUT)(keras.layers.Dense(UNITS, activation="relu")(x)))

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.model(x)}


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("large") / "mlp"
    tf.saved_model.save(Mlp(), str(path))
    return path


def _run(path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]


def _large_notes(rep: dict) -> list[str]:
    return [n for n in rep["notes"] if "large-model path" in n]


@pytest.mark.slow
def test_savedmodel_over_the_threshold_takes_the_large_model_path(mlp_dir, tmp_path, monkeypatch):
    x = np.random.RandomState(1).randn(5, FEATURES).astype(np.float32)
    small = onnxbridge.convert(mlp_dir, output=tmp_path / "small" / "model.onnx").report
    assert small["status"] == "passed" and not _large_notes(small)

    import tf2onnx.graph

    originals = tf2onnx.graph.Node.get_value_attr, tf2onnx.graph.Node.update_proto
    monkeypatch.setenv(LARGE_MODEL_ENV, str(WEIGHTS - 1))
    out = tmp_path / "large" / "model.onnx"
    rep = onnxbridge.convert(mlp_dir, output=out, external_data=True).report
    assert rep["status"] == "passed", rep
    assert (tf2onnx.graph.Node.get_value_attr, tf2onnx.graph.Node.update_proto) == originals  # lent back
    note = (f"{WEIGHTS:,} bytes of weights (over {WEIGHTS - 1:,} bytes): exported through tf2onnx's large-model "
            f"path, {OUTSIDE:,} bytes of tensors kept outside the protobuf")
    assert _large_notes(rep) == [note]
    # onnxbridge's external-data layout: model.onnx and model.onnx.data beside it, nothing else
    assert rep["artifact"]["external_data"] == ["model.onnx.data"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert (out.parent / "model.onnx.data").stat().st_size >= OUTSIDE
    assert out.stat().st_size < FEATURES * UNITS * 4  # the kernels are not inline
    np.testing.assert_array_equal(_run(out, x), _run(tmp_path / "small" / "model.onnx", x))


@pytest.mark.slow
def test_large_model_path_without_asking_for_external_data(mlp_dir, tmp_path, monkeypatch):
    """Below onnxio's threshold the written model is self-contained again (the large path only changes how the
    export holds its weights); a live Keras model takes the same path."""
    monkeypatch.setenv(LARGE_MODEL_ENV, "1000")
    out = tmp_path / "model.onnx"
    rep = onnxbridge.convert(mlp_dir, output=out).report
    assert rep["status"] == "passed" and _large_notes(rep)
    assert rep["artifact"]["external_data"] == [] and [p.name for p in tmp_path.iterdir()] == ["model.onnx"]
    result = onnxbridge.convert(Mlp().model)  # no output: the model comes back in memory with its weights
    assert result.report["status"] == "passed" and _large_notes(result.report)
    assert all(t.data_location == 0 for t in result.model.graph.initializer)


def test_weight_bytes_and_threshold(monkeypatch):
    mlp = Mlp()
    assert weight_bytes(mlp.__call__.get_concrete_function()) == WEIGHTS
    monkeypatch.delenv(LARGE_MODEL_ENV, raising=False)
    assert 1e9 < large_model_threshold() < 2**31 - 1  # below protobuf's cap
    monkeypatch.setenv(LARGE_MODEL_ENV, "2e9")
    with pytest.raises(BadInputError, match="is not a number of bytes"):
        large_model_threshold()


def test_graph_over_protobuf_cap_retries_on_the_large_path(mlp_dir, tmp_path, monkeypatch):
    """Weights the estimate misses (constants built inside the graph) still reach the large path: tf2onnx's
    2 GB refusal of the ordinary path is retried there."""
    import tf2onnx

    real = tf2onnx.convert.from_function
    calls = []

    def from_function(*args, large_model=False, **kwargs):
        calls.append(large_model)
        if not large_model:
            raise ValueError("Message tensorflow.GraphDef exceeds maximum protobuf size of 2GB: 2400000000")
        return real(*args, large_model=large_model, **kwargs)

    monkeypatch.setattr(tf2onnx.convert, "from_function", from_function)
    rep = onnxbridge.convert(mlp_dir, output=tmp_path / "model.onnx").report
    assert calls == [False, True] and rep["status"] == "passed" and _large_notes(rep)
