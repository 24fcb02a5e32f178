"""Issue 29, items 4, 5 and 9: a skipped hop is never a pass (exit 5 unless --allow-skipped; ``.passed`` False,
``raise_for_status`` raises ValidationSkipped), no silent substitution (an output suffix no backend writes, --dynamic
to a backend with static shapes: exit 2 before any work), and the warnings that explain a verdict are printed."""
from __future__ import annotations

import re
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxbridge
from onnxbridge.errors import BadInputError, HopSkipped, ValidationFailed, ValidationSkipped
from onnxbridge.registry import Plugin
from tests.conftest import EXAMPLES, ROOT, assert_one_line_error, check_report
from tests.helpers.extras import require, requires

REASON = "no CUDA device (planted by the test)"
CNN = f"{EXAMPLES}:cnn"


def _relu(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.fixture
def skippy(monkeypatch, native_in_process):
    """A backend ``skippy`` (``.skip`` files: the ONNX model copied) whose artifact cannot run here: its build and
    its runner say HopSkipped, as TensorRT does without a GPU."""
    from onnxbridge.plugins import BACKENDS, BuildResult

    module = types.ModuleType("skippy_backend")
    module.SUFFIXES, module.PRECISIONS = (".skip",), ("fp32",)

    def build(onnx_path, output, **kwargs):
        Path(output).write_bytes(Path(onnx_path).read_bytes())
        return BuildResult(runner=HopSkipped(REASON))

    def runner(path, *, onnx_path=None):
        raise HopSkipped(REASON)

    module.build, module.runner = build, runner
    module.inspect = lambda path: {"path": str(path), "format": "skippy", "inputs": [{"name": "x", "shape": [2, 4]}],
                                   "outputs": [{"name": "y", "shape": [2, 4]}]}
    module.check = lambda onnx_path, context=None: []
    monkeypatch.setitem(sys.modules, "skippy_backend", module)
    monkeypatch.setitem(BACKENDS._plugins, "skippy", Plugin("skippy", "skippy_backend", requires=("onnx",)))
    return module


# --- item 4: skipped is not passed ---------------------------------------------------------------------------------

def test_convert_with_a_skipped_hop_exits_5_unless_allowed(skippy, cli, tmp_path):
    src = _relu(tmp_path / "m.onnx")
    res = cli("convert", src, "-o", tmp_path / "m.skip", "--report", tmp_path / "r.json")
    err = assert_one_line_error(res, 5, f"validation incomplete: onnx -> skippy skipped: {REASON}", "--allow-skipped")
    assert "status: skipped" in res.stdout and err.count("\n") == 0
    rep = check_report(tmp_path / "r.json")
    assert rep["status"] == "skipped" and rep["hops"][-1]["status"] == "skipped"
    res = cli("convert", src, "-o", tmp_path / "m.skip", "--allow-skipped")
    assert res.exit_code == 0 and res.stderr == "", res.output
    assert "status: skipped" in res.stdout  # still said, never "passed"


def test_validate_with_a_skipped_hop_exits_5_unless_allowed(skippy, cli, tmp_path):
    src = _relu(tmp_path / "m.onnx")
    artifact = tmp_path / "a.skip"
    artifact.write_bytes(src.read_bytes())
    assert_one_line_error(cli("validate", src, artifact), 5, "validation incomplete: onnx -> skippy skipped", REASON)
    assert cli("validate", src, artifact, "--allow-skipped").exit_code == 0
    assert_one_line_error(cli("validate", src, artifact, "--allow-skipped", "--fail-on", "warning"), 1, REASON)
    # Python: raise_on_failure raises for skipped too, unless allow_skipped
    with pytest.raises(ValidationSkipped, match=re.escape(f"onnx -> skippy skipped: {REASON}")):
        onnxbridge.validate(src, artifact, raise_on_failure=True)
    rep = onnxbridge.validate(src, artifact, raise_on_failure=True, allow_skipped=True)
    assert rep["status"] == "skipped"
    with pytest.raises(BadInputError, match="allow_skipped='yes'"):
        onnxbridge.validate(src, artifact, allow_skipped="yes")


def test_python_skipped_is_not_passed_and_raises(skippy, tmp_path):
    result = onnxbridge.convert(_relu(tmp_path / "m.onnx"), output=tmp_path / "m.skip")
    assert result.report["status"] == "skipped" and result.passed is False
    with pytest.raises(ValidationSkipped) as caught:
        result.raise_for_status()
    assert isinstance(caught.value, ValidationFailed) and caught.value.exit_code == 5
    assert caught.value.report is result.report
    assert str(caught.value) == f"validation incomplete: onnx -> skippy skipped: {REASON}"
    assert result.raise_for_status(allow_skipped=True) is result
    with pytest.raises(BadInputError, match="allow_skipped=1"):
        result.raise_for_status(allow_skipped=1)


def test_a_run_that_validated_nothing_is_not_incomplete(cli, tmp_path):
    """--no-validate asked for no verdict: status skipped (nothing passed), exit 0, raise_for_status quiet."""
    src = _relu(tmp_path / "m.onnx")
    res = cli("convert", src, "-o", tmp_path / "o.onnx", "--no-validate")
    assert res.exit_code == 0 and "status: skipped" in res.stdout, res.output
    result = onnxbridge.convert(src, output=tmp_path / "p.onnx", validate=False)
    assert not result.passed and result.raise_for_status() is result


def test_a_passed_run_is_passed(tmp_path):
    result = onnxbridge.convert(_relu(tmp_path / "m.onnx"), output=tmp_path / "o.onnx")
    assert result.passed and result.raise_for_status() is result


def test_the_exit_code_is_documented(cli):
    from onnxbridge.cli.main import EXIT_SKIPPED

    assert EXIT_SKIPPED == 5
    text = " ".join(cli("--help").stdout.split())
    assert "5 validation incomplete" in text
    for command in ("convert", "validate", "matrix"):
        assert "--allow-skipped" in cli(command, "--help").stdout, command
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "**5** validation incomplete" in readme
    assert "`--allow-skipped`" in (ROOT / "docs" / "matrix.md").read_text()


# --- item 5: no silent substitution --------------------------------------------------------------------------------

@pytest.mark.parametrize("name, to, needle", [
    ("m.tflite", None, "-o m.tflite: no installed backend writes files named like that; the backends and their "
                       "suffixes: onnx (.onnx), "),
    ("m.xyz", None, "dlc (.dlc)"),
    ("model", None, "-o model: no installed backend"),
    ("m.tflite", "onnx", "-o m.tflite: --to onnx writes files ending with .onnx"),
    ("m.xml", "onnx", "-o m.xml: --to onnx writes files ending with .onnx"),
])
def test_an_output_suffix_no_backend_writes_is_exit_2(cli, tmp_path, name, to, needle):
    factory = tmp_path / "f.py"  # refused before any work: the factory never runs
    factory.write_text("def build():\n    raise SystemExit('the factory must not run')\n")
    res = cli("convert", f"{factory}:build", "-o", tmp_path / name, *(["--to", to] if to else []))
    assert_one_line_error(res, 2, needle)
    if to is None:
        assert "tensorrt (.engine, .plan)" in res.stderr and "openvino (.xml)" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.py"]


def test_python_api_refuses_the_suffix_and_keeps_in_memory(tmp_path):
    src = _relu(tmp_path / "m.onnx")
    with pytest.raises(BadInputError, match="no installed backend writes files named like that"):
        onnxbridge.convert(src, output=tmp_path / "model.tflite")
    assert not (tmp_path / "model.tflite").exists()
    assert onnxbridge.convert(src).model is not None  # no output: in memory, as before
    assert onnxbridge.convert(src, output=tmp_path / "UPPER.ONNX").passed  # suffixes match as for_file does


def test_dynamic_to_a_backend_with_static_shapes_is_exit_2_with_the_hint(cli, tmp_path):
    require("onnxruntime_qnn")
    factory = tmp_path / "f.py"
    factory.write_text("def build():\n    raise SystemExit('the factory must not run')\n")
    res = cli("convert", f"{factory}:build", "--to", "dlc", "-o", tmp_path / "m.dlc", "--dynamic", "x:0:batch")
    assert_one_line_error(res, 2, "--dynamic x:0:batch: --to dlc cannot keep a dynamic axis",
                          "fix the size with --input-shape x:D1,D2,...", "check --targets dlc")
    res = cli("convert", f"{factory}:build", "-o", tmp_path / "m.dlc", "--dynamic", "x:0")  # inferred --to dlc too
    assert_one_line_error(res, 2, "--dynamic x:0: --to dlc cannot keep")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.py"]
    with pytest.raises(BadInputError, match="cannot keep a dynamic axis"):
        onnxbridge.convert(f"{factory}:build", to="dlc", output=tmp_path / "m.dlc", dynamic={"x": {0: "batch"}})
    # the rule `check --targets dlc` applies: dynamic dims without --input-shape block, with the same fix
    dyn = tmp_path / "dyn.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), dyn)
    checked = cli("check", dyn, "--targets", "dlc")
    assert checked.exit_code == 2 and "dynamic dims" in checked.stdout and "--input-shape x:N,4" in checked.stdout


def test_backends_that_keep_dynamic_axes_are_not_refused():
    from onnxbridge.plugins import BACKENDS
    from onnxbridge.spine import dynamic_not_kept
    from onnxbridge.specs import InputSpec

    spec = InputSpec.parse((), ["x:0:batch"])
    keeps = {n: dynamic_not_kept(n, BACKENDS.module(n), spec) is None for n in BACKENDS.names()}
    assert keeps == {"onnx": True, "coreml": True, "dlc": False, "tensorrt": True, "openvino": True}, keeps
    # --input-shape fixing that input: the size is the user's, not the sample's
    assert dynamic_not_kept("dlc", BACKENDS.module("dlc"), InputSpec.parse(["x:2,3,8,8"], ["x:0"])) is None


@pytest.mark.slow
@requires("torch")
def test_dynamic_with_a_fixed_size_builds_a_dlc_with_a_note(tmp_path):
    require("onnxruntime_qnn")
    rep = onnxbridge.convert(CNN, to="dlc", output=tmp_path / "m.dlc", dynamic=["x:0:batch"],
                             input_shapes=["x:2,3,32,32"]).report
    assert rep["status"] == "passed", rep
    assert "--dynamic x:0:batch: not kept by --to dlc (static shapes); built at x [2, 3, 32, 32] (--input-shape)" \
        in rep["notes"]


def test_matrix_cells_of_a_backend_that_cannot_keep_the_dynamic_axes_are_skipped(tmp_path):
    from onnxbridge.matrix.cells import expand
    from onnxbridge.matrix.manifest import load_manifest

    (tmp_path / "m.toml").write_text('[matrix]\ntargets = ["onnx", "dlc"]\nprecisions = ["fp32"]\nopsets = [17]\n\n'
                                     f'[[model]]\nname = "cnn"\nsource = "{EXAMPLES}:cnn"\ndynamic = ["x:0:batch"]\n\n'
                                     f'[[model]]\nname = "fixed"\nsource = "{EXAMPLES}:cnn"\ndynamic = ["x:0"]\n'
                                     'input_shapes = ["x:2,3,32,32"]\n')
    skips = {c.name: c.skip for c in expand(load_manifest(tmp_path / "m.toml"))}
    assert skips["cnn/onnx-fp32-opset17"] is None
    if "unavailable" in (skips["fixed/dlc-fp32-opset17"] or ""):
        pytest.skip("no onnxruntime-qnn: the dlc cells are skipped for that")
    assert skips["fixed/dlc-fp32-opset17"] is None  # input_shapes fixes the size
    assert skips["cnn/dlc-fp32-opset17"].startswith("backend dlc cannot keep dynamic axes (x:0): its models have "
                                                    "static shapes (fix the size with input_shapes")


# --- item 9: the warnings that explain a verdict are printed --------------------------------------------------------

FROZEN = '''\
import torch


class Frozen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        return y * float(y.mean().item())  # traced: the mean of the sample, frozen into a constant


def build():
    torch.manual_seed(0)
    return Frozen().eval(), (torch.randn(2, 8),)
'''


@pytest.mark.slow
def test_the_tracer_warning_of_a_frozen_item_is_printed(cli, tmp_path):
    require("torch")
    (tmp_path / "frozen.py").write_text(FROZEN)
    res = cli("convert", f"{tmp_path / 'frozen.py'}:build", "-o", tmp_path / "m.onnx", "--exporter", "torchscript",
              "--report", tmp_path / "r.json")
    rep = check_report(tmp_path / "r.json")
    frozen = [w for w in rep["warnings"] if w.startswith("Converting a tensor to a Python")]
    assert frozen and "might not generalize to other inputs" in frozen[0], rep["warnings"]  # kept whole (< 300)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("warning: ")]
    assert any(ln.startswith("warning: Converting a tensor to a Python") for ln in lines), res.stdout
    status = res.stdout.splitlines().index(next(ln for ln in res.stdout.splitlines() if ln.startswith("status: ")))
    assert all(res.stdout.splitlines().index(ln) < status for ln in lines)  # after the table, before the status
    quiet = cli("-q", "convert", f"{tmp_path / 'frozen.py'}:build", "-o", tmp_path / "q.onnx", "--exporter",
                "torchscript")
    assert "warning:" not in quiet.output


def test_warning_lines_are_one_line_each_cut_and_deduplicated():
    from onnxbridge.cli.main import WARNING_CHARS, WARNINGS_SHOWN, _warning_lines

    long = "x" * 1000
    lines = _warning_lines(["a\nb   c", "a b c", long, " "])
    assert lines[0] == "a b c" and len(lines) == 2 and len(lines[1]) == WARNING_CHARS and lines[1].endswith("...")
    many = _warning_lines([f"w{i}" for i in range(WARNINGS_SHOWN + 4)])
    assert len(many) == WARNINGS_SHOWN + 1 and many[-1].startswith("4 more warning(s)")


@requires("torch")
def test_random_calibration_data_is_marked_and_warned_about(cli, tmp_path):
    from onnxbridge.inputfile import random_origin
    from onnxbridge.spine.conversion import random_calibration_warning

    assert cli("inputs", CNN, "-o", tmp_path / "cal.npz", "--calibration", "3").exit_code == 0
    assert random_origin(tmp_path / "cal.npz").startswith("2 of 3 calibration batch(es) drawn at random")
    with np.load(tmp_path / "cal.npz") as data:  # numpy reads it as before
        assert data["x"].shape == (3, 2, 3, 32, 32)
    warning = random_calibration_warning(tmp_path / "cal.npz")
    assert warning.startswith("int8 calibrated from random data: --calibration cal.npz holds 2 of 3")
    # the source's own sample alone (seed 0, one batch) is not random; a file numpy wrote carries no mark
    assert cli("inputs", CNN, "-o", tmp_path / "one.npz", "--calibration", "1").exit_code == 0
    np.savez(tmp_path / "own.npz", x=np.zeros((1, 3, 32, 32), np.float32))
    for plain in ("one.npz", "own.npz"):
        assert random_origin(tmp_path / plain) is None and random_calibration_warning(tmp_path / plain) is None
        assert zipfile.ZipFile(tmp_path / plain).comment == b""
    # a damaged or foreign file carries no mark, and reading it raises nothing
    whole = (tmp_path / "cal.npz").read_bytes()
    for name, data in (("cut.npz", whole[: len(whole) // 2]), ("junk.npz", b"PK\x05\x06" + b"\xff" * 40),
                       ("empty.npz", b"")):
        (tmp_path / name).write_bytes(data)
        assert random_origin(tmp_path / name) is None
    assert random_origin(tmp_path / "missing.npz") is None and random_origin(tmp_path) is None


@pytest.mark.slow
@requires("torch")
def test_an_int8_build_on_random_calibration_prints_the_warning(cli, tmp_path):
    require("nncf")
    assert cli("inputs", CNN, "-o", tmp_path / "cal.npz", "--calibration", "3").exit_code == 0
    res = cli("convert", CNN, "-o", tmp_path / "q.xml", "--precision", "int8", "--calibration",
              tmp_path / "cal.npz")
    assert "warning: int8 calibrated from random data: --calibration cal.npz" in res.stdout, res.output
