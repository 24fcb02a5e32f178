"""What the JAX frontend recognises, what it refuses (one line, exit 2) and what it never imports."""
from __future__ import annotations

import functools
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen, nnx
from onnxbridge.frontends.jax import accepts

import onnxbridge
from onnxbridge.errors import BadInputError, UnsupportedError
from tests.conftest import ROOT, assert_one_line_error
from tests.frontends.jax.conftest import EXAMPLE

CALLBACK = """import jax
import numpy as np


def host(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x) * 2


def build():
    return jax.jit(host), np.ones((2, 3), np.float32)
"""


def test_accepts_jax_sources_only():
    dense = linen.Dense(3)
    assert accepts(jax.jit(jnp.tanh)) and accepts(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    assert accepts(lambda x: jnp.tanh(x)) and accepts(functools.partial(lambda x, s: jnp.sin(x) * s, s=2.0))
    assert accepts((dense, {"params": {}})) and accepts(dense)
    assert not accepts(lambda x: x * 2) and not accepts("model.py") and not accepts(np.ones(3))
    assert not accepts(jnp.ones(3))  # an array is not a model


def test_a_wrong_input_name_is_refused(cli, tmp_path):
    out = tmp_path / "x.onnx"
    assert_one_line_error(cli("convert", f"{EXAMPLE}:mlp", "-o", out, "--dynamic", "y:0"), 2, "y:0", "'x'")
    assert_one_line_error(cli("convert", f"{EXAMPLE}:mlp", "-o", out, "--input-shape", "y:2,16"), 2, "'y'", "'x'")
    assert_one_line_error(cli("convert", f"{EXAMPLE}:mlp", "-o", out, "--input-name", "a", "--input-name", "b"),
                          2, "2 input names")
    assert not out.exists()


def test_an_unsupported_primitive_is_refused_by_name(cli, tmp_path):
    factory = tmp_path / "callback.py"
    factory.write_text(CALLBACK)
    res = cli("convert", f"{factory}:build", "-o", tmp_path / "c.onnx")
    err = assert_one_line_error(res, 2, "primitive 'pure_callback'")
    assert "jax2onnx" in err
    fn, x = jax.jit(lambda v: jax.pure_callback(np.cos, jax.ShapeDtypeStruct(v.shape, v.dtype), v)), np.ones(3, np.float32)
    with pytest.raises(UnsupportedError, match="pure_callback"):
        onnxbridge.convert(fn, x, output=tmp_path / "d.onnx")


def test_a_dynamic_axis_the_function_fixes_is_refused(cli, tmp_path):
    factory = tmp_path / "fixed.py"
    factory.write_text("import numpy as np\n\n\ndef build():\n"
                       "    return (lambda x: x * 2 if x.shape[0] > 1 else x), np.ones((2, 6), np.float32)\n")
    res = cli("convert", f"{factory}:build", "-o", tmp_path / "f.onnx", "--dynamic", "x:0")
    assert_one_line_error(res, 2, "no frontend recognises a function")  # it names nothing from JAX: --from jax
    res = cli("convert", f"{factory}:build", "-o", tmp_path / "f.onnx", "--dynamic", "x:0", "--from", "jax")
    assert_one_line_error(res, 2, "cannot be traced with --dynamic x:0")
    assert cli("convert", f"{factory}:build", "-o", tmp_path / "f.onnx", "--from", "jax").exit_code == 0


def test_other_refusals(cli, tmp_path):
    out = tmp_path / "o.onnx"
    assert_one_line_error(cli("convert", f"{EXAMPLE}:mlp", "-o", out, "--exporter", "dynamo"), 2,
                          "--exporter does not apply to jax sources (it applies to --from torch)")
    with pytest.raises(BadInputError, match="--input-shape for x"):
        onnxbridge.convert(jax.jit(jnp.tanh), output=out)
    with pytest.raises(BadInputError, match="no variables bound"):
        onnxbridge.convert(linen.Dense(3), np.ones((1, 2), np.float32), output=out)
    with pytest.raises(BadInputError, match="not an array"):
        onnxbridge.convert(lambda x, n: jnp.tanh(x) * n, (np.ones(2, np.float32), 3), output=out)
    with pytest.raises(BadInputError, match="skip parameter 'x'"):
        onnxbridge.convert(lambda x, y: jnp.tanh(x) * y, {"y": np.ones(2, np.float32)}, output=out)
    assert not out.exists()


def test_doctor_lists_the_jax_frontend(cli):
    info = json.loads(cli("doctor", "--json").stdout)
    row = next(p for p in info["plugins"] if p["kind"] == "frontend" and p["name"] == "jax")
    assert row["available"] and row["versions"]["jax"] and row["versions"]["jax2onnx"]


def test_help_and_the_plugin_declaration_import_no_jax():
    code = ("import sys; from click.testing import CliRunner; from onnxbridge.cli.main import cli;"
            "assert CliRunner().invoke(cli, ['--help']).exit_code == 0;"
            "import onnxbridge.frontends.jax as j; assert not j.accepts('m.onnx') and not j.accepts(len);"
            "print([m for m in ('jax', 'jaxlib', 'flax', 'jax2onnx') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
