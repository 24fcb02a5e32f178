"""Convert JAX / Flax models built here with the Python API and print what the reports say.

    python examples/convert_jax.py [OUT_DIR]

A Flax nnx MLP, a jitted jax.numpy function and a bound Flax linen MLP are exported with jax2onnx at opset 17
and jax2onnx's default, with a dynamic batch axis, and validated against JAX at the sample batch and at batch + 1.
The factories are also sources for the CLI: ``onnxbridge convert examples/convert_jax.py:mlp -o mlp.onnx``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen, nnx

import onnxbridge


class MLP(nnx.Module):
    """Linear -> LayerNorm -> GELU -> Dropout -> Linear (Dropout is off in eval mode, as exported)."""

    def __init__(self, features: int = 16, hidden: int = 32, classes: int = 4, *, rngs: nnx.Rngs):
        self.inp = nnx.Linear(features, hidden, rngs=rngs)
        self.norm = nnx.LayerNorm(hidden, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)
        self.out = nnx.Linear(hidden, classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.drop(nnx.gelu(self.norm(self.inp(x)))))


class LinenMLP(linen.Module):
    @linen.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = linen.relu(linen.Dense(32)(x))
        return linen.Dense(4)(x)


_W = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32) / 4


@jax.jit
def attention(x: jax.Array) -> jax.Array:
    """Single-head self-attention over the rows of each batch item, with fixed weights."""
    q, k = x @ _W, x @ _W.T
    scores = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(x.shape[-1]), axis=-1)
    return jnp.tanh(scores @ x) + x.mean(axis=-1, keepdims=True)


def _x(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def mlp():
    """(nnx MLP, sample batch of 4)."""
    return MLP(rngs=nnx.Rngs(0)), _x(4, 16)


def jitted():
    """(jitted attention function, sample of 2 x 6 rows x 16)."""
    return attention, _x(2, 6, 16)


def linen_mlp():
    """(bound linen MLP, sample batch of 4): a linen module converts with its variables bound."""
    module = LinenMLP()
    x = _x(4, 16)
    return module.bind(module.init(jax.random.key(0), x)), x


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    failed = 0
    for name in ("mlp", "jitted", "linen_mlp"):
        model, sample = globals()[name]()
        for opset in (17, None):
            path = out / f"jax_{name}_opset{opset or 'default'}.onnx"
            result = onnxbridge.convert(model, sample, output=path, opset=opset, dynamic=["x:0:batch"],
                                        report=path.with_suffix(".json"))
            rep = result.report
            worst = max(o.get("max_abs", 0.0) for h in rep["hops"] for o in h["outputs"])
            print(f"{name:10s} opset {rep['artifact']['opset']:>2}  {rep['status']:7s} max abs diff {worst:.2e}  "
                  f"{rep['timings']['total_s']:.1f}s  -> {path}")
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
