"""JAX / Flax sources convert through jax2onnx and are validated against JAX: nnx, jitted and plain functions,
linen (bound or as a pair), factories on the command line, dynamic batch, opsets below what jax2onnx emits."""
from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from flax import linen

import onnxbridge
from tests.conftest import check_report
from tests.frontends.jax.conftest import EXAMPLE


def _run_onnx(path, **feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_nnx_mlp_with_a_dynamic_batch(example, tmp_path):
    model, x = example.mlp()
    out = tmp_path / "mlp.onnx"
    result = onnxbridge.convert(model, x, output=out, dynamic=["x:0:batch"], report=tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    assert result.passed and rep["status"] == "passed"
    assert rep["source"]["frontend"] == "jax" and rep["source"]["kind"] == "nnx.Module"
    assert [s["x"][0] for s in rep["hops"][0]["sample_shapes"]] == [4, 5]  # validated at two batch sizes
    graph = onnx.load(out).graph
    assert [d.dim_param for d in graph.input[0].type.tensor_type.shape.dim] == ["batch", ""]
    assert [o.name for o in graph.output] == ["output"]
    x7 = np.random.default_rng(3).standard_normal((7, 16)).astype(np.float32)
    model.eval()  # the written model is the eval-mode network (Dropout off)
    np.testing.assert_allclose(_run_onnx(out, x=x7)[0], np.asarray(model(x7)), atol=1e-5, rtol=1e-4)
    assert any("eval mode" in n and "Dropout.deterministic" in n for n in rep["notes"])


def test_conversion_leaves_the_nnx_module_in_its_own_mode(example, tmp_path):
    model, x = example.mlp()
    onnxbridge.convert(model, x, output=tmp_path / "m.onnx").raise_for_status()
    assert model.drop.deterministic is False


@pytest.mark.parametrize("opset", [11, 17, None])
def test_jitted_function(opset, tmp_path):
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)

    @jax.jit
    def score(x, bias):
        h = jnp.tanh(x @ w + bias)
        return {"probs": jax.nn.softmax(h, axis=-1), "total": h.sum(axis=-1)}

    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    bias = np.ones(8, np.float32)
    result = onnxbridge.convert(score, (x, bias), output=tmp_path / "s.onnx", opset=opset, dynamic=["x:0"])
    rep = result.report
    assert rep["status"] == "passed", rep
    assert rep["artifact"]["opset"] == (opset or 23)
    assert rep["source"]["kind"] == "jitted function" and [i["name"] for i in rep["source"]["inputs"]] == ["x", "bias"]
    assert [o["name"] for o in rep["hops"][0]["outputs"]] == ["probs", "total"]  # the dict's keys
    if opset == 11:
        assert any("jax2onnx exported at opset 13" in n for n in rep["notes"])
        assert (rep["hops"][0]["from"], rep["hops"][0]["to"]) == ("jax", "onnx")
        assert len(rep["hops"]) == 2 and all(h["status"] == "passed" for h in rep["hops"])  # the adapters' hop


def test_plain_function_and_partial_with_named_sample(tmp_path):
    def gate(x, y, scale):
        return jnp.where(x > y, x * scale, y)

    fn = functools.partial(gate, scale=2.0)
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 2.5, np.float32)
    result = onnxbridge.convert(fn, {"y": y, "x": x}, output=tmp_path / "g.onnx")
    assert result.passed and result.report["source"]["kind"] == "function"
    np.testing.assert_array_equal(_run_onnx(tmp_path / "g.onnx", x=x, y=y)[0], np.where(x > y, x * 2, y))


class Tagger(linen.Module):
    @linen.compact
    def __call__(self, tokens):
        h = linen.Embed(20, 8)(tokens)
        return linen.Dense(3)(linen.LayerNorm()(h))


@pytest.mark.parametrize("form", ["bound", "pair"])
def test_linen_module(form, tmp_path):
    tokens = np.array([[1, 4, 7], [2, 19, 0]], np.int32)
    module = Tagger()
    variables = module.init(jax.random.key(0), tokens)
    source = module.bind(variables) if form == "bound" else (module, variables)
    result = onnxbridge.convert(source, tokens, output=tmp_path / "t.onnx", dynamic=["tokens:1:seq"])
    assert result.passed, result.report
    assert result.report["source"]["inputs"] == [{"name": "tokens", "shape": [2, 3], "dtype": "int32"}]
    assert [s["tokens"][1] for s in result.report["hops"][0]["sample_shapes"]] == [3, 4]


def test_float64_sample_is_computed_in_float32(tmp_path):
    result = onnxbridge.convert(jax.jit(lambda x: jnp.sin(x) * 2), np.linspace(0, 1, 6).reshape(2, 3),
                                output=tmp_path / "f.onnx")
    assert result.passed
    assert result.report["source"]["inputs"][0]["dtype"] == "float32"
    assert any("JAX computes it in float32" in n for n in result.report["notes"])


def test_cli_converts_a_factory_file(cli, tmp_path):
    out, report = tmp_path / "x.onnx", tmp_path / "r.json"
    res = cli("convert", f"{EXAMPLE}:mlp", "-o", out, "--dynamic", "x:0", "--opset", "17", "--report", report)
    assert res.exit_code == 0, res.output
    rep = check_report(report)
    assert rep["status"] == "passed" and rep["artifact"]["opset"] == 17
    assert rep["environment"]["packages"]["jax"] and rep["environment"]["packages"]["jax2onnx"]
    assert "status: passed" in res.stdout


def test_cli_factory_with_input_shape_and_names(cli, tmp_path):
    src = tmp_path / "fn.py"
    src.write_text("import jax.numpy as jnp\n\n\ndef build():\n    return lambda a, b: jnp.maximum(a, 0) @ b\n")
    res = cli("convert", f"{src}:build", "-o", tmp_path / "f.onnx", "--input-shape", "left:2,4",
              "--input-shape", "right:4,3", "--input-name", "left", "--input-name", "right", "--dynamic", "left:0",
              "--output-name", "product", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    graph = onnx.load(tmp_path / "f.onnx").graph
    assert [i.name for i in graph.input] == ["left", "right"] and [o.name for o in graph.output] == ["product"]
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "passed"


def test_checker_rejection_falls_back_to_the_default_opset(monkeypatch, tmp_path):
    """When jax2onnx's export at the requested opset fails the checker, its default export is adapted instead."""
    from onnxbridge.frontends.jax import exporter

    real, calls = exporter.checker_problem, []

    def first_rejected(proto):
        calls.append(proto.opset_import[0].version)
        return "stand-in checker complaint" if len(calls) == 1 else real(proto)

    monkeypatch.setattr(exporter, "checker_problem", first_rejected)
    result = onnxbridge.convert(jax.jit(lambda x: jnp.tanh(x) + 1), np.ones((2, 3), np.float32),
                                output=tmp_path / "c.onnx", opset=15)
    assert calls == [15]
    assert result.passed and result.report["artifact"]["opset"] == 15
    assert len(result.report["hops"]) == 2  # the adapters' hop: opset 23 -> 15
    assert any("exported at opset 23 instead" in n for n in result.report["notes"])


@pytest.mark.parametrize("validate", [False, True])
def test_validation_off_compiles_and_runs_nothing(example, validate, tmp_path, monkeypatch):
    """Loading evaluates the output tree abstractly (eval_shape); the source is compiled and run for validation
    only."""
    from onnxbridge.frontends.jax import model as jax_model

    built = []
    compiled = jax_model.compiled
    monkeypatch.setattr(jax_model, "compiled", lambda callee: built.append(callee) or compiled(callee))
    model, x = example.mlp()
    result = onnxbridge.convert(model, x, output=tmp_path / "m.onnx", validate=validate)
    assert result.report["status"] == ("passed" if validate else "skipped")
    assert len(built) == (1 if validate else 0)
    from onnxbridge.errors import BadInputError

    with pytest.raises(BadInputError, match="fails on inputs"):  # still caught at load
        onnxbridge.convert(model, np.zeros((2, 5), np.float32), output=tmp_path / "bad.onnx", validate=False)
