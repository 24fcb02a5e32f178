"""`check --targets` says what a build would rewrite (the legalization rules that fire, per node) and, per blocker,
the way out."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxbridge.hints import hint
from tests.conftest import check_report
from tests.helpers.extras import require


def _model(path):
    """Exact GELU (the Erf pattern, which the QNN rules rewrite), then an op no backend has, on a dynamic batch."""
    consts = {"s2": np.float32(math.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [helper.make_node("Div", ["x", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"], name="gelu_out"),
             helper.make_node("Unique", ["g"], ["y"], name="uniq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def test_check_lists_rewrites_and_hints(cli, tmp_path):
    require("coremltools")
    require("onnxruntime_qnn")
    _model(tmp_path / "m.onnx")
    res = cli("check", tmp_path / "m.onnx", "--targets", "coreml,dlc", "--report", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    rep = check_report(tmp_path / "r.json")
    dlc, coreml = rep["targets"]["dlc"], rep["targets"]["coreml"]
    assert dlc["rewrites"] == ["gelu-erf-to-gelu (node gelu_out)"] and coreml["rewrites"] == []
    for row in (dlc, coreml):
        assert len(row["hints"]) == len(row["blockers"])
        unique = row["blockers"].index(next(b for b in row["blockers"] if "'uniq' (Unique)" in b))
        assert "replace the op in the source" in row["hints"][unique]
    dynamic = next(i for i, b in enumerate(dlc["blockers"]) if "dynamic dims" in b)
    assert dlc["hints"][dynamic] is None  # the blocker names its fix (--input-shape x:N,8) itself
    assert res.stdout.count("  hint: replace the op") == 0 and res.stdout.count("  hint: no equivalent") == 2
    assert "rewrites: gelu-erf-to-gelu (node gelu_out)" in res.stdout
    res = cli("check", tmp_path / "m.onnx", "--targets", "dlc", "--input-shape", "x:2,8")
    assert "dynamic dims" not in res.stdout and "'uniq' (Unique)" in res.stdout


@pytest.mark.parametrize("blocker, advice", [
    ("node 'r' (Resize): needs --target iOS17 or newer (building for iOS16)", "build with --target iOS17"),
    ("node 'c' (Conv): its weight must be a constant for Core ML", "needs this value at build time"),
    ("input 'x' has rank 7; Core ML allows rank <= 5", "rank <= 5"),
    ("node 'u' (Unique) has no QNN op: the QNN execution provider cannot take it", "replace the op"),
    ("the graph split into 2 QNN partitions; node(s) that fell out to the CPU: 'n' (Neg)", "one QNN graph"),
    ("node 'p' (Pad): mode=wrap has no Core ML equivalent", "use the form the message names"),
])
def test_hint_families(blocker, advice):
    assert advice in hint(blocker)


def test_no_hint_without_advice():
    assert hint("something nobody has seen") is None
