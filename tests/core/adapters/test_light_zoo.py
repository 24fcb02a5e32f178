"""The light model zoo shipped with the onnx package, adapted to 11, 13, 17 and 21: same numbers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxbridge import adapters
from tests.core.adapters.helpers import run

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))


@pytest.fixture(scope="module")
def reference():
    cache = {}

    def get(name):
        if name not in cache:
            model = onnx.load(LIGHT / f"{name}.onnx")
            inits = {t.name for t in model.graph.initializer}
            spec = next(i for i in model.graph.input if i.name not in inits)
            shape = [d.dim_value or 1 for d in spec.type.tensor_type.shape.dim]
            feeds = {spec.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            cache[name] = model, feeds, run(model, feeds)
        return cache[name]

    return get


@pytest.mark.skipif(not MODELS, reason="this onnx wheel ships no light models")
@pytest.mark.parametrize("target", [11, 13, 17, 21])
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.fast_cases("light_squeezenet-11", "light_squeezenet-21")
def test_light_model_adapts(reference, name, target):
    model, feeds, want = reference(name)
    out = adapters.adapt(model, target)
    onnx.checker.check_model(out, full_check=True)
    assert out.opset_import[0].version == target
    for w, g in zip(want, run(out, feeds)):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)
