"""JAX / Flax test models, built in code (this folder runs in a pytest process of its own)."""
from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from tests.conftest import ROOT
from tests.helpers.extras import require

jax = require("jax")
require("flax")
require("jax2onnx")

EXAMPLE = ROOT / "examples" / "convert_jax.py"


@pytest.fixture(scope="session")
def example():
    """examples/convert_jax.py as a module (factories mlp, jitted, linen_mlp)."""
    spec = importlib.util.spec_from_file_location("convert_jax_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
