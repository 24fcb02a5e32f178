"""TensorRT backend: real engines from the example CNN (dynamic batch) and transformer block with TensorRT-RTX (which
builds without a GPU), profiles, fp16/int8 in the graph, parser errors naming the node, the missing-TensorRT exit 3,
--shapes errors, timing cache, check --targets tensorrt, inspect, and the hop skipped (never passed) without a GPU."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.conftest import EXAMPLES, assert_one_line_error, check_report
from tests.helpers.extras import require

trt = require("tensorrt_rtx")

from onnxbridge.backends.tensorrt import artifact, flavours, preflight  # noqa: E402
from onnxbridge.errors import ValidationSkipped  # noqa: E402

FACTORY = f"{EXAMPLES}:cnn"
RNG = np.random.default_rng(0)


def _gpu_here() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


NO_GPU = not _gpu_here()
EXIT_VALIDATED = 5 if NO_GPU else 0  # a convert that validates exits 5 without a GPU: its TensorRT hop is skipped


def conv_onnx(path: Path, *, extra=(), opset: int = 18, extra_opsets=()) -> Path:
    """Conv + Relu with a dynamic batch axis 'N' (plus ``extra`` nodes reading 'y', writing 'z')."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu0"), *extra]
    out = "z" if extra else "y"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets], ir_version=8)
    onnx.save(model, path)
    return path


def _backend(report: dict) -> dict:
    return report["artifact"]["backend"]


def _assert_engine(path: Path, minimum: int = 100_000) -> bytes:
    data = path.read_bytes()
    assert len(data) > minimum and data[:4] == b"vtrt", (len(data), data[:8])  # a real TensorRT-RTX plan
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # atomic writes left nothing behind
    return data


def _assert_tensorrt_hop(report: dict) -> None:
    hop = report["hops"][-1]
    assert hop["to"] == "tensorrt"
    if NO_GPU:
        assert hop["status"] == "skipped" and not hop["passed"] and hop["status"] != "passed"
        assert any(n.startswith("skipped: no CUDA device") for n in hop["notes"]), hop["notes"]
        assert report["status"] == "skipped"
    else:
        assert hop["status"] == "passed", hop


@pytest.fixture(scope="module")
def cnn_build(tmp_path_factory, models):
    out = tmp_path_factory.mktemp("trt") / "cnn.engine"
    model, sample = models.cnn()
    result = onnxbridge.convert(model, sample, to="tensorrt", output=out, dynamic=["x:0"],
                                report=out.with_suffix(".json"))
    return out, check_report(out.with_suffix(".json")), result


def test_cnn_with_dynamic_batch_builds_an_engine_with_a_profile(cnn_build):
    out, report, result = cnn_build
    _assert_engine(out)
    b = _backend(report)
    assert b["flavour"] == "tensorrt-rtx" and b["version"] == trt.__version__
    assert b["api"] == "tensorrt 11" and b["features"]["strongly_typed_only"]  # no BuilderFlag.FP16 in TRT-RTX
    assert b["precision"] == "fp32" and b["engine_bytes"] == out.stat().st_size
    assert report["artifact"]["bytes"] == out.stat().st_size + artifact.sidecar_path(out).stat().st_size
    assert b["profiles"]["x"]["min"] == [1, 3, 32, 32] and b["profiles"]["x"]["opt"] == [2, 3, 32, 32]
    assert b["profiles"]["x"]["max"][0] >= 3  # covers the validation sample grown by one
    assert b["inputs"][0]["shape"] == [-1, 3, 32, 32] and b["build_s"] > 0 and b["opset"] == 20
    assert report["artifact"]["format"] == "tensorrt"
    _assert_tensorrt_hop(report)
    assert result.passed is not NO_GPU  # a skipped hop (no GPU) is never a pass
    if NO_GPU:
        with pytest.raises(ValidationSkipped, match="onnx -> tensorrt skipped: no CUDA device"):
            result.raise_for_status()
        assert result.raise_for_status(allow_skipped=True) is result


@pytest.mark.slow
def test_transformer_block_builds_with_two_dynamic_axes(tmp_path, models):
    model, sample = models.transformer()
    out = tmp_path / "block.plan"
    res = onnxbridge.convert(model, sample, to="tensorrt", output=out, dynamic=["x:0:batch", "x:1:seq:4..16"],
                             report=tmp_path / "r.json")
    report = check_report(tmp_path / "r.json")
    _assert_engine(out, 500_000)
    prof = _backend(report)["profiles"]["x"]
    assert prof["min"] == [1, 4, 32] and prof["opt"] == [2, 10, 32] and prof["max"] == [3, 16, 32]
    assert _backend(report)["network_layers"] > 20
    _assert_tensorrt_hop(res.report)


def test_runner_says_no_cuda_device(cnn_build):
    from onnxbridge.plugins import BACKENDS
    from onnxbridge.errors import HopSkipped

    if not NO_GPU:
        pytest.skip("a GPU is here: the runner runs")
    with pytest.raises(HopSkipped, match="^no CUDA device"):
        BACKENDS.module("tensorrt").runner(cnn_build[0])


def test_inspect_reads_the_sidecar_and_says_so(cnn_build, cli, tmp_path):
    out = cnn_build[0]
    res = cli("inspect", out, "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["format"] == "tensorrt" and info["flavour"] == "tensorrt-rtx" and info["version"] == trt.__version__
    assert info["inputs"][0]["name"] == "x" and info["profiles"][0]["input"] == "x"
    assert info["precision"] == "fp32"
    if NO_GPU:
        assert not info["deserialized"] and "sidecar" in info["source"] and "no CUDA device" in info["source"]
    assert cli("inspect", out).exit_code == 0  # the terminal rendering too
    # a sidecar that no longer matches the engine is not trusted: only the header's magic is used
    stale = tmp_path / "stale.engine"
    stale.write_bytes(out.read_bytes()[:-1] + b"\0")
    artifact.sidecar_path(stale).write_text(artifact.sidecar_path(out).read_text())
    info = json.loads(cli("inspect", stale, "--json").stdout)
    assert info["flavour"] == "tensorrt-rtx" and "precision" not in info
    if NO_GPU:
        assert "stale" in info["source"]


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_precision_lives_in_the_graph(cli, tmp_path, precision):
    src = conv_onnx(tmp_path / "m.onnx")
    args = ["convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--precision", precision,
            "--shapes", "x:1x3x8x8/2x3x8x8/4x3x8x8", "--report", tmp_path / "r.json"]
    if precision == "int8":
        np.savez(tmp_path / "cal.npz", x=RNG.standard_normal((3, 2, 3, 8, 8)).astype(np.float32))
        args += ["--calibration", tmp_path / "cal.npz"]
    res = cli(*args)
    assert res.exit_code == EXIT_VALIDATED, res.output
    b = _backend(check_report(tmp_path / "r.json"))
    assert b["precision"] == precision
    if precision == "fp16":
        assert "to_fp16" in b["precision_in"]
    else:
        assert "Q/DQ" in b["precision_in"] and b["preflight"]["calibration"]["batches"] == 3
        assert b["preflight"]["calibration"]["QuantizeLinear"] >= 2
    _assert_engine(tmp_path / "m.engine", 10_000)


def test_engine_weights_shrink_with_precision(tmp_path):
    """The precision reaches the engine itself: fp16 weights take half the bytes of fp32, int8 fewer still."""
    from onnxbridge.plugins import BuildContext
    from onnxbridge.backends.tensorrt import build

    w = [numpy_helper.from_array((RNG.standard_normal((512, 512)) / 23).astype(np.float32), f"w{i}") for i in range(2)]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("MatMul", ["r", "w1"], ["y"])], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 512])], w)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    sizes = {}
    for precision in ("fp32", "fp16", "int8"):
        ctx = BuildContext(sample_shapes={"x": (4, 512)}, workdir=tmp_path, calibration={
            "x": RNG.standard_normal((2, 4, 512)).astype(np.float32)} if precision == "int8" else None)
        sizes[precision] = build(tmp_path / "m.onnx", tmp_path / f"{precision}.engine", precision=precision,
                                 context=ctx).facts["engine_bytes"]
    weights = 2 * 512 * 512 * 4
    assert sizes["fp32"] > weights and sizes["fp32"] - sizes["fp16"] > 0.4 * weights, sizes
    assert sizes["int8"] < sizes["fp16"] and sizes["int8"] < 0.5 * sizes["fp32"], sizes  # int8 kernels add code


def test_fp16_graph_keeps_io_and_layer_norm_in_fp32(tmp_path):
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]),
                           helper.make_node("LayerNormalization", ["h", "s", "b"], ["y"], name="ln", axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                          [numpy_helper.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "w"),
                           numpy_helper.from_array(np.ones(4, np.float32), "s"),
                           numpy_helper.from_array(np.zeros(4, np.float32), "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    path, facts, _ = preflight.prepare(tmp_path / "m.onnx", tmp_path, flavours.load("tensorrt-rtx"), "fp16", None)
    model = onnx.load(path)
    assert [i.type.tensor_type.elem_type for i in (*model.graph.input, *model.graph.output)] == [TensorProto.FLOAT] * 2
    assert {t.name: t.data_type for t in model.graph.initializer}["w"] == TensorProto.FLOAT16
    producers = {o: n for n in model.graph.node for o in n.output}
    ln = next(n for n in model.graph.node if n.op_type == "LayerNormalization")
    assert all(producers[i].op_type == "Cast" and producers[i].attribute[0].i == TensorProto.FLOAT for i in ln.input)
    import onnxruntime as ort

    x = RNG.standard_normal((2, 4)).astype(np.float32)
    ref = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=2e-2, rtol=2e-2)


def test_int8_needs_calibration_data(cli, tmp_path):
    src = conv_onnx(tmp_path / "m.onnx")
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--precision", "int8")
    assert_one_line_error(res, 2, "--calibration")
    np.savez(tmp_path / "bad.npz", y=np.zeros((1, 3, 8, 8), np.float32))
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--precision", "int8",
              "--calibration", tmp_path / "bad.npz")
    assert_one_line_error(res, 2, "no array for input(s) 'x'")
    assert not (tmp_path / "m.engine").exists()


def test_parser_rejection_names_the_node(cli, tmp_path):
    # onnxruntime runs Unique (so validation's reference works), TensorRT's parser has no importer for it
    src = conv_onnx(tmp_path / "m.onnx", extra=[helper.make_node("Unique", ["y"], ["z"], name="my_unique_node")])
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--no-validate")
    err = assert_one_line_error(res, 2, "node 'my_unique_node' (Unique)", "does not support the op", "rejects")
    assert "check MODEL --targets tensorrt" in err
    assert not (tmp_path / "m.engine").exists() and not artifact.sidecar_path(tmp_path / "m.engine").exists()


def test_custom_domain_op_is_named_with_its_domain(tmp_path):
    from onnxbridge.backends.tensorrt import engine
    from onnxbridge.errors import UnsupportedError

    src = conv_onnx(tmp_path / "m.onnx", extra=[helper.make_node("FancyOp", ["y"], ["z"], name="my_fancy_node",
                                                                 domain="acme.ops")],
                    extra_opsets=[helper.make_opsetid("acme.ops", 1)])
    with pytest.raises(UnsupportedError, match=r"node 'my_fancy_node' \(acme.ops::FancyOp\): no TensorRT importer"):
        engine.parse(flavours.load(), src)


def test_missing_tensorrt_exits_3_with_the_install_hint(cli, tmp_path, monkeypatch, native_in_process):
    import sys

    src = conv_onnx(tmp_path / "m.onnx")
    monkeypatch.setattr(flavours, "_CACHE", {})
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # 'import tensorrt' raises ImportError, as when not installed
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine")
    assert_one_line_error(res, 3, "TensorRT is not available", "pip install 'onnxbridge[tensorrt]'")
    monkeypatch.delitem(sys.modules, "tensorrt_rtx")
    monkeypatch.setenv(flavours.HIDE_ENV, "tensorrt-rtx")
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--flavour", "tensorrt-rtx")
    assert_one_line_error(res, 3, "hidden by", "tensorrt-rtx-cu12")


def test_flavour_tensorrt_without_nvidia_tensorrt_exits_3(cli, tmp_path):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("NVIDIA's tensorrt is installed here")
    src = conv_onnx(tmp_path / "m.onnx")
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--flavour", "tensorrt")
    assert_one_line_error(res, 3, "tensorrt: ModuleNotFoundError", "pypi.nvidia.com")


@pytest.mark.parametrize("shapes, needle", [
    ("x:1x3x8x8/2x3x8x8", "is not NAME:MIN/OPT/MAX"),
    ("x:4x3x8x8/2x3x8x8/8x3x8x8", "1 <= min <= opt <= max"),
    ("x:1x3x8/2x3x8x8/8x3x8x8", "same rank"),
    ("nope:1x3x8x8/2x3x8x8/8x3x8x8", "unknown input(s) 'nope'"),
    ("x:1x3x9x8/2x3x9x8/8x3x9x8", "axis 2 is fixed to 8"),
    ("x:1x3x8x8x1/2x3x8x8x1/8x3x8x8x1", "rank 5, but the input has rank 4"),
])
def test_shapes_errors_are_one_line(cli, tmp_path, shapes, needle):
    src = conv_onnx(tmp_path / "m.onnx")
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--shapes", shapes, "--no-validate")
    assert_one_line_error(res, 2, needle)


def test_shapes_workspace_and_timing_cache(cli, tmp_path):
    src = conv_onnx(tmp_path / "m.onnx")
    cache = tmp_path / "timing.cache"
    args = ["convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--shapes", "x:1x3x8x8/4x3x8x8/16x3x8x8",
            "--workspace", "64", "--timing-cache", cache, "--report", tmp_path / "r.json"]
    assert cli(*args).exit_code == EXIT_VALIDATED
    b = _backend(check_report(tmp_path / "r.json"))
    assert b["profiles"]["x"] == {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [16, 3, 8, 8], "origin": "--shapes"}
    assert b["workspace_mb"] == 64
    assert b["timing_cache"]["saved"] and not b["timing_cache"]["loaded"] and cache.stat().st_size > 0
    assert cli(*args).exit_code == EXIT_VALIDATED  # second build: the saved cache is read back
    report = check_report(tmp_path / "r.json")
    assert _backend(report)["timing_cache"]["loaded"] and _backend(report)["timing_cache"]["bytes_in"] > 0
    if not _backend(report)["timing_cache"]["effective"]:  # TensorRT-RTX: cache calls are no-ops, and we say so
        assert any("no-op" in w for w in report["warnings"])


def test_check_targets_tensorrt(cli, tmp_path):
    ok = conv_onnx(tmp_path / "ok.onnx")
    res = cli("check", ok, "--targets", "tensorrt")
    assert res.exit_code == 0 and "tensorrt: can convert" in res.stdout, res.output
    bad = conv_onnx(tmp_path / "bad.onnx", extra=[
        helper.make_node("Unique", ["y"], ["u"], name="uniq0"),
        helper.make_node("FancyOp", ["y"], ["z"], name="fancy0", domain="acme.ops")],
        extra_opsets=[helper.make_opsetid("acme.ops", 1)])
    res = cli("check", bad, "--targets", "tensorrt", "--report", tmp_path / "r.json")
    assert res.exit_code == 2
    report = check_report(tmp_path / "r.json")
    blockers = report["targets"]["tensorrt"]["blockers"]
    assert any("Unique" in b and "'uniq0'" in b for b in blockers), blockers
    assert any("acme.ops::FancyOp" in b and "'fancy0'" in b for b in blockers), blockers


def test_preflight_adapts_to_the_opset_ceiling(cli, tmp_path, monkeypatch, native_in_process):
    monkeypatch.setitem(flavours.OPSET_CEILING, "11", 16)
    src = conv_onnx(tmp_path / "m.onnx", opset=18)
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--report", tmp_path / "r.json")
    assert res.exit_code == EXIT_VALIDATED, res.output
    b = _backend(check_report(tmp_path / "r.json"))
    assert b["preflight"]["opset_in"] == 18 and b["opset"] == 16


def test_int64_weights_cast_only_where_the_schema_allows():
    idx = numpy_helper.from_array(np.array([0, 2], np.int64), "idx")
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    huge = numpy_helper.from_array(np.array([2**40], np.int64), "huge")
    g = helper.make_graph([helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
                           helper.make_node("Reshape", ["g", "shape"], ["r"]),
                           helper.make_node("Gather", ["r", "huge"], ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])], [idx, shape, huge])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cast, out_of_range = preflight.cast_int64_weights(model)
    assert cast == ["idx"] and out_of_range == ["huge"]  # Reshape's shape must stay int64
    types = {t.name: t.data_type for t in model.graph.initializer}
    assert types == {"idx": TensorProto.INT32, "shape": TensorProto.INT64, "huge": TensorProto.INT64}
    onnx.checker.check_model(model, full_check=True)


def test_progress_shows_the_builder_phases(tmp_path, capsys):
    src = conv_onnx(tmp_path / "m.onnx")
    onnxbridge.convert(src, to="tensorrt", output=tmp_path / "m.engine", validate=False, progress=True)
    err = capsys.readouterr().err
    assert "TensorRT: Building engine" in err and "Building the tensorrt model" in err, err


def test_feature_detection_tells_tensorrt_10_from_11():
    """TensorRT 10 keeps the weak-typing flags (fp16 via BuilderFlag.FP16, weakly typed network); 11 and RTX do not."""
    from types import SimpleNamespace

    from onnxbridge.backends.tensorrt import engine

    def fake(builder_flags: dict):
        return SimpleNamespace(
            BuilderFlag=type("BuilderFlag", (), builder_flags),
            NetworkDefinitionCreationFlag=SimpleNamespace(STRONGLY_TYPED=1), DataType=SimpleNamespace(INT64=1),
            IBuilderConfig=type("IBuilderConfig", (), {"set_memory_pool_limit": None}), Builder=object,
            IExecutionContext=object, ICudaEngine=object)

    weak = {"FP16": 1, "INT8": 2}
    ten = flavours.Flavour("tensorrt", fake(weak), "10.x", flavours.detect(fake(weak)))
    eleven = flavours.Flavour("tensorrt", fake({}), "11.x", flavours.detect(fake({})))
    assert (ten.api, eleven.api) == ("10", "11") and (ten.opset_ceiling, eleven.opset_ceiling) == (22, 25)
    assert engine.network_flags(ten, "fp16") == 0  # the FP16 builder flag needs a weakly typed network
    assert engine.network_flags(ten, "fp32") == engine.network_flags(eleven, "fp16") == 1 << 1
    real = flavours.load("tensorrt-rtx")
    assert real.api == "11" and real.features["native_int64"] and not real.features["int8_calibrator"]


def test_target_option_is_refused(cli, tmp_path):
    src = conv_onnx(tmp_path / "m.onnx")
    res = cli("convert", src, "--to", "tensorrt", "-o", tmp_path / "m.engine", "--target", "sm90")
    assert_one_line_error(res, 2, "--target does not apply to --to tensorrt")
