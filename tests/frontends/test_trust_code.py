"""Model files that are code run only with --trust: TorchScript archives, torch.export programs, SavedModels,
TFLite custom operators and Paddle programs are checked statically and refused (exit 2) before anything in
them runs. TensorFlow and Paddle never enter this process (they cannot share one): their models are built
and checked in child processes, and the CLI runs in a child process so that a marker file it must not write
is a real test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import onnxbridge
from onnxbridge.errors import UnsafeInputError
from tests.conftest import ROOT, missing_modules
from tests.helpers.extras import require

torch = require("torch")

EXE = Path(sys.executable).with_name("onnxbridge")
CLI = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "onnxbridge.cli.main"]


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=ROOT)


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 with one error line that names what is refused and how to allow it."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error:"), err
    for needle in (*needles, "--trust"):
        assert needle in err, (needle, err)


def run_script(code: str, tmp: Path) -> dict:
    """Run ``code`` in a fresh interpreter (it prints one JSON object last) and return that object."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={"TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "2",
                                                     **os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def needs(*modules: str):
    missing = missing_modules(*modules)
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed")


# TorchScript and torch.export ---------------------------------------------------------------------------
class FromFile(torch.nn.Module):
    """forward maps a file (created if missing) into a tensor: what an attacker's archive does."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def forward(self, x):
        return x + torch.from_file(self.path, shared=True, size=4).sum()


class WithSetstate(torch.nn.Module):
    """Its scripted __setstate__, which torch.jit.load runs, maps a file."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.w = torch.ones(4)

    def forward(self, x):
        return x + self.w

    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.path, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, str, bool]):
        self.w = state[0] + torch.from_file(state[1], shared=True, size=4)
        self.path = state[1]
        self.training = state[2]


@torch.jit.script
def _halve(x: torch.Tensor) -> torch.Tensor:
    for _ in range(2):
        if bool(x.sum() > 0):
            x = x / 2
    return x


class Clean(torch.nn.Module):
    """Control flow, a submodule and a free function: everything the check walks, nothing it refuses."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(_halve(x)))


@pytest.mark.parametrize("model, needle", [(FromFile, "aten::from_file"), (WithSetstate, "__setstate__")])
@pytest.mark.slow
def test_torchscript_with_file_access_needs_trust(tmp_path, model, needle):
    marker, path, out = tmp_path / "marker", tmp_path / "evil.pt", tmp_path / "x.onnx"
    torch.jit.script(model(str(marker))).save(str(path))
    marker.unlink(missing_ok=True)
    assert_refused(run_cli("convert", path, "-o", out, "--input-shape", "x:1,4"), needle, "evil.pt")
    assert not marker.exists() and not out.exists()

    result = onnxbridge.convert(str(path), output=out, input_shapes=["x:1,4"], trust=True)
    assert marker.exists() and result.path == out


def test_clean_torchscript_converts_without_trust(tmp_path):
    path = tmp_path / "clean.pt"
    torch.jit.script(Clean()).save(str(path))
    result = onnxbridge.convert(str(path), output=tmp_path / "c.onnx", input_shapes=["x:2,4"])
    assert result.report["status"] == "passed", result.report["hops"]


def _from_file_fake(filename, shared=None, size=0, **_):
    return torch.empty(size)


def test_pt2_with_file_access_needs_trust(tmp_path):
    marker, path = tmp_path / "marker", tmp_path / "evil.pt2"
    with torch.library._scoped_library("aten", "FRAGMENT") as lib:  # lets torch.export trace from_file
        torch.library.register_fake("aten::from_file", _from_file_fake, lib=lib)
        program = torch.export.export(FromFile(str(marker)), (torch.ones(4),))
    torch.export.save(program, str(path))
    with pytest.raises(UnsafeInputError, match="aten::from_file"):
        onnxbridge.convert(str(path), output=tmp_path / "x.onnx")
    assert not marker.exists()


# TensorFlow: SavedModel and TFLite -----------------------------------------------------------------------
TF_MODELS = """
    import json, sys
    from pathlib import Path
    import tensorflow as tf
    import onnxbridge
    from onnxbridge.errors import UnsafeInputError

    root = Path(sys.argv[1])
    spec = [tf.TensorSpec([1, 4], tf.float32, name="x")]

    class Writes(tf.Module):
        def __init__(self, marker):
            self.marker = marker
        @tf.function(input_signature=spec)
        def __call__(self, x):
            tf.io.write_file(self.marker, tf.strings.as_string(tf.reduce_sum(x)))
            return x * 2.0

    class PyFunction(tf.Module):
        @tf.function(input_signature=spec)
        def __call__(self, x):
            return tf.reshape(tf.py_function(lambda t: t * 2.0, [x], tf.float32), [1, 4])

    class Clean(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([4, 3]))
        @tf.function(input_signature=spec)
        def __call__(self, x):
            return tf.cond(tf.reduce_sum(x) > 0, lambda: tf.matmul(x, self.w), lambda: tf.zeros([1, 3]))

    def save(module, name):
        tf.saved_model.save(module, str(root / name), signatures={"serving_default": module.__call__})

    save(Writes(str(root / "marker_cli")), "writes_cli")
    save(Writes(str(root / "marker_api")), "writes_api")
    save(PyFunction(), "py_function")
    save(Clean(), "clean")
    flex = Writes(str(root / "marker_tflite"))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([flex.__call__.get_concrete_function()], flex)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    (root / "flex.tflite").write_bytes(converter.convert())

    def outcome(name, **kw):
        try:
            return onnxbridge.convert(str(root / name), output=root / f"{name}.onnx", **kw).report["status"]
        except UnsafeInputError as exc:
            return f"refused: {exc}"

    results = {name: outcome(name) for name in ("py_function", "clean", "flex.tflite", "writes_api")}
    results["marker_api"] = (root / "marker_api").exists()
    results["trusted"] = outcome("writes_api", trust=True)
    results["trusted_marker"] = (root / "marker_api").exists()
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def tf_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tf_code")
    return root, run_script(TF_MODELS, root)


@needs("tensorflow", "tf2onnx")
@pytest.mark.slow
def test_saved_model_writing_a_file_needs_trust(tf_models):
    root, results = tf_models
    out = root / "w.onnx"
    assert_refused(run_cli("convert", root / "writes_cli", "-o", out), "WriteFile", "writes_cli")
    assert not (root / "marker_cli").exists() and not out.exists()
    assert results["writes_api"].startswith("refused") and not results["marker_api"]
    assert results["trusted"] == "passed" and results["trusted_marker"]


@needs("tensorflow", "tf2onnx")
@pytest.mark.parametrize("name, needle", [("py_function", "EagerPyFunc"), ("flex.tflite", "FlexWriteFile")])
@pytest.mark.slow
def test_tensorflow_code_refused(tf_models, name, needle):
    _, results = tf_models
    assert results[name].startswith("refused") and needle in results[name]


@needs("tensorflow", "tf2onnx")
@pytest.mark.slow
def test_clean_saved_model_converts_without_trust(tf_models):
    assert tf_models[1]["clean"] == "passed"


# Paddle -------------------------------------------------------------------------------------------------
PADDLE_MODELS = """
    import json, sys, shutil, warnings
    from pathlib import Path
    warnings.simplefilter("ignore")
    import paddle
    from paddle.base.proto import framework_pb2
    import onnxbridge
    from onnxbridge.errors import UnsafeInputError

    root = Path(sys.argv[1])
    paddle.enable_static()
    with paddle.pir_utils.OldIrGuard():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 4], "float32")
            y = paddle.nn.functional.relu(paddle.static.nn.fc(x, 3))
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle.static.save_inference_model(str(root / "mlp"), [x], [y], exe, program=main)
    paddle.disable_static()
    program = framework_pb2.ProgramDesc.FromString((root / "mlp.pdmodel").read_bytes())
    save = program.blocks[0].ops.add()  # a save op: Paddle's predictor would write the marker file
    save.type = "save"
    save.inputs.add(parameter="X", arguments=["x"])
    save.attrs.add(name="file_path", type=framework_pb2.STRING, s=str(root / "marker"))
    (root / "saves.pdmodel").write_bytes(program.SerializeToString())
    shutil.copy(root / "mlp.pdiparams", root / "saves.pdiparams")

    layer = paddle.nn.Linear(4, 3)
    paddle.jit.save(layer, str(root / "pir"), input_spec=[paddle.static.InputSpec([None, 4], "float32", "x")])
    text = (root / "pir.json").read_text()
    (root / "custom.json").write_text(text.replace('"1.matmul"', '"3.my_kernel"'))  # custom_op dialect
    shutil.copy(root / "pir.pdiparams", root / "custom.pdiparams")

    def outcome(name):
        try:
            return onnxbridge.convert(str(root / name), output=root / "x.onnx").report["status"]
        except UnsafeInputError as exc:
            return f"refused: {exc}"

    print(json.dumps({name: outcome(name) for name in ("saves.pdmodel", "custom.json")}
                     | {"marker": (root / "marker").exists()}))
"""


@needs("paddle", "paddle2onnx")
@pytest.mark.slow
def test_paddle_programs_with_denied_ops_need_trust(tmp_path):
    results = run_script(PADDLE_MODELS, tmp_path)
    assert results["saves.pdmodel"].startswith("refused") and "runs save (reads or writes files)" in \
        results["saves.pdmodel"]
    assert results["custom.json"].startswith("refused") and "custom_op.my_kernel" in results["custom.json"]
    assert not results["marker"]
