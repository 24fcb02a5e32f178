"""The Core ML package's interface edge cases: rank-0 inputs and outputs (Core ML's are [1]; the runners give the
ONNX shapes back), Shape/Size outputs computed from the input at run time, constant outputs, and the inputs that
stay refused. Each model is converted, its saved program run by the host evaluator and compared with onnxruntime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge

from tests.helpers.extras import require

require("coremltools")

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _save(tmp_path: Path, nodes, inputs, outputs, inits=(), opset=17) -> Path:
    """Inputs ``(name, elem_type, shape)`` (shape None: no shape), outputs ``(name, elem_type)``, initializers
    ``(name, array)``."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), src)
    return src


def _convert(src: Path, tmp_path: Path, feeds: dict) -> dict:
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", inputs=feeds).report
    hop = rep["hops"][-1]
    assert rep["status"] == "passed", [(o["name"], o.get("max_abs"), o.get("error")) for o in hop["outputs"]] + \
        hop["errors"]
    return rep


def _blockers(src: Path) -> list[str]:
    from onnxbridge.spine import check_targets

    return check_targets(str(src), ["coreml"])["blockers"]


def test_rank0_inputs_and_outputs(tmp_path):
    """Rank-0 inputs are [1] in Core ML (squeezed inside), rank-0 outputs [1] (recorded in the package, so the
    runner gives them back as rank 0); the report notes both."""
    from onnxbridge.backends.coreml import inspect
    from onnxbridge.backends.coreml.runners import Runner

    src = _save(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"]),
                           helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
                           helper.make_node("ReduceMean", ["y"], ["mean"], axes=[0], keepdims=0)],
                [("x", F, [4]), ("lo", F, []), ("hi", F, [])], [("y", F), ("peak", F), ("mean", F)], opset=17)
    assert _blockers(src) == []
    feeds = {"x": np.array([-2, 0.5, 1, 3], np.float32), "lo": np.array(-1, np.float32),
             "hi": np.array(2, np.float32)}
    rep = _convert(src, tmp_path, feeds)
    notes = rep["notes"]
    assert "input 'lo' is rank 0 in ONNX: the Core ML input is [1]" in notes
    assert "output 'peak' is rank 0 in ONNX: the Core ML output is [1]" in notes
    assert "output 'mean' is rank 0 in ONNX: the Core ML output is [1]" in notes
    info = inspect(tmp_path / "m.mlpackage")
    assert {i["name"]: i["shape"] for i in info["inputs"]} == {"x": [4], "lo": [1], "hi": [1]}
    assert {o["name"]: o["shape"] for o in info["outputs"]} == {"y": [4], "peak": [1], "mean": [1]}
    y, peak, mean = Runner(tmp_path / "m.mlpackage")(feeds)
    assert y.shape == (4,) and peak.shape == () and mean.shape == ()
    assert float(peak) == 3 and float(mean) == pytest.approx(np.mean([-1, 0.5, 1, 2]))


@pytest.mark.parametrize("flexible", [False, True], ids=["fixed", "flexible"])
def test_shape_and_size_outputs_are_computed_from_the_input(tmp_path, flexible):
    """Shape (with start/end) and Size outputs fold to constants at fixed shapes; the package computes them from
    the input, so with a flexible dim they follow the input's size."""
    from onnxbridge.backends.coreml.runners import Runner

    src = _save(tmp_path, [helper.make_node("Shape", ["x"], ["s"]),
                           helper.make_node("Shape", ["x"], ["tail"], start=-2, end=3),
                           helper.make_node("Size", ["x"], ["n"]), helper.make_node("Relu", ["x"], ["y"])],
                [("x", F, ["rows" if flexible else 3, 4, 2])], [("s", I64), ("tail", I64), ("n", I64), ("y", F)])
    rep = _convert(src, tmp_path, {"x": np.ones((3, 4, 2), np.float32)})
    assert "output 'n' is rank 0 in ONNX: the Core ML output is [1]" in rep["notes"]
    assert bool(rep["artifact"]["backend"]["flexible_inputs"]) == flexible
    rows = 7 if flexible else 3
    s, tail, n, _ = Runner(tmp_path / "m.mlpackage")({"x": np.zeros((rows, 4, 2), np.float32)})
    assert s.tolist() == [rows, 4, 2] and tail.tolist() == [4, 2] and n.shape == () and int(n) == rows * 8


def test_a_constant_output_is_output_as_its_value(tmp_path):
    """A Constant node's output is the constant (noted); one MIL cannot hold exactly is refused."""
    big = helper.make_node("Constant", [], ["big"], value=numpy_helper.from_array(np.array([2**40], np.int64)))
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([5, -6], np.int64))),
             helper.make_node("Relu", ["x"], ["y"])]
    src = _save(tmp_path, nodes, [("x", F, [2])], [("y", F), ("c", I64)])
    rep = _convert(src, tmp_path, {"x": np.array([-1, 1], np.float32)})
    assert "output 'c' is a constant in ONNX (no input changes it): Core ML outputs its value" in rep["notes"]
    src = _save(tmp_path, [*nodes, big], [("x", F, [2])], [("y", F), ("big", I64)])
    assert _blockers(src) == ["coreml: output 'big' is a constant (int64 values MIL cannot hold exactly); "
                              "Core ML cannot output it"]


@pytest.mark.parametrize("inputs,nodes,blocker", [
    ([], [helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(np.ones(2, np.float32)))],
     "the model has no inputs; a Core ML model needs at least one (Core ML does not load one without)"),
    ([("x", F, None)], [helper.make_node("Relu", ["x"], ["y"])],
     "input 'x' has no shape (unknown rank); give one with --input-shape"),
    ([("x", TensorProto.UINT32, [2])], [helper.make_node("Cast", ["x"], ["y"], to=F)],
     "input 'x' is UINT32; Core ML inputs are float or integer tensors"),
    ([("x", TensorProto.STRING, [])], [helper.make_node("Cast", ["x"], ["y"], to=F)],
     "input 'x' is STRING; Core ML inputs are float or integer tensors"),
], ids=["no_inputs", "unknown_rank", "uint32", "string_scalar"])
def test_what_cannot_work_stays_refused(tmp_path, inputs, nodes, blocker):
    assert _blockers(_save(tmp_path, nodes, inputs, [("y", F)])) == [f"coreml: {blocker}"]


def test_small_unsigned_inputs_are_int32_and_noted(tmp_path):
    """UINT8 and UINT16 values fit int32: Core ML takes them as int32, and the report says so."""
    u8, u16 = TensorProto.UINT8, TensorProto.UINT16
    src = _save(tmp_path, [helper.make_node("Max", ["a", "b"], ["y"]), helper.make_node("Cast", ["c"], ["z"], to=F)],
                [("a", u8, [3]), ("b", u8, [3]), ("c", u16, [2])], [("y", u8), ("z", F)])
    rep = _convert(src, tmp_path, {"a": np.array([0, 255, 7], np.uint8), "b": np.array([9, 3, 200], np.uint8),
                                   "c": np.array([65535, 3], np.uint16)})
    assert {"input 'a' is UINT8 in ONNX and int32 in Core ML",
            "input 'c' is UINT16 in ONNX and int32 in Core ML"} <= set(rep["notes"])


def test_a_dim_fixed_by_input_shape_is_validated_at_that_size_only(tmp_path):
    """`--input-shape x:2,8` fixes the ONNX model's symbolic dim in the package: the sample grown to 3 rows runs on
    the ONNX hop but is left out of the Core ML hop (with a note), and the runner refuses it as Core ML would."""
    from onnxbridge.backends.coreml.runners import Runner

    src = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["n", 8])], [("y", F)])
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", input_shapes=["x:2,8"]).report
    onnx_hop, coreml_hop = rep["hops"]
    assert rep["status"] == "passed" and onnx_hop["samples"] == 2 and coreml_hop["samples"] == 1
    assert any("left out" in n and "[2, 8]" in n for n in coreml_hop["notes"])
    runner = Runner(tmp_path / "m.mlpackage")
    assert runner.static_shapes == {"x": [2, 8]}
    with pytest.raises(ValueError, match=r"takes 'x' with dims \[2, 8\], not \[3, 8\]"):
        runner({"x": np.zeros((3, 8), np.float32)})


@pytest.mark.slow
def test_no_temporary_package_is_left_behind(tmp_path, monkeypatch, native_in_process):
    """coremltools writes each package to a temporary folder before it is saved; the build removes it."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    src = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 8])], [("y", F)])
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage").report
    assert rep["status"] == "passed"
    assert not list(scratch.glob("*.mlpackage")), list(scratch.iterdir())
