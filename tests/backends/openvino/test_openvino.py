"""OpenVINO backend: the example CNN and transformer block to IR (.xml + .bin) in fp32 and fp16, the CNN in int8
(NNCF), run on OpenVINO's CPU plugin with the f32 precision hint; dynamic axes kept and validated at two sizes;
inspect and check --targets through the CLI; ops OpenVINO rejects named by node (exit 2); nothing left behind by a
failed build; a Keras and a Paddle model through to OpenVINO; what a default compile (no config) computes, as the
hop records it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.conftest import assert_one_line_error, check_report
from tests.helpers.extras import require

ov = require("openvino")

from onnxbridge.backends.openvino import ir  # noqa: E402

RNG = np.random.default_rng(0)


def conv_onnx(path: Path, *, extra=(), extra_opsets=()) -> Path:
    """Conv + Relu with a dynamic batch axis 'N' (plus ``extra`` nodes reading 'y', writing 'z')."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu0"), *extra]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("z" if extra else "y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), *extra_opsets], ir_version=8)
    onnx.save(model, path)
    return path


def det_onnx(path: Path) -> Path:
    """A batch of 3x3 matrices through Det: onnxruntime runs it, OpenVINO's ONNX frontend has no rule for it."""
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"], name="det0")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8), path)
    return path


def _backend(report: dict) -> dict:
    return report["artifact"]["backend"]


def _hop(report: dict) -> dict:
    hop = report["hops"][-1]
    assert hop["from"] == "onnx" and hop["to"] == "openvino"
    return hop


def _assert_passed_on_openvino(report: dict) -> None:
    hop = _hop(report)
    assert hop["status"] == "passed" and hop["passed"], hop
    what = hop["runtimes"]["openvino"]
    assert what.startswith(f"OpenVINO CPU plugin {ov.__version__.split('-')[0]} on ") and "hint f32" in what, what
    assert report["status"] == "passed"


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if "onnxbridge" in p.name]


@pytest.fixture(scope="module")
def cnn_ir(tmp_path_factory, models):
    out = tmp_path_factory.mktemp("ov") / "cnn.xml"
    model, sample = models.cnn()
    onnxbridge.convert(model, sample, to="openvino", output=out, dynamic=["x:0"], report=out.with_suffix(".json"))
    return out, check_report(out.with_suffix(".json"))


def test_cnn_fp32_keeps_the_dynamic_batch_and_passes_at_two_sizes(cnn_ir):
    out, report = cnn_ir
    assert out.is_file() and ir.weights_of(out).is_file() and not _leftovers(out.parent)
    b = _backend(report)
    assert b["openvino"] == ov.__version__ and b["precision"] == "fp32" and not b["compress_to_fp16"]
    assert b["inputs"] == [{"name": "x", "shape": [None, 3, 32, 32], "partial_shape": "[?,3,32,32]",
                            "dtype": "float32"}]
    assert b["dynamic_inputs"] == {"x": "[?,3,32,32]"} and b["outputs"][0]["shape"][0] is None
    assert b["ops"]["Convolution"] == 2 and b["constants"] == {"f32": 5} and "Convert" not in b["ops"]
    assert b["bin_bytes"] == ir.weights_of(out).stat().st_size and b["xml_bytes"] == out.stat().st_size
    assert report["artifact"]["bytes"] == b["xml_bytes"] + b["bin_bytes"]  # the IR is both files
    assert report["artifact"]["precision"]["weights"] == "fp32"
    assert "INFERENCE_PRECISION_HINT to f32" in report["artifact"]["precision"]["compute"]
    _assert_passed_on_openvino(report)
    batches = {s["x"][0] for s in report["inputs"]["samples"]}
    assert len(batches) == 2 and _hop(report)["samples"] == 2, report["inputs"]  # the sample's batch, and one more


@pytest.mark.slow
def test_transformer_block_with_dynamic_batch_and_sequence(tmp_path, models):
    model, sample = models.transformer()
    res = onnxbridge.convert(model, sample, to="openvino", output=tmp_path / "block.xml",
                             dynamic=["x:0:batch", "x:1:seq"], report=tmp_path / "r.json")
    report = check_report(tmp_path / "r.json")
    assert _backend(report)["inputs"][0]["shape"] == [None, None, 32]
    assert _backend(report)["ops"]["MatMul"] >= 4
    _assert_passed_on_openvino(report)
    assert res.passed


@pytest.mark.parametrize("name", ["cnn", "transformer"])
@pytest.mark.slow
def test_fp16_compresses_the_weights_and_passes(tmp_path, models, name):
    model, sample = getattr(models, name)()
    sizes = {}
    for precision in ("fp32", "fp16"):
        out = tmp_path / f"{precision}.xml"
        onnxbridge.convert(model, sample, to="openvino", output=out, precision=precision, dynamic=["x:0"],
                           report=tmp_path / f"{precision}.json")
        report = check_report(tmp_path / f"{precision}.json")
        _assert_passed_on_openvino(report)
        sizes[precision] = ir.weights_of(out).stat().st_size
    b = _backend(report)
    assert b["compress_to_fp16"] and b["constants"]["f16"] > 0 and b["ops"]["Convert"] >= b["constants"]["f16"]
    assert report["artifact"]["precision"]["weights"].startswith("fp16 (compress_to_fp16")
    assert any(n.startswith("compress_to_fp16 applied") for n in report["notes"]), report["notes"]
    assert _hop(report)["tolerance"]["precision"] == "fp16"
    assert "fp16 weight tensors" in _hop(report)["runtimes"]["openvino"]
    assert sizes["fp16"] < 0.6 * sizes["fp32"], sizes
    assert _hop(report)["tolerance"]["rule"] == "fp16-emulation"
    # validated on its own against its ONNX source, the fp16 IR is judged as fp16 (its weights are fp16) against
    # the fp16 emulation of that source, not at fp32's tolerance
    onnx_path = tmp_path / "m.onnx"
    onnxbridge.convert(model, sample, output=onnx_path, dynamic=["x:0"])
    hop = onnxbridge.validate(onnx_path, tmp_path / "fp16.xml")["hops"][0]
    assert hop["status"] == "passed" and hop["tolerance"]["rule"] == "fp16-emulation", hop


def test_int8_quantizes_with_nncf_on_the_calibration_batches(tmp_path, models, cli):
    model, sample = models.cnn()
    cal = models.calibration_npz(tmp_path / "cal.npz", sample[0])
    out = tmp_path / "q.xml"
    onnxbridge.convert(model, sample, to="openvino", output=out, precision="int8", calibration=cal, dynamic=["x:0"],
                       report=tmp_path / "r.json")
    report = check_report(tmp_path / "r.json")
    b = _backend(report)
    assert b["ops"]["FakeQuantize"] >= 2 and b["constants"]["i8"] == 2  # both convolutions' weights
    assert b["quantization"]["tool"].startswith("nncf ") and b["quantization"]["batches"] == 8
    assert report["artifact"]["precision"]["weights"] == "int8 (2 i8 weight constants, NNCF)"
    _assert_passed_on_openvino(report)
    assert _hop(report)["tolerance"]["precision"] == "int8" and "FakeQuantize" in _hop(report)["runtimes"]["openvino"]
    assert json.loads(cli("inspect", out, "--json").stdout)["precision"] == "int8"


@pytest.mark.slow
def test_int8_needs_calibration_and_calibration_needs_int8(cli, tmp_path, models):
    src = conv_onnx(tmp_path / "m.onnx")
    res = cli("convert", src, "--to", "openvino", "-o", tmp_path / "m.xml", "--precision", "int8")
    assert_one_line_error(res, 2, "--precision int8 for OpenVINO needs --calibration")
    cal = models.calibration_npz(tmp_path / "cal.npz", np.zeros((1, 3, 8, 8), np.float32))
    res = cli("convert", src, "--to", "openvino", "-o", tmp_path / "m.xml", "--calibration", cal)
    assert_one_line_error(res, 2, "--calibration applies to --precision int8 only")
    assert not (tmp_path / "m.xml").exists() and not (tmp_path / "m.bin").exists()


def test_runner_sets_the_f32_hint_and_feeds_by_name(cnn_ir, models):
    from onnxbridge.backends.openvino.run import Runner

    runner = Runner(cnn_ir[0])
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
    _, sample = models.cnn()
    x = sample[0].numpy()
    (first,) = runner({"x": x})
    (again,) = runner({"x": np.concatenate([x, x])})  # another batch size, and outputs not overwritten
    assert first.shape[0] == x.shape[0] and again.shape[0] == 2 * x.shape[0]
    np.testing.assert_allclose(again[: x.shape[0]], first, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="missing input"):
        runner({"y": x})


def test_runner_without_a_cpu_plugin_skips_and_a_compile_failure_is_named(cnn_ir, monkeypatch):
    from onnxbridge.backends.openvino.run import Runner
    from onnxbridge.errors import HopSkipped, UnsupportedError

    def refuses(self, model, device, config):
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:112:\nCheck 'x' failed at src/a.cpp:1:\n"
                           "Unsupported operation of type: Foo name: foo0")

    monkeypatch.setattr(ov.Core, "compile_model", refuses)
    with pytest.raises(UnsupportedError, match=r"CPU plugin cannot compile 'cnn.xml': Unsupported operation of "
                                               r"type: Foo name: foo0$"):
        Runner(cnn_ir[0])
    monkeypatch.setattr(ov.Core, "available_devices", property(lambda self: ["NPU"]))
    with pytest.raises(HopSkipped, match=r"has no CPU plugin on this host \(devices: NPU\)"):
        Runner(cnn_ir[0])


def test_inspect_through_the_cli(cnn_ir, cli):
    out = cnn_ir[0]
    res = cli("inspect", out, "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["format"] == "openvino" and info["written_by"] == ov.__version__ and info["precision"] == "fp32"
    assert info["built_by"] == f"onnxbridge {onnxbridge.__version__}"
    assert info["inputs"][0]["shape"] == [None, 3, 32, 32] and info["outputs"][0]["dtype"] == "float32"
    assert info["ops"]["Convolution"] == 2 and info["bin_bytes"] == ir.weights_of(out).stat().st_size
    assert cli("inspect", out).exit_code == 0  # the terminal rendering too


@pytest.mark.slow
def test_validate_an_ir_against_its_source(cnn_ir, cli, tmp_path):
    """The saved IR is run again by the backend's runner, both batch sizes (the IR's '?' axis grown by one)."""
    out = cnn_ir[0]
    src = tmp_path / "cnn.onnx"
    res = cli("convert", "examples/models.py:cnn", "-o", src, "--dynamic", "x:0")
    assert res.exit_code == 0, res.output
    res = cli("validate", src, out, "--report", tmp_path / "v.json")
    assert res.exit_code == 0, res.output
    hop = check_report(tmp_path / "v.json")["hops"][0]
    assert hop["to"] == "openvino" and hop["status"] == "passed" and hop["samples"] == 2, hop


def test_broken_irs_are_refused_with_one_line(cnn_ir, cli, tmp_path):
    out = cnn_ir[0]
    lone = tmp_path / "lone.xml"
    lone.write_bytes(out.read_bytes())
    assert_one_line_error(cli("inspect", lone), 2, "no weights file 'lone.bin'")
    garbage = tmp_path / "garbage.xml"
    garbage.write_text("<net><layers>")
    ir.weights_of(garbage).write_bytes(b"")
    assert_one_line_error(cli("inspect", garbage), 2, "is not a readable OpenVINO IR")


def test_a_rejected_op_is_exit_2_naming_the_node_and_leaves_nothing(cli, tmp_path):
    src = det_onnx(tmp_path / "det.onnx")
    res = cli("convert", src, "--to", "openvino", "-o", tmp_path / "out" / "det.xml")
    assert_one_line_error(res, 2, "op Det (opset 18) has no conversion rule in OpenVINO", "node 'det0'")
    folder = tmp_path / "out"
    assert not folder.exists() or not list(folder.iterdir())


@pytest.mark.slow
def test_check_targets_openvino(cli, tmp_path):
    res = cli("check", conv_onnx(tmp_path / "ok.onnx"), "--targets", "openvino")
    assert res.exit_code == 0 and "openvino: can convert" in res.stdout, res.output
    bad = conv_onnx(tmp_path / "bad.onnx", extra=[
        helper.make_node("Det", ["y"], ["d"], name="det0"),
        helper.make_node("FancyOp", ["d"], ["z"], name="fancy0", domain="acme.ops")],
        extra_opsets=[helper.make_opsetid("acme.ops", 1)])
    res = cli("check", bad, "--targets", "openvino", "--report", tmp_path / "r.json")
    assert res.exit_code == 2, res.output
    blockers = check_report(tmp_path / "r.json")["targets"]["openvino"]["blockers"]
    assert any(b.startswith("op acme.ops::FancyOp has no conversion rule") and "node 'fancy0'" in b
               for b in blockers), blockers
    assert any(b.startswith("op Det (opset 18) has no conversion rule") and "node 'det0'" in b
               for b in blockers), blockers
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".xml", ".bin")]  # checking writes nothing


@pytest.mark.slow
def test_a_failed_conversion_detail_is_kept(tmp_path):
    """An op OpenVINO has a rule for but fails to convert is named with OpenVINO's reason, not its source line."""
    from onnxbridge.backends.openvino import check

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu0"),
                               helper.make_node("DFT", ["r"], ["y"], name="dft0")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9),
              tmp_path / "m.onnx")
    (blocker,) = check(tmp_path / "m.onnx")
    assert blocker.startswith("op DFT (opset 20) failed to convert (") and blocker.endswith("node 'dft0'"), blocker
    assert "Check '" not in blocker and ".cpp:" not in blocker


@pytest.mark.slow
def test_a_build_that_fails_while_saving_leaves_the_old_ir_whole(cnn_ir, tmp_path, monkeypatch):
    """Both files are staged beside the output and moved only once complete: a save that dies halfway leaves the
    previous .xml and .bin as they were, and no staging folder."""
    from onnxbridge.backends.openvino import build
    from onnxbridge.errors import BadInputError

    src = conv_onnx(tmp_path / "m.onnx")
    out = tmp_path / "m.xml"
    build(src, out)
    before = out.read_bytes(), ir.weights_of(out).read_bytes()
    real = ov.save_model

    def dies_after_writing(model, path, **kw):
        real(model, path, **kw)
        Path(path).with_suffix(".bin").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ov, "save_model", dies_after_writing)
    with pytest.raises(BadInputError, match="No space left on device"):
        build(src, out, precision="fp16")
    assert (out.read_bytes(), ir.weights_of(out).read_bytes()) == before
    assert not _leftovers(tmp_path)
    with pytest.raises(BadInputError, match="--target does not apply"):
        build(src, tmp_path / "t.xml", target="CPU")
    assert not (tmp_path / "t.xml").exists()


# each framework builds its model and converts it in a process of its own (tensorflow and paddle cannot share one),
# from a script file (paddle.jit reads the layer's source)
FRAMEWORK_SCRIPTS = {
    "tensorflow": """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras, onnxbridge
keras.utils.set_random_seed(0)
image = keras.Input((16, 16, 3), name="image")
x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(image)
x = keras.layers.BatchNormalization()(x)
x = keras.layers.GlobalAveragePooling2D()(x)
model = keras.Model(image, keras.layers.Dense(5, activation="softmax", name="probs")(x))
for precision in ("fp32", "fp16"):
    onnxbridge.convert(model, to="openvino", output=f"{sys.argv[1]}/{precision}.xml", precision=precision,
                       report=f"{sys.argv[1]}/{precision}.json")
""",
    "paddle": """
import os, sys
os.environ["GLOG_minloglevel"] = "2"
import paddle, onnxbridge
paddle.seed(0)
class Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = paddle.nn.Conv2D(3, 8, 3, padding=1), paddle.nn.BatchNorm2D(8)
        self.fc = paddle.nn.Linear(8, 5)
    def forward(self, image):
        y = paddle.nn.functional.relu(self.bn(self.conv(image)))
        return paddle.nn.functional.softmax(self.fc(y.mean(axis=[2, 3])))
for precision in ("fp32", "fp16"):
    onnxbridge.convert(Net(), [paddle.static.InputSpec([None, 3, 16, 16], "float32", "image")], to="openvino",
                       output=f"{sys.argv[1]}/{precision}.xml", precision=precision,
                       report=f"{sys.argv[1]}/{precision}.json")
""",
}


@pytest.mark.parametrize("framework, module", [("tensorflow", "keras"), ("paddle", "paddle")])
@pytest.mark.slow
def test_keras_and_paddle_models_to_openvino(tmp_path, framework, module):
    """A Keras CNN and a Paddle layer (dynamic batch) through ONNX to IRs (fp32 and fp16 weights) that pass on
    OpenVINO's CPU plugin."""
    import importlib.util
    import subprocess
    import sys

    from tests.conftest import ROOT

    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    script = tmp_path / f"{framework}_to_openvino.py"
    script.write_text(FRAMEWORK_SCRIPTS[framework])
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for precision in ("fp32", "fp16"):
        report = check_report(tmp_path / f"{precision}.json")
        assert report["source"]["framework"].startswith(framework) and report["hops"][0]["status"] == "passed"
        assert _backend(report)["inputs"][0]["shape"][0] is None  # both exporters keep the batch dynamic
        assert _hop(report)["tolerance"]["precision"] == precision
        _assert_passed_on_openvino(report)
    assert _backend(report)["compress_to_fp16"]


@pytest.mark.slow
def test_a_run_that_fails_after_the_build_leaves_neither_file(tmp_path, models, monkeypatch, native_in_process):
    """The .bin is the backend's companion file: removed with the .xml when the run ends in an error."""
    from onnxbridge.backends import openvino as backend
    from onnxbridge.errors import BadInputError

    def refuse(path, *, onnx_path=None):
        raise BadInputError("planted: the runner cannot open the IR")
    monkeypatch.setattr(backend, "runner", refuse)
    model, sample = models.cnn()
    with pytest.raises(BadInputError, match="planted"):
        onnxbridge.convert(model, sample, to="openvino", output=tmp_path / "m.xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# OpenVINO's default compile: the CPU plugin computes fp32 models in bf16 where the CPU has bf16 units, and an IR cannot
# change that (the hint is ignored in the IR's rt_info), so the hop runs a default compile too and records it

def mlp_onnx(path: Path, *, cancel: bool = False) -> Path:
    """x [4, 16] -> MatMul -> Relu -> MatMul -> y [4, 8]. ``cancel``: x [4, 16] -> MatMul by two weight columns that
    differ by 1e-3 relative (one bf16 value) -> their difference: fine in f32, lost in bf16."""
    rng = np.random.default_rng(3)
    if cancel:
        a = rng.uniform(1, 2, (16, 1)).astype(np.float32)
        inits = [numpy_helper.from_array(np.concatenate([a, a * np.float32(1 + 1e-3)], axis=1), "w")]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node("Split", ["h"], ["h0", "h1"], axis=1, num_outputs=2, name="split"),
                 helper.make_node("Sub", ["h1", "h0"], ["y"], name="sub")]
    else:
        inits = [numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.3).astype(np.float32), "w1"),
                 numpy_helper.from_array((rng.standard_normal((32, 8)) * 0.3).astype(np.float32), "w2")]
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
                 helper.make_node("Relu", ["h"], ["r"], name="relu"),
                 helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8), path)
    return path


def _plugin_default() -> str:
    return ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


@pytest.mark.slow
def test_a_default_compile_of_the_ir_and_what_the_hop_records_of_it(tmp_path):
    """A plain ``openvino.Core().compile_model(path, "CPU")`` of the IR onnxbridge wrote computes in the plugin's
    default precision. Where that is f32 it gives the validated numbers exactly; where it is not (bf16 here), the hop
    says so and records, per sample, how far the default compile's outputs are from the validated run."""
    src = mlp_onnx(tmp_path / "mlp.onnx")
    out = tmp_path / "mlp.xml"
    onnxbridge.convert(src, to="openvino", output=out, report=tmp_path / "r.json")
    report = check_report(tmp_path / "r.json")
    _assert_passed_on_openvino(report)
    hop, b = _hop(report), _backend(report)
    default = ov.Core().compile_model(str(out), "CPU")  # what a user who compiles with defaults gets
    precision = default.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert precision == _plugin_default()
    assert b["default_compile"] == {"device": "CPU", "inference_precision": precision,
                                    "validated_with": {"INFERENCE_PRECISION_HINT": "f32"}}
    assert ir.inspect(out)["validated_with"] == {"INFERENCE_PRECISION_HINT": "f32"}  # in the IR: how to compile it
    validated = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    gap = float(np.abs(default(x)[0] - validated(x)[0]).max())
    what = hop["runtimes"]["openvino"]
    if precision == "f32":
        assert gap == 0.0 and "a default compile on this CPU also computes in f32" in what, what
        assert not [n for n in hop["notes"] if "default compile" in n], hop["notes"]
        return
    assert gap > 0  # bf16 (or f16) really computes other numbers
    assert f"OpenVINO's default compile on this CPU computes in {precision}: also run on every sample" in what, what
    assert f"a default compile on this CPU (no config) computes in {precision}" in report["artifact"]["precision"][
        "compute"]
    assert any(n.startswith(f"OpenVINO's default compile on this CPU (core.compile_model(xml, \"CPU\"), no config) "
                            f"computes in {precision}, not the validated f32") and "INFERENCE_PRECISION_HINT" in n
               for n in hop["notes"]), hop["notes"]
    lines = [n for n in hop["notes"] if n.startswith(f"OpenVINO default compile ({precision}) at x [4, 16]: max abs ")]
    assert lines and all(n.endswith("vs the validated run on 'y'") for n in lines), hop["notes"]
    recorded = float(lines[0].split("max abs ")[1].split(",")[0])
    assert gap / 10 < recorded < gap * 10, (recorded, gap)  # the hop's samples, not x: the same order of size
    assert hop["status"] == "passed" and not hop["errors"]  # bf16 rounding is reported, not a failure


@pytest.mark.slow
def test_a_default_compile_that_loses_the_output_fails_the_hop_with_why(tmp_path):
    """Where the default compile is far off (bf16 cannot tell the two weight columns apart, so the difference the
    model computes is lost), the hop judges the numbers a default compile gives and fails, saying why; the
    validated f32 compile itself is right."""
    if _plugin_default() == "f32":
        pytest.skip("OpenVINO's default compile computes in f32 on this CPU")
    from onnxbridge.backends.openvino.run import Runner

    src = mlp_onnx(tmp_path / "cancel.onnx", cancel=True)
    out = tmp_path / "cancel.xml"
    res = onnxbridge.convert(src, to="openvino", output=out, report=tmp_path / "r.json")
    report = check_report(tmp_path / "r.json")
    hop = _hop(report)
    assert not res.passed and report["status"] == "failed" and hop["status"] == "failed", hop
    assert any("computes in bf16, not the validated f32" in e for e in hop["errors"]), hop["errors"]
    assert any("below the 20 dB SNR no reduced precision may give, so this hop judged the default compile's outputs"
               in e for e in hop["errors"]), hop["errors"]
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    import onnxruntime

    ref = onnxruntime.InferenceSession(str(src)).run(None, {"x": x})[0]
    np.testing.assert_allclose(Runner(out).fresh({"x": x})[0], ref, rtol=1e-3, atol=1e-5)  # the validated compile


def test_the_difference_a_default_compile_is_judged_by():
    from onnxbridge.backends.openvino.run import DEFAULT_MIN_SNR_DB, difference

    ref = np.linspace(-1, 1, 64, dtype=np.float32)
    same = difference("y", ref.copy(), ref)
    assert same["max_abs"] == 0 and same["snr_db"] is None and not same["broken"]
    rounded = difference("y", ref * np.float32(1 + 2**-8), ref)  # bf16-sized rounding: about 48 dB
    assert 40 < rounded["snr_db"] < 60 and not rounded["broken"]
    lost = difference("y", np.zeros_like(ref), ref)
    assert lost["snr_db"] == 0 and lost["broken"] and DEFAULT_MIN_SNR_DB == 20
    nan = ref.copy()
    nan[3] = np.nan
    assert difference("y", nan, ref)["nonfinite"] == 1 and difference("y", nan, ref)["broken"]
    assert difference("i", np.array([1, 2]), np.array([1, 3]))["broken"]
    assert not difference("i", np.array([1, 2]), np.array([1, 2]))["broken"]


@pytest.mark.slow
def test_openvino_ignores_a_precision_hint_written_in_the_ir(tmp_path):
    """Why the IR does not carry the hint: OpenVINO reads ``runtime_options`` from a model's rt_info for a few keys
    (KV cache precision, dynamic quantization group size), not INFERENCE_PRECISION_HINT. Should this start failing,
    OpenVINO honors it: write it in the IR (convert.build) and a default compile computes what was validated."""
    model = ov.convert_model(str(mlp_onnx(tmp_path / "mlp.onnx")))
    model.set_rt_info("f32", ["runtime_options", "INFERENCE_PRECISION_HINT"])
    model.set_rt_info("64", ["runtime_options", "DYNAMIC_QUANTIZATION_GROUP_SIZE"])
    ov.save_model(model, str(tmp_path / "hinted.xml"), compress_to_fp16=False)
    compiled = ov.Core().compile_model(str(tmp_path / "hinted.xml"), "CPU")
    assert compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE") == 64  # runtime_options are read...
    assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == _plugin_default()  # ...not this one
