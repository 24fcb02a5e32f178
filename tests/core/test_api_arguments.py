"""The Python API's arguments: a wrong type or value is the caller's input (BadInputError naming the argument and
what it got), refused before anything runs or is written; never a bare TypeError/AttributeError."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.conftest import assert_one_line_error
from tests.helpers.extras import requires
from tests.helpers.models import small_onnx


@pytest.fixture
def model(tmp_path):
    return small_onnx(tmp_path / "t.onnx")


@pytest.mark.parametrize("kwargs, needle", [
    ({"opset": "17"}, "argument opset='17' (str) must be an int"),
    ({"opset": 17.5}, "argument opset=17.5 (float) must be an int"),
    ({"opset": True}, "argument opset=True (bool) must be an int"),
    ({"samples": "x"}, "argument samples='x' (str) must be an int"),
    ({"samples": 0}, "argument samples=0 (int) must be in 1..1000"),
    ({"samples": 10**9}, "must be in 1..1000"),
    ({"seed": "x"}, "argument seed='x' (str) must be an int"),
    ({"seed": -1}, "argument seed=-1 (int) must be >= 0"),
    ({"latency_runs": -1}, "argument latency_runs=-1 (int) must be in 0..10000"),
    ({"latency_runs": 1.5}, "argument latency_runs=1.5 (float) must be an int"),
    ({"output": 123}, "argument output=123 (int) must be a path"),
    ({"output": "a\0.onnx"}, "must be a non-empty path without NUL bytes"),
    ({"output": ""}, "argument output='' (str) must be a non-empty path"),
    ({"report": 5}, "argument report=5 (int) must be a path"),
    ({"inputs": {"x": "str"}}, "argument inputs={'x': 'str'} (dict) holds 'x': str, not an array"),
    ({"inputs": {"x": None}}, "holds 'x': NoneType, not an array"),
    ({"inputs": 5}, "argument inputs=5 (int) must be a path (.npz or a folder of .npy) or a name -> array mapping"),
    ({"exporter": "bogus"}, "argument exporter='bogus' (str) must be one of auto, dynamo, torchscript"),
    ({"precision": "bogus"}, "argument precision='bogus' (str) must be one of fp32, fp16, int8"),
    ({"to": 5}, "argument to=5 (int) must be a str"),
    ({"to": "bogus"}, "unknown backend 'bogus'"),
    ({"input_shapes": 5}, "argument input_shapes=5 (int) must be a list"),
    ({"input_names": "x"}, "argument input_names='x' (str) must be a list of str"),
    ({"validate": "no"}, "argument validate='no' (str) must be True or False"),
    ({"external_data": 1}, "argument external_data=1 (int) must be True, False or None"),
    ({"renderers": {"pdf": "r.pdf"}}, "must map junit, markdown, html to paths"),
    ({"workspace": "64"}, "argument workspace='64' (str) must be an int"),
    ({"dynamic": 5}, "argument dynamic=5 (int) must be a list of 'NAME:AXIS[:LABEL]' str"),
    ({"dynamic": {"x": [object()]}}, "or a name -> {axis: label} mapping"),
    ({"sample_inputs": 5}, "argument sample_inputs=5 (int) must be an array, a tuple or list of inputs"),
    ({"atol": float("inf")}, "--atol 'inf' must be a finite non-negative number"),
    ({"rtol": "x:nan"}, "--rtol 'nan' must be a finite non-negative number"),
    ({"atol": {1j}}, "argument atol={1j} (set) must be a number, an '[OUTPUT:]NUMBER' str"),
    ({"rtol": [1e-3, None]}, "argument rtol=[0.001, None] (list) must be a number"),
    ({"timeout": -1}, "timeout=-1 must be a finite number of seconds, 0 or more"),
    ({"timeout": float("nan")}, "timeout=nan must be a finite number of seconds"),
    ({"timeout": "soon"}, "timeout='soon' is not a number of seconds"),
])
def test_convert_refuses_bad_arguments(model, tmp_path, kwargs, needle):
    kwargs = {"output": tmp_path / "o.onnx", **kwargs}
    with pytest.raises(BadInputError) as info:
        onnxbridge.convert(model, **kwargs)
    assert needle in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.onnx"]  # nothing ran, nothing was written


@pytest.mark.parametrize("call, needle", [
    (lambda m: onnxbridge.adapt(None, 13), "argument model=None (NoneType) must be given"),
    (lambda m: onnxbridge.adapt(123, 13), "argument model=123 (int) must be a path or an onnx.ModelProto"),
    (lambda m: onnxbridge.adapt(onnx.ModelProto(), 13), "argument model=<ModelProto> is an empty ModelProto"),
    (lambda m: onnxbridge.adapt(m, "13"), "argument opset='13' (str) must be an int"),
    (lambda m: onnxbridge.adapt(m, None), "argument opset=None (NoneType) must be given"),
    (lambda m: onnxbridge.validate(m, 123), "argument converted=123 (int) must be a path or an onnx.ModelProto"),
    (lambda m: onnxbridge.validate(m, None), "argument converted=None (NoneType) must be given"),
    (lambda m: onnxbridge.validate(m, onnx.ModelProto()), "argument converted=<ModelProto> is an empty"),
    (lambda m: onnxbridge.validate(m, m, samples=0), "argument samples=0 (int) must be in 1..1000"),
    (lambda m: onnxbridge.validate(m, m, report=5), "argument report=5 (int) must be a path"),
    (lambda m: onnxbridge.validate(m, m, {"x": [1.0] * 300}), "holds 'x': list, not an array"),
])
def test_adapt_and_validate_refuse_bad_arguments(model, call, needle):
    with pytest.raises(BadInputError, match="^argument ") as info:
        call(model)
    assert needle in str(info.value)


@pytest.mark.parametrize("call, needle", [
    (lambda m: onnxbridge.check_targets(onnx.load(m), ["onnx"]), "argument model=<ModelProto> must be a path"),
    (lambda m: onnxbridge.check_targets(5, ["onnx"]), "argument model=5 (int) must be a path"),
    (lambda m: onnxbridge.check_targets(m, "coreml"), "argument targets='coreml' (str) must be a list of backend"),
    (lambda m: onnxbridge.check_targets(m, 5), "argument targets=5 (int) must be a list"),
    (lambda m: onnxbridge.check_targets(m, ["onnx"], opset="13"), "argument opset='13' (str) must be an int"),
    (lambda m: onnxbridge.check_targets(m, ["onnx"], input_shapes=5), "argument input_shapes=5 (int) must be a list"),
    (lambda m: onnxbridge.check_targets(m, ["onnx"], report=5), "argument report=5 (int) must be a path"),
    (lambda m: onnxbridge.check_targets(m, ["onnx"], target=1.0), "argument target=1.0 (float) must be a str"),
    (lambda m: onnxbridge.check_targets(m), "check_targets: missing a required argument: 'targets'"),
    (lambda m: onnxbridge.check_targets(m, ["onnx"], bogus=1), "check_targets: got an unexpected keyword argument"),
    (lambda m: onnxbridge.inspect_model(5), "argument model=5 (int) must be a path, an onnx.ModelProto"),
    (lambda m: onnxbridge.convert(onnx.load(m), 5), "argument sample_inputs=5 (int) must be an array"),
    (lambda m: onnxbridge.convert(None), "argument source=None (NoneType) must be given"),
    (lambda m: onnxbridge.validate(m, m, sample_inputs=2.5), "argument sample_inputs=2.5 (float) must be an array"),
    (lambda m: onnxbridge.validate(m, m, atol=float("inf")), "--atol 'inf' must be a finite non-negative number"),
])
def test_every_public_function_refuses_bad_arguments(model, call, needle):
    """check_targets and inspect_model are checked like convert (``arguments.checked``): one line, no TypeError."""
    with pytest.raises(BadInputError) as info:
        call(model)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_good_arguments_still_work(model, tmp_path):
    x = np.ones(300, np.float32)
    result = onnxbridge.convert(model, output=tmp_path / "o.onnx", opset=None, inputs={"x": x}, samples=2,
                                seed=np.int64(3), renderers={"junit": tmp_path / "r.xml"})
    assert result.report["status"] == "passed" and (tmp_path / "r.xml").exists()
    assert onnxbridge.validate(model, result.path, {"x": x})["status"] == "passed"
    assert onnxbridge.adapt(str(model), 13).opset_import[0].version == 13
    assert onnxbridge.check_targets(model, ["onnx"], input_shapes=["x:300"])["status"] == "passed"
    assert onnxbridge.inspect_model(onnx.load(model).SerializeToString())["nodes"] > 0
    assert onnxbridge.convert(model, output=tmp_path / "d.onnx", atol=[1e-4, "y:1e-3"], rtol={"y": 0.01}).passed
    with pytest.raises(BadInputError, match="^--dynamic: node"):  # past the argument check, refused by the model
        onnxbridge.convert(model, output=tmp_path / "e.onnx", dynamic={"x": {0: "n"}})


def test_cli_refuses_a_negative_seed(cli, model, tmp_path):
    result = cli("convert", model, "-o", tmp_path / "o.onnx", "--seed", "-1")
    assert result.exit_code == 2 and "-1 is not in the range x>=0" in result.output
    assert_one_line_error(cli("adapt", model, "--opset", "13"), 2, "adapt needs -o OUTPUT")


@pytest.mark.parametrize("given, needle", [
    ((1, 2), "a name -> array mapping or 1 array(s) in input order ('x'), not tuple of 2"),
    ([object()], "sample input 'x' is not a numeric array (object)"),
    ({"x": object()}, "sample input 'x' is not a numeric array (object)"),
])
def test_onnx_sample_inputs_are_checked(given, needle):
    """An ONNX source's sample inputs: a mapping or arrays in input order, each numeric; else one line."""
    with tempfile.TemporaryDirectory() as folder:
        proto = onnx.load(small_onnx(Path(folder) / "m.onnx"))
    with pytest.raises(BadInputError, match=re.escape(needle)):
        onnxbridge.convert(proto, given)


@requires("torch")
def test_the_models_sys_exit_is_an_error_in_python_too(tmp_path):
    """A forward that calls sys.exit never ends the caller's program through the API."""
    import torch

    class Quits(torch.nn.Module):
        def forward(self, x):
            raise SystemExit(0)

    with pytest.raises(BadInputError, match=r"the model's code \(or a library it calls\) called sys.exit\(0\)"):
        onnxbridge.convert(Quits(), (torch.ones(2),), output=tmp_path / "q.onnx")
