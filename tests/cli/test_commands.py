"""The command line: start-up cost, doctor, inspect, and one-line errors with exit code 2 for bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import EXAMPLES, ROOT, assert_one_line_error, check_report
from tests.helpers.extras import require, requires
from tests.helpers.models import tiny_onnx

FACTORY = str(ROOT / "examples" / "models.py")


def test_help_is_fast_and_imports_no_framework():
    code = ("import sys, time; t = time.perf_counter();"
            "from click.testing import CliRunner; from onnxbridge.cli.main import cli;"
            "r = CliRunner().invoke(cli, ['--help']); assert r.exit_code == 0, r.output;"
            "r = CliRunner().invoke(cli, ['--version']); assert '0.' in r.output;"
            "print([m for m in ('torch', 'tensorflow', 'keras', 'paddle', 'jax', 'jaxlib', 'flax', 'jax2onnx', 'sklearn', 'onnx', 'numpy', 'rich')"
            " if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_version_and_help_in_a_real_process():
    exe = Path(sys.executable).with_name("onnxbridge")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "onnxbridge.cli.main"]
    out = subprocess.run([*cmd, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("onnxbridge, version")
    out = subprocess.run([*cmd, "convert", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--opset" in out.stdout


def test_doctor_lists_every_plugin(cli):
    res = cli("doctor", "--json")
    assert res.exit_code == 0
    info = json.loads(res.stdout)
    plugins = {(p["kind"], p["name"]): p for p in info["plugins"]}
    assert {("frontend", n) for n in ("torch", "tensorflow", "jax", "paddle", "sklearn", "onnx")} | {("backend", "onnx")} \
        <= set(plugins)
    torch_row = plugins[("frontend", "torch")]
    assert torch_row["available"] and torch_row["versions"]["torch"].startswith("2.13.0")
    assert info["environment"]["packages"]["onnxruntime"]
    assert cli("doctor").exit_code == 0


def test_inspect(cli, tmp_path):
    path = tiny_onnx(tmp_path / "tiny.onnx")
    res = cli("inspect", path, "--json")
    assert res.exit_code == 0
    info = json.loads(res.stdout)
    assert info["opsets"] == {"ai.onnx": 17} and info["ir_version"] == 8
    assert info["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["n", 4]}]
    assert info["ops"] == {"MatMul": 1, "Relu": 1}
    assert (info["parameters"], info["parameter_bytes"], info["external_data"]) == (12, 48, [])
    text = cli("inspect", path)
    assert text.exit_code == 0 and "MatMul" in text.stdout


@requires("torch")
def test_convert_prints_summary_and_writes_report(cli, tmp_path):
    res = cli("convert", f"{FACTORY}:lstm", "-o", tmp_path / "l.onnx", "--opset", "17", "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    assert "wrote" in res.stdout and "status: passed" in res.stdout
    assert check_report(tmp_path / "r.json")["status"] == "passed"
    quiet = cli("-q", "convert", f"{FACTORY}:lstm", "-o", tmp_path / "l2.onnx", "--opset", "17",
                "--input-name", "tokens", "--output-name", "tags", "--dynamic", "tokens:1:seq")
    assert quiet.exit_code == 0 and quiet.stdout == ""
    model = onnx.load(tmp_path / "l2.onnx")
    assert [i.name for i in model.graph.input] == ["tokens"] and [o.name for o in model.graph.output] == ["tags"]
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"


# Bad input: one line, exit 2, no traceback, nothing written ---------------------------------------

@pytest.mark.parametrize("make, needle", [
    (lambda d: d / "missing.onnx", "does not exist"),
    (lambda d: (d / "t.onnx").write_bytes(tiny_onnx(d / "full.onnx").read_bytes()[:40]) and d / "t.onnx",
     "not a readable ONNX model"),
    (lambda d: (d / "x.onnx").write_text("hello, not a model\n") and d / "x.onnx", "ONNX"),
    (lambda d: (d / "m.xyz").write_text("?") and d / "m.xyz", "no frontend recognises"),
    pytest.param(lambda d: (d / "m.pt").write_bytes(b"garbage") and d / "m.pt", "not a torch archive",
                 marks=requires("torch")),
], ids=["missing", "truncated", "not-onnx", "unknown-kind", "not-torch"])
def test_bad_source_files(cli, tmp_path, make, needle):
    source = make(tmp_path)
    out = tmp_path / "out.onnx"
    assert_one_line_error(cli("convert", source, "-o", out), 2, needle)
    assert not out.exists()
    if source.suffix == ".onnx":
        assert_one_line_error(cli("inspect", source), 2)


@pytest.mark.parametrize("args, needle", [
    (["--input-shape", "x:1,a,3"], "must be integers"),
    (["--input-shape", "x"], "NAME:D1,D2"),
    pytest.param(["--input-shape", "y:1,3,8,8"], "unknown input 'y'", marks=requires("torch")),
    pytest.param(["--input-shape", "x:1,3"], "fails on inputs", marks=requires("torch")),
    (["--input-shape", "x:1,3,8,8:complex7"], "unknown dtype"),
    (["--dynamic", "x:first"], "NAME:AXIS"),
    pytest.param(["--dynamic", "x:7"], "rank 4", marks=requires("torch")),
    pytest.param(["--from", "keras"], "unknown frontend 'keras'", marks=requires("torch")),
    (["--to", "nothing"], "unknown backend 'nothing'"),
    pytest.param(["--signature", "serve"], "--signature does not apply to torch sources", marks=requires("torch")),
    pytest.param(["--inputs-as-nchw", "x"], "--inputs-as-nchw does not apply to torch sources",
                 marks=requires("torch")),
], ids=["dims", "format", "name", "rank", "dtype", "dynamic", "axis", "from", "to", "signature", "nchw"])
def test_bad_options(cli, tmp_path, args, needle):
    out = tmp_path / "out.onnx"
    assert_one_line_error(cli("convert", f"{FACTORY}:cnn", "-o", out, *args), 2, needle)
    assert not out.exists()


def test_bad_factories(cli, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def build():\n    raise RuntimeError('weights missing')\n")
    assert_one_line_error(cli("convert", f"{bad}:build", "-o", tmp_path / "o.onnx"), 2, "raised RuntimeError",
                          "weights missing")
    assert_one_line_error(cli("convert", f"{bad}:nothing", "-o", tmp_path / "o.onnx"), 2, "no callable")
    assert_one_line_error(cli("convert", f"{tmp_path}/none.py:build", "-o", tmp_path / "o.onnx"), 2)
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def build(:\n")
    assert_one_line_error(cli("convert", f"{syntax}:build", "-o", tmp_path / "o.onnx"), 2, "SyntaxError")
    assert not (tmp_path / "o.onnx").exists()


def test_output_never_overwrites_the_source(cli, tmp_path):
    path = tiny_onnx(tmp_path / "tiny.onnx")
    before = path.read_bytes()
    assert_one_line_error(cli("convert", path, "-o", path), 2, "overwrite the source")
    assert path.read_bytes() == before


def test_bad_input_in_a_real_process_has_no_traceback(tmp_path):
    exe = Path(sys.executable).with_name("onnxbridge")
    out = subprocess.run([str(exe), "convert", str(tmp_path / "nope.pt2"), "-o", str(tmp_path / "o.onnx")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and out.stderr.startswith("error:")
    usage = subprocess.run([str(exe), "convert"], capture_output=True, text=True)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_backend_options_are_refused_where_they_do_not_apply(cli, tmp_path):
    res = cli("convert", f"{EXAMPLES}:cnn", "-o", tmp_path / "m.onnx", "--workspace", "64")
    assert_one_line_error(res, 2, "--workspace does not apply to --to onnx")


@requires("torch")
def test_check_targets_lists_blockers_per_target(cli, tmp_path):
    """`check --targets` names every blocking node per backend, prefixed with the target, and exits 2; a clean
    model exits 0; an unknown target is a one-line error."""
    require("coremltools")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("Unique", ["r"], ["y"], name="the_unique")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    bad = tmp_path / "unique.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), bad)
    res = cli("check", bad, "--targets", "coreml", "--report", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    assert "coreml: node 'the_unique' (Unique)" in res.stdout
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "blocked" and rep["targets"]["coreml"]["blockers"]
    good = tmp_path / "cnn.onnx"
    assert cli("convert", f"{EXAMPLES}:cnn", "-o", good, "--opset", "17").exit_code == 0
    res = cli("check", good, "--targets", "coreml", "--opset", "13")
    assert res.exit_code == 0, res.output
    assert_one_line_error(cli("check", good, "--targets", "nope"), 2, "unknown backend 'nope'")


def test_inspect_shows_a_backend_artifact(cli, tmp_path):
    """inspect renders any backend's artifact: format, I/O (Core ML's flexible ranges as LO..HI) and ops."""
    require("coremltools")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    assert cli("convert", tmp_path / "m.onnx", "--to", "coreml", "-o", tmp_path / "m.mlpackage").exit_code == 0
    res = cli("inspect", tmp_path / "m.mlpackage")
    assert res.exit_code == 0 and "coreml" in res.stdout and "[1..1024, 3]" in res.stdout and "relu" in res.stdout
    info = json.loads(cli("inspect", tmp_path / "m.mlpackage", "--json").stdout)
    assert info["format"] == "coreml" and info["inputs"][0]["shape_range"][0] == [1, 1024]
