"""Framework isolation: refused import orders and crashes in a child process become clear errors."""
from __future__ import annotations

import sys

import pytest

from onnxbridge.errors import BadInputError, ExportError, NativeCrash, UnavailableError
from onnxbridge.isolation import call_isolated, require_importable


def test_result_is_json():
    assert call_isolated("os.path:basename", {"p": "/a/b.onnx"}, what="basename") == "b.onnx"


def test_our_errors_keep_their_class():
    with pytest.raises(BadInputError, match="NAME:D1,D2"):
        call_isolated("onnxbridge.specs:parse_input_shape", {"text": "bad"}, what="parse")


def test_other_exceptions_become_export_errors():
    with pytest.raises(ExportError, match="ZeroDivisionError"):
        call_isolated("fractions:Fraction", {"numerator": 1, "denominator": 0}, what="a fraction")


def test_a_crash_names_the_step_the_library_and_the_signal():
    with pytest.raises(NativeCrash, match=r"a native call: libc crashed \(SIGSEGV\)") as info:
        call_isolated("ctypes:string_at", {"ptr": 0}, what="a native call", library="libc")
    assert info.value.exit_code == 4


def test_a_timeout_is_an_error():
    with pytest.raises(NativeCrash, match="did not finish within 1 s"):
        call_isolated("subprocess:call", {"args": ["sleep", "30"]}, what="sleeping", timeout=1)


def test_paddle_after_tensorflow_is_refused(monkeypatch):
    monkeypatch.delitem(sys.modules, "paddle", raising=False)
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    with pytest.raises(UnavailableError, match="paddle cannot be imported .* already imported tensorflow"):
        require_importable("paddle")
    require_importable("tensorflow")  # the other order is fine


def test_no_conflict_without_tensorflow(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    require_importable("paddle")
