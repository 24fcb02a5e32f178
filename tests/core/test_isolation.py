"""Framework isolation: an import order that would crash the process is refused."""
from __future__ import annotations

import sys

import pytest

from onnxbridge.errors import UnavailableError
from onnxbridge.isolation import require_importable


def test_paddle_after_tensorflow_is_refused(monkeypatch):
    monkeypatch.delitem(sys.modules, "paddle", raising=False)
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    with pytest.raises(UnavailableError, match="paddle cannot be imported .* already imported tensorflow"):
        require_importable("paddle")
    require_importable("tensorflow")  # the other order is fine


def test_no_conflict_without_tensorflow(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    require_importable("paddle")
