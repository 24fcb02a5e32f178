"""TFLite control flow: WHILE and IF bodies in other subgraphs, signatures outside subgraph 0, and the refusal of
control flow tf2onnx cannot convert. Each converted model is also run on inputs that take every path (trip counts
1..5, both branches) and compared with the TFLite interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import onnxbridge
from onnxbridge.errors import UnsupportedError
from tests.conftest import assert_one_line_error
from tests.frontends.tensorflow.conftest import outputs_of, tf

W = np.random.RandomState(0).randn(4, 4).astype("float32") * 0.3


class Flow(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.constant(W)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def data_dependent(self, x):
        """A tf.while_loop whose trip count (1..5) comes from the input's values."""
        n = tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32) % 5 + 1
        _, y = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 0.9 + tf.sin(a)), [tf.constant(0), x])
        return {"y": y}

    @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x")])
    def fixed(self, x):
        _, y = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0 + 1.0), [tf.constant(0), x])
        return {"y": y}

    @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x")])
    def cond(self, x):
        return {"y": tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: tf.exp(x) - 1.0)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def nested(self, x):
        """An IF inside a WHILE body: three levels of subgraphs."""
        def body(i, a):
            return i + 1, tf.cond(tf.reduce_mean(a) > 0, lambda: tf.tanh(a @ self.w), lambda: a + 0.5)
        _, y = tf.while_loop(lambda i, a: i < 4, body, [tf.constant(0), x])
        return {"y": y}


class Counter(tf.Module):
    """A resource variable: TFLite initialises it in a CALL_ONCE subgraph."""

    def __init__(self):
        super().__init__()
        self.v = tf.Variable(tf.ones([4]))

    @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32, name="x")])
    def step(self, x):
        self.v.assign(self.v * 0.5 + tf.reduce_mean(x, 0))
        return {"y": x + self.v}


def _tflite(module, *names: str, resource_variables: bool = False) -> bytes:
    functions = [getattr(module, n).get_concrete_function() for n in names]
    converter = tf.lite.TFLiteConverter.from_concrete_functions(functions, module)
    converter.experimental_enable_resource_variables = resource_variables
    return converter.convert()


@pytest.fixture(scope="module")
def flow_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("tflite_flow")
    flow = Flow()
    for name in ("data_dependent", "fixed", "cond"):
        (root / f"{name}.tflite").write_bytes(_tflite(flow, name))
    (root / "two.tflite").write_bytes(_tflite(flow, "nested", "data_dependent"))
    (root / "counter.tflite").write_bytes(_tflite(Counter(), "step", resource_variables=True))
    return root


def _interpreter(path, signature: str):
    resolver = tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = tf.lite.Interpreter(model_path=str(path), experimental_op_resolver_type=resolver)
    return it.get_signature_runner(signature)


def _agrees(onnx_path, tflite_path, signature: str, inputs: list[np.ndarray]) -> None:
    """The written ONNX model and the TFLite interpreter agree on every input."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    runner = _interpreter(tflite_path, signature)
    for x in inputs:
        want = runner(x=x)["y"]
        got = session.run(["y"], {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _ops(path) -> set[str]:
    import onnx

    def walk(graph):
        for node in graph.node:
            yield node.op_type
            for a in node.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    yield from walk(g)
    return set(walk(onnx.load(str(path)).graph))


def _trip_count_inputs() -> list[np.ndarray]:
    """Inputs whose sum(|x|) gives trip counts 1, 2, 3, 4 and 5 (batch 2 and 3)."""
    base = np.full((2, 4), 1 / 8, np.float32)  # sum(|x|) = 1
    return [base * (k + 0.5) for k in range(5)] + [np.full((3, 4), -(k + 0.5) / 12, np.float32) for k in range(5)]


@pytest.mark.slow
def test_while_with_a_data_dependent_trip_count(flow_files, tmp_path):
    out = tmp_path / "w.onnx"
    rep = onnxbridge.convert(flow_files / "data_dependent.tflite", output=out).report
    assert rep["status"] == "passed", rep
    assert rep["inputs"]["samples"][1]["x"] == [3, 4]  # the None batch stays dynamic through the loop
    assert "Loop" in _ops(out)
    _agrees(out, flow_files / "data_dependent.tflite", "serving_default", _trip_count_inputs())


def test_while_with_a_fixed_trip_count(flow_files, tmp_path):
    out = tmp_path / "f.onnx"
    rep = onnxbridge.convert(flow_files / "fixed.tflite", output=out, opset=17).report
    assert rep["status"] == "passed", rep
    assert outputs_of(rep)["y"]["max_abs"] is not None
    _agrees(out, flow_files / "fixed.tflite", "serving_default",
            [np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)])


def test_cond_takes_both_branches(flow_files, tmp_path):
    out = tmp_path / "c.onnx"
    rep = onnxbridge.convert(flow_files / "cond.tflite", output=out).report
    assert rep["status"] == "passed", rep
    assert "If" in _ops(out)
    x = np.linspace(0.1, 1.5, 8, dtype=np.float32).reshape(2, 4)
    _agrees(out, flow_files / "cond.tflite", "serving_default", [x, -x])  # then, else


@pytest.mark.slow
def test_a_signature_outside_subgraph_0_converts_with_its_control_flow(flow_files, tmp_path):
    from onnxbridge.frontends.tensorflow.tflite_graphs import TFLiteGraphs

    path = flow_files / "two.tflite"
    graphs = TFLiteGraphs(path)
    roots = {s: graphs.signature_subgraph(s) for s in ("nested", "data_dependent")}
    assert min(roots.values()) == 0 and max(roots.values()) > 0  # one signature lives outside subgraph 0
    for signature, root in roots.items():
        out = tmp_path / f"{signature}.onnx"
        rep = onnxbridge.convert(path, output=out, signature=signature).report
        assert rep["status"] == "passed", (signature, rep)
        assert any("subgraph" in n for n in rep["notes"]) == (root != 0)
        assert "Loop" in _ops(out)
        # away from mean 0, where the IF's decision would hang on float rounding
        inputs = _trip_count_inputs() if signature == "data_dependent" else \
            [np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4) + 0.3, np.full((3, 4), -0.7, np.float32)]
        _agrees(out, path, signature, inputs)


def test_rerooted_file_runs_in_the_interpreter(flow_files, tmp_path):
    """The re-rooted copy keeps only the signature's subgraphs, renumbered, and computes the same."""
    from onnxbridge.frontends.tensorflow.tflite_graphs import TFLiteGraphs

    path = flow_files / "two.tflite"
    graphs = TFLiteGraphs(path)
    signature = next(s for s in ("nested", "data_dependent") if graphs.signature_subgraph(s) != 0)
    copy = tmp_path / "rerooted.tflite"
    copy.write_bytes(TFLiteGraphs(path).rerooted(graphs.signature_subgraph(signature)))
    rerooted = TFLiteGraphs(copy)
    assert rerooted.signature_subgraph(signature) == 0
    assert len(rerooted.model.subgraphs) == len(graphs.reachable(graphs.signature_subgraph(signature)))
    assert len(rerooted.model.subgraphs) < len(graphs.model.subgraphs)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4) + 0.3
    np.testing.assert_array_equal(_interpreter(copy, signature)(x=x)["y"], _interpreter(path, signature)(x=x)["y"])


def test_control_flow_tf2onnx_cannot_convert_is_refused_naming_the_op(cli, flow_files, tmp_path):
    with pytest.raises(UnsupportedError, match=r"CALL_ONCE x1 \(it runs an initializer subgraph"):
        onnxbridge.convert(flow_files / "counter.tflite", output=tmp_path / "x.onnx")
    res = cli("convert", flow_files / "counter.tflite", "-o", tmp_path / "x.onnx")
    assert_one_line_error(res, 2, "tf2onnx has no conversion for TFLite op(s)", "CALL_ONCE", "VAR_HANDLE")
    assert not (tmp_path / "x.onnx").exists()
