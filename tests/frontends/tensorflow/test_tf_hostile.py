"""Hostile TensorFlow files (issue 30): a TF1 SavedModel whose loading or signature runs its saver's SaveV2 to a
path of its choosing, a .tflite whose indices point outside the file, a TFLite WHILE that never ends. The CLI runs
in a child process, so that a file it must not write, or a crash, is real."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import onnxbridge
from onnxbridge.errors import BadInputError, UnsafeInputError
from tests.conftest import ROOT
from tests.frontends.tensorflow.conftest import tf

v1 = tf.compat.v1
CLI = [sys.executable, "-m", "onnxbridge.cli.main"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=ROOT, env=ENV)


def run_script(code: str, *args) -> dict:
    """Run ``code`` in a fresh interpreter (it prints one JSON object last) and return that object."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=ENV)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_one_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error:"), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


# TF1 SavedModel: the saver's own SaveV2, run by loading ----------------------------------------------------------
def tf1_saved_model(folder: Path, checkpoint: Path | None = None, run_from: str = "") -> Path:
    """y = x @ w, w a variable restored by the saver. With ``checkpoint`` the saver's filename defaults to that path
    and its save runs from ``run_from``: main_op or legacy_init_op (loading runs it), table_initializer (TF's
    default init runs it), signature (an output depends on it), restore (the restore op saves too)."""
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as sess:
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        w = v1.get_variable("w", initializer=np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
        y = tf.identity(tf.matmul(x, w), name="y")
        saver = v1.train.Saver(sharded=True, filename=str(checkpoint), allow_empty=True) if checkpoint else None
        save = graph.get_tensor_by_name(saver.saver_def.save_tensor_name) if checkpoint else None
        outputs, ops = {"y": y}, {}
        if run_from in ("main_op", "legacy_init_op"):
            ops[run_from] = tf.group(save)
        elif run_from == "table_initializer":
            graph.add_to_collection("table_initializer", tf.group(save))
        elif run_from == "signature":
            outputs["saved"] = save
        elif run_from == "restore":
            restore = tf.group(graph.get_operation_by_name(saver.saver_def.restore_op_name), save)
            saver.saver_def.restore_op_name = restore.name
        sess.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(folder))
        signature = v1.saved_model.predict_signature_def({"x": x}, outputs)
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": signature},
                                             saver=saver, **ops)
        builder.save()
    return folder


def written(folder: Path, prefix: str = "ckpt") -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(prefix))


@pytest.mark.slow
def test_tf1_main_op_saving_to_a_path_of_its_choosing_needs_trust(tmp_path):
    """The saver's SaveV2 run by main_op with the filename's default (an absolute path) is refused by the CLI, and
    nothing appears there; with --trust it runs, and writes the checkpoint there (what the refusal prevents)."""
    evil = tf1_saved_model(tmp_path / "evil", tmp_path / "ckpt", "main_op")
    out = tmp_path / "e.onnx"
    assert_one_line(run_cli("convert", evil, "-o", out), 2, "'save/SaveV2'", "variables folder", "--trust")
    assert written(tmp_path) == [] and not out.exists()
    rep = onnxbridge.convert(evil, output=out, trust=True).report
    assert rep["status"] == "passed" and "ckpt.index" in written(tmp_path)


@pytest.mark.parametrize("run_from", ["legacy_init_op", "table_initializer", "signature", "restore"])
def test_tf1_saver_run_outside_restoring_its_variables_needs_trust(tmp_path, run_from):
    evil = tf1_saved_model(tmp_path / "evil", tmp_path / "ckpt", run_from)
    variables = sorted((evil / "variables").iterdir())
    with pytest.raises(UnsafeInputError, match="runs SaveV2 .* in node 'save/SaveV2'"):
        onnxbridge.convert(evil, output=tmp_path / "e.onnx")
    assert written(tmp_path) == [] and sorted((evil / "variables").iterdir()) == variables


@pytest.mark.parametrize("own_saver", [False, True])
def test_tf1_saved_model_with_variables_converts_without_trust(tmp_path, own_saver):
    """The saver restores the variables from the model's own folder: no --trust needed (also a saver whose
    filename defaults to an absolute path, where nothing but the restore runs it)."""
    plain = tf1_saved_model(tmp_path / "plain", tmp_path / "ckpt" if own_saver else None)
    rep = onnxbridge.convert(plain, output=tmp_path / "p.onnx").report
    assert rep["status"] == "passed", rep
    assert written(tmp_path) == []


# TFLite: indices the interpreter follows unchecked -----------------------------------------------------------------
class Doubler(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * 2.0}


class Endless(tf.Module):
    """A WHILE whose condition always holds (sum |a| >= 0): the interpreter never returns."""

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.while_loop(lambda a: tf.reduce_sum(tf.abs(a)) >= 0.0, lambda a: a * 0.5, [x])[0]}


def _tflite(module: tf.Module) -> bytes:
    return tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module).convert()


def _patched(data: bytes, change) -> bytes:
    """``data`` with ``change`` applied to its flatbuffer's object form."""
    import flatbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    change(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _set(target, field: str, value: int):
    return lambda model: setattr(target(model), field, value)


CRAFTED = {  # name -> (change, what the error says)
    "subgraph77": (_set(lambda m: m.signatureDefs[0], "subgraphIndex", 77),
                   "signature 'serving_default' runs subgraph 77; it has 1 subgraphs"),
    "tensor99": (_set(lambda m: m.signatureDefs[0].inputs[0], "tensorIndex", 99),
                 "signature 'serving_default' names tensor 99"),
    "opcode9": (_set(lambda m: m.subgraphs[0].operators[0], "opcodeIndex", 9), "uses operator code 9"),
}


@pytest.fixture(scope="module")
def tflite_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("tflite_hostile")
    good = _tflite(Doubler())
    (root / "good.tflite").write_bytes(good)
    for name, (change, _) in CRAFTED.items():
        (root / f"{name}.tflite").write_bytes(_patched(good, change))
    (root / "endless.tflite").write_bytes(_tflite(Endless()))
    return root


@pytest.mark.slow
def test_tflite_signature_naming_a_missing_subgraph_is_refused_by_the_cli(tflite_files, tmp_path):
    """The interpreter ends the process (SIGSEGV) on it: the CLI refuses it first, exit 2."""
    out = tmp_path / "x.onnx"
    assert_one_line(run_cli("convert", tflite_files / "subgraph77.tflite", "-o", out), 2, "is damaged",
                    CRAFTED["subgraph77"][1])
    assert not out.exists()


@pytest.mark.parametrize("name", ["tensor99", "opcode9"])
def test_tflite_index_out_of_range_is_refused_before_the_interpreter(tflite_files, tmp_path, name):
    with pytest.raises(BadInputError, match=f"is damaged: .*{CRAFTED[name][1]}"):
        onnxbridge.convert(tflite_files / f"{name}.tflite", output=tmp_path / "x.onnx")


@pytest.mark.slow
def test_no_tflite_interpreter_in_this_process(tflite_files, tmp_path, monkeypatch):
    """The interpreter (reading the signature, the reference runs, tf2onnx's own) runs in the worker only."""
    from tensorflow.lite.python import interpreter

    def refuse(*args, **kwargs):
        raise AssertionError("a TFLite interpreter in the CLI's process")

    monkeypatch.setattr(interpreter.Interpreter, "__init__", refuse)
    rep = onnxbridge.convert(tflite_files / "good.tflite", output=tmp_path / "g.onnx").report
    assert rep["status"] == "passed", rep


NATIVE_FAULTS = """
    import json, sys
    from pathlib import Path
    import onnxbridge
    from onnxbridge import deadline
    from onnxbridge.errors import OnnxBridgeError
    from onnxbridge.frontends.tensorflow import load
    from onnxbridge.frontends.tensorflow.tflite_graphs import TFLiteGraphs

    root = Path(sys.argv[1])

    def outcome(call):
        try:
            call()
            return "returned"
        except OnnxBridgeError as exc:
            return f"{type(exc).__name__}: {exc}"

    def run_endless():
        model = load(root / "endless.tflite")
        with deadline.budget(5):
            model.run(model.sample.feeds)

    results = {"endless": outcome(run_endless)}
    TFLiteGraphs.check_indices = lambda self: None  # what the interpreter does with subgraph 77 unchecked
    results["crash"] = outcome(lambda: onnxbridge.convert(root / "subgraph77.tflite", output=root / "x.onnx"))
    print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def native_faults(tflite_files):
    return run_script(NATIVE_FAULTS, tflite_files)


@pytest.mark.slow
def test_a_tflite_interpreter_crash_is_an_error_naming_the_step(native_faults):
    assert native_faults["crash"].startswith("NativeCrash: reading the inputs of subgraph77.tflite: TFLite crashed "
                                             "(SIGSEGV)"), native_faults["crash"]


@pytest.mark.slow
def test_a_tflite_while_that_never_ends_runs_out_of_time(native_faults):
    result = native_faults["endless"]
    assert result.startswith("TimedOut: the run's time budget of 5 s ran out while running the TFLite interpreter "
                             "on endless.tflite"), result
