"""Hostile ONNX files, one case each: what `inspect` shows of damaged files, size limits checked before anything
runs, the worker's memory limit, and malformed graphs refused before onnx's C++ (which crashes on them) reads them."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.errors import BadInputError
from tests.helpers.fuzzing import mlp, shaped


def _cli(*args, env=None, timeout=120):
    import os

    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "onnxbridge.cli.main", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env={**os.environ, "NO_COLOR": "1", **(env or {})})
    r.seconds = time.perf_counter() - t
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return r


def _save(model, path):
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("code", [0, 99, -1])
@pytest.mark.fast_cases("99")
def test_inspect_names_unknown_data_types(tmp_path, code):
    m = mlp()
    m.graph.input[0].type.tensor_type.elem_type = code
    m.graph.initializer[0].data_type = code
    path = _save(m, tmp_path / "m.onnx")
    r = _cli("inspect", "--json", path)
    assert r.returncode == 0
    assert json.loads(r.stdout)["inputs"][0]["dtype"] == f"unknown({code})"
    assert _cli("inspect", path).returncode == 0
    r = _cli("convert", path, "-o", tmp_path / "out.onnx")
    assert r.returncode == 2 and "data type" in r.stderr and not (tmp_path / "out.onnx").exists()


@pytest.mark.slow
def test_inspect_reads_names_that_are_not_utf8(tmp_path):
    m = mlp()
    m.graph.node[0].op_type, m.metadata_props.add(key="kQ", value="v")
    data = m.SerializeToString().replace(b"MatMul", b"MatM\xffl", 1).replace(b"kQ", b"k\xfe")
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    for args in (["inspect"], ["inspect", "--json"]):
        assert _cli(*args, path).returncode == 0


@pytest.mark.slow
def test_megabytes_of_metadata_are_cut_in_the_terminal(tmp_path):
    m = mlp()
    m.metadata_props.add(key="blob", value="[red]x" * 200_000)
    for i in range(3000):
        m.metadata_props.add(key=f"k{i}", value="v")
    path = _save(m, tmp_path / "m.onnx")
    r = _cli("inspect", path)
    assert r.returncode == 0 and r.seconds < 15
    assert "1,200,000 characters" in r.stdout and "more metadata entries" in r.stdout and len(r.stdout) < 20_000
    assert len(json.loads(_cli("inspect", "--json", path).stdout)["metadata"]["blob"]) == 1_200_000


@pytest.mark.parametrize("location", ["/proc/self/environ", "../outside.bin", "a\0b"])
def test_inspect_reads_no_file_outside_the_model_folder(tmp_path, location):
    (tmp_path / "outside.bin").write_bytes(b"\0" * 4096)
    sub = tmp_path / "model"
    sub.mkdir()
    (sub / "inside.bin").write_bytes(b"\0" * 256)
    m = mlp()
    for t, where in zip(m.graph.initializer, [location, "inside.bin"]):
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", where), ("length", "16")):
            e = t.external_data.add()
            e.key, e.value = k, v
    path = _save(m, sub / "m.onnx")
    r = _cli("inspect", "--json", path)
    assert r.returncode == 2 and "external data location" in r.stderr and not r.stdout
    del m.graph.initializer[0].external_data[:]
    m.graph.initializer[0].data_location = TensorProto.DEFAULT
    m.graph.initializer[0].raw_data = b"\0" * 128
    rows = json.loads(_cli("inspect", "--json", _save(m, sub / "m.onnx")).stdout)["external_data"]
    assert rows == [{"location": "inside.bin", "bytes": 256, "exists": True}]


def test_inspect_model_takes_protos_and_bytes_and_refuses_the_rest():
    m = mlp()
    assert onnxbridge.inspect_model(m)["nodes"] == 4
    assert onnxbridge.inspect_model(m.SerializeToString())["ops"]["MatMul"] == 2
    for bad in (None, 123, b"\x08\xff\xff garbage"):
        with pytest.raises(BadInputError):
            onnxbridge.inspect_model(bad)


def _constant_of_shape(size):
    m = shaped()
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(size, np.int64), "shape"))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    m.graph.output[0].type.tensor_type.ClearField("shape")
    return m


@pytest.mark.slow
def test_a_tiny_file_that_would_allocate_gigabytes_is_refused_before_it_runs(tmp_path):
    path = _save(_constant_of_shape([25000, 50000]), tmp_path / "bomb.onnx")
    assert path.stat().st_size < 400
    for args in (["convert", path, "-o", tmp_path / "out.onnx"], ["adapt", path, "-o", tmp_path / "a.onnx",
                                                                    "--opset", "13"]):
        r = _cli(*args)
        assert r.returncode == 2 and r.seconds < 30
        assert "tensor 'ones' (ConstantOfShape 'cos') of shape [25000, 50000] would take 4.7 GB" in r.stderr
        assert "ONNXBRIDGE_MAX_TENSOR_MB" in r.stderr
    assert not list(tmp_path.glob("*out*")) and not (tmp_path / "a.onnx").exists()


@pytest.mark.slow
def test_the_tensor_limit_is_a_setting(tmp_path):
    small = _save(_constant_of_shape([2, 3]), tmp_path / "small.onnx")
    big = _save(_constant_of_shape([350_000, 3]), tmp_path / "four_mb.onnx")
    assert _cli("convert", big, "-o", tmp_path / "a.onnx").returncode == 0
    r = _cli("convert", big, "-o", tmp_path / "b.onnx", env={"ONNXBRIDGE_MAX_TENSOR_MB": "1"})
    assert r.returncode == 2 and "4.0 MB, over the 1.0 MB limit" in r.stderr
    assert _cli("convert", small, "-o", tmp_path / "c.onnx", env={"ONNXBRIDGE_MAX_TENSOR_MB": "1"}).returncode == 0


@pytest.mark.slow
def test_huge_static_inputs_are_refused_before_samples_are_made(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [60000, 60000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [60000, 60000])])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                 tmp_path / "wide.onnx")
    r = _cli("convert", path, "-o", tmp_path / "out.onnx")
    assert r.returncode == 2 and "input 'x' of shape [60000, 60000] would take 13.4 GB" in r.stderr
    r = _cli("convert", _save(mlp(), tmp_path / "m.onnx"), "-o", tmp_path / "o.onnx", "--input-shape",
             "x:1000000000,4")
    assert r.returncode == 2 and "input 'x' of shape [1000000000, 4] would take 14.9 GB" in r.stderr


@pytest.mark.slow
def test_a_run_over_the_memory_limit_is_stopped(tmp_path):
    """A shape computed from an input's values cannot be checked in advance: the worker's memory is watched."""
    nodes = [helper.make_node("ConstantOfShape", ["n"], ["big"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("n", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                 tmp_path / "grow.onnx")
    np.savez(tmp_path / "n.npz", n=np.array([40000, 40000], np.int64))  # 6.4 GB of float32
    r = _cli("convert", path, "-o", tmp_path / "out.onnx", "--inputs", tmp_path / "n.npz",
             env={"ONNXBRIDGE_MAX_MEMORY_MB": "1000"})
    assert r.returncode == 2 and r.seconds < 60
    assert "over the 1,000.0 MB limit; it was stopped" in r.stderr and "ONNXBRIDGE_MAX_MEMORY_MB" in r.stderr
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("damage", ["short raw data", "cycle", "self-calling function"])
@pytest.mark.fast_cases("self-calling function")
def test_graphs_that_crash_onnx_are_refused_first(tmp_path, damage):
    """Each of these ended the whole run with SIGSEGV inside onnx's shape inference or inliner."""
    m = shaped()
    if damage == "short raw data":
        m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:7]
    elif damage == "cycle":
        m.graph.node[0].input[0] = m.graph.node[2].output[0]
    else:
        m.functions.append(helper.make_function("local", "F", ["a"], ["b"],
                                                [helper.make_node("F", ["a"], ["b"], domain="local")],
                                                [helper.make_opsetid("", 17)]))
        m.opset_import.add(domain="local", version=1)
        m.graph.node[0].domain, m.graph.node[0].op_type = "local", "F"
    path = _save(m, tmp_path / "bad.onnx")
    for args in (["convert", path, "-o", tmp_path / "o.onnx"], ["adapt", path, "-o", tmp_path / "a.onnx",
                                                                  "--opset", "13"],
                 ["check", path, "--targets", "onnx", "--opset", "13"]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "error:" in r.stderr and "'bad.onnx'" in r.stderr


def _calls(name: str, inp: str = "a", out: str = "b") -> onnx.NodeProto:
    return helper.make_node(name, [inp], [out], domain="local")


def _function(name: str, body: list) -> onnx.FunctionProto:
    return helper.make_function("local", name, ["a"], ["b"], body,
                                [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def _with_functions(*functions: onnx.FunctionProto) -> onnx.ModelProto:
    """``shaped()`` whose first node calls local.F, one of ``functions``."""
    m = shaped()
    m.functions.extend(functions)
    m.opset_import.add(domain="local", version=1)
    m.graph.node[0].domain, m.graph.node[0].op_type = "local", "F"
    return m


def _if_calling(name: str) -> list:
    """A function body whose If's then-branch calls ``name``."""
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)  # noqa: E731
    then = helper.make_graph([_calls(name, "a", "t")], "then", [], [out("t")])
    orelse = helper.make_graph([helper.make_node("Identity", ["a"], ["e"])], "else", [], [out("e")])
    return [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.BOOL, [], [True])),
            helper.make_node("If", ["c"], ["b"], then_branch=then, else_branch=orelse)]


RECURSIONS = {
    "each other": ([_function("F", [_calls("G")]), _function("G", [_calls("F")])], "local.F -> local.G -> local.F"),
    "through an If": ([_function("F", _if_calling("F"))], "local.F -> local.F"),
    "three, uncalled": ([_function("F", [helper.make_node("Relu", ["a"], ["b"])]), _function("G", [_calls("H")]),
                         _function("H", [_calls("K")]), _function("K", [_calls("G")])],
                        "local.G -> local.H -> local.K -> local.G"),
}


@pytest.mark.parametrize("case", RECURSIONS)
@pytest.mark.fast_cases("through an If")
def test_recursive_functions_are_refused_before_any_backend(tmp_path, case):
    """coremltools recursed into such functions until it crashed (SIGSEGV, exit 4 from `check --targets coreml`);
    onnx's checker lets them through. Every command that reads the model refuses them first."""
    functions, cycle = RECURSIONS[case]
    path = _save(_with_functions(*functions), tmp_path / "rec.onnx")
    for args in (["check", path, "--targets", "coreml"], ["check", path, "--targets", "openvino,onnx"],
                 ["convert", path, "-o", tmp_path / "o.onnx"], ["convert", path, "-o", tmp_path / "o.mlpackage"],
                 ["adapt", path, "-o", tmp_path / "a.onnx", "--opset", "13"], ["validate", path, path]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip() == f"error: 'rec.onnx' is not a valid ONNX model: its local functions call " \
                                   f"themselves ({cycle}); ONNX functions may not recurse", (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.onnx"]
    with pytest.raises(BadInputError, match=f"call themselves \\({cycle}\\)"):
        onnxbridge.check_targets(path, ["onnx"])


def test_functions_calling_functions_without_a_cycle_pass():
    """A chain of 5,000 functions, each calling the next (the walk is iterative), and a diamond: no cycle."""
    from onnxbridge.wellformed import function_cycle, problem

    chain = [_function(f"F{i}", [_calls(f"F{i + 1}")]) for i in range(5000)]
    chain.append(_function("F5000", [helper.make_node("Relu", ["a"], ["b"])]))
    assert function_cycle(_with_functions(*chain)) is None
    diamond = [_function("F", [_calls("G", "a", "g"), _calls("H", "g", "b")]), _function("G", _if_calling("K")),
               _function("H", [_calls("K")]), _function("K", [helper.make_node("Relu", ["a"], ["b"])])]
    assert problem(_with_functions(*diamond)) is None
    chain[-1] = _function("F5000", [_calls("F0")])
    assert len(function_cycle(_with_functions(*chain))) == 5002
