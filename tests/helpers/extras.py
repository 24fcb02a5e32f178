"""Tests of an optional extra (torch, coremltools, ...) skip where it does not import, saying so; they never fail
for its absence. ``require`` at module level or in a fixture, ``requires`` as a mark. Both import the module: not
for TensorFlow, Paddle or JAX, whose tests run in processes of their own (tests/helpers/isolation.py)."""
from __future__ import annotations

import functools
import importlib
from types import ModuleType

import pytest


@functools.cache
def importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(module: str) -> ModuleType:
    """``module``, imported; where it does not import, the calling test module is skipped naming it."""
    return pytest.importorskip(module, exc_type=ImportError)


def requires(*modules: str) -> pytest.MarkDecorator:
    """Mark: the test is skipped where one of ``modules`` does not import, naming them (checked when the test is
    set up: a deselected test imports nothing)."""
    return pytest.mark.requires(*modules)


def skip_unless_importable(item: pytest.Item) -> None:
    """For ``pytest_runtest_setup``: skip ``item`` if a module its ``requires`` marks name does not import."""
    missing = [m for mark in item.iter_markers("requires") for m in mark.args if not importable(m)]
    if missing:
        pytest.skip(f"{', '.join(missing)} does not import here (an optional extra)")
