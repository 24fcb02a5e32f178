"""Core ML int8: the package really stores int8 weights (coremltools' linear_quantize_weights, per output channel)
behind constexpr dequantize ops, computes in fp16, says so in the report, and the host evaluator runs those ops as
Core ML defines them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import onnxbridge
from tests.conftest import EXAMPLES, assert_one_line_error
from tests.helpers.extras import require, requires

require("coremltools")
WEIGHTS = Path("Data/com.apple.CoreML/weights/weight.bin")
DEQUANTIZE = {"iOS16": "constexpr_affine_dequantize", "iOS18": "constexpr_blockwise_shift_scale"}


def mlp():
    """Weight-heavy: two 256x512 Linear weights (int8 shrinks them 4x against fp32), two small biases."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).eval(), (torch.randn(4, 256),)


def _applied(report: dict) -> dict:
    """What the build applied: the backend's ``applied_precision`` (the spine may lift it to ``artifact.precision``)."""
    artifact = report["artifact"]
    return artifact["backend"].get("applied_precision") or artifact["precision"]


@pytest.fixture(scope="module")
def built(models, tmp_path_factory):
    """(model name, precision, target) -> (package path, report, host-evaluator outputs on the sample)."""
    from onnxbridge.backends.coreml.runners import Runner

    factories = {"cnn": models.cnn, "mlp": mlp}
    root, cache = tmp_path_factory.mktemp("int8"), {}

    def get(name: str, precision: str, target: str = "iOS16"):
        key = (name, precision, target)
        if key not in cache:
            model, sample = factories[name]()
            out = root / f"{name}_{precision}_{target}.mlpackage"
            report = onnxbridge.convert(model, sample, to="coreml", output=out, precision=precision, opset=17,
                                        target=target).report
            runner = Runner(out)
            outputs = runner(dict(zip(runner.inputs, [s.numpy() for s in sample])))
            cache[key] = out, report, outputs
        return cache[key]
    return get


@pytest.mark.parametrize("name", ["cnn", "mlp"])
@pytest.mark.slow
def test_int8_package_holds_int8_weights(built, name):
    fp32, rep32, out32 = built(name, "fp32")
    fp16, _, out16 = built(name, "fp16")
    int8, rep8, out8 = built(name, "int8")
    blobs = {p: (p / WEIGHTS).read_bytes() for p in (fp32, fp16, int8)}
    assert blobs[int8] != blobs[fp32] and blobs[int8] != blobs[fp16]
    assert len(blobs[int8]) < len(blobs[fp16]) < len(blobs[fp32])
    if name == "mlp":  # int8 data + per-channel scales: about a quarter of fp32
        assert len(blobs[int8]) < 0.35 * len(blobs[fp32]), (len(blobs[int8]), len(blobs[fp32]))

    from onnxbridge.backends.coreml.runners import Runner

    ops = [op.op_type for op in Runner(int8).function.operations]  # the saved program, as the host runs it
    assert DEQUANTIZE["iOS16"] in ops and "constexpr_affine_dequantize" not in \
        [op.op_type for op in Runner(fp32).function.operations]
    assert rep8["artifact"]["backend"]["compute_precision"] == "fp16"
    applied = _applied(rep8)
    assert applied["weights"] == "int8" and applied["compute"] == "fp16"
    assert applied["quantized_weights"] == ops.count(DEQUANTIZE["iOS16"]) >= 1
    assert applied["float_weights"] >= 1  # biases (1-D) and weights too small to be worth it stay float
    assert {k: _applied(rep32)[k] for k in ("weights", "compute", "quantized_weights", "float_weights")} == {
        "weights": "fp32", "compute": "fp32", "quantized_weights": 0,
        "float_weights": applied["quantized_weights"] + applied["float_weights"]}

    hop = rep8["hops"][-1]
    assert (hop["from"], hop["to"], hop["status"]) == ("onnx", "coreml", "passed")
    assert hop["tolerance"]["precision"] == "int8"
    # the int8 weights are what ran: the int8 package's outputs differ from both float packages', the fp16 one's
    # too (same fp16 compute, only the weights differ), by a quantization error within the int8 tolerance
    err32, err16 = (max(float(np.abs(a - b).max()) for a, b in zip(out8, ref)) for ref in (out32, out16))
    assert 0 < err32 < 5e-2 and 0 < err16 < 5e-2, (err32, err16)


@pytest.mark.slow
def test_ios18_stores_int8_as_blockwise_shift_scale(built):
    path, rep, out = built("mlp", "int8", "iOS18")
    _, _, out32 = built("mlp", "fp32")
    from onnxbridge.backends.coreml.runners import Runner

    ops = [op.op_type for op in Runner(path).function.operations]
    assert ops.count(DEQUANTIZE["iOS18"]) == 2 and DEQUANTIZE["iOS16"] not in ops
    assert _applied(rep)["weights"] == "int8" and rep["status"] == "passed"
    assert 0 < float(np.abs(out[0] - out32[0]).max()) < 5e-2


@requires("torch")
def test_int8_needs_ios16(cli, tmp_path):
    out = tmp_path / "cnn.mlpackage"
    res = cli("convert", f"{EXAMPLES}:cnn", "--to", "coreml", "-o", out, "--opset", "17", "--precision", "int8",
              "--target", "iOS15")
    assert_one_line_error(res, 2, "--precision int8", "--target iOS16", "iOS15")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_declared_precisions_are_the_applied_ones():
    import onnxbridge.backends.coreml as coreml
    from onnxbridge.backends.coreml.precision import APPLIED, check_precision
    from onnxbridge.errors import BadInputError

    assert coreml.PRECISIONS == ("fp32", "fp16", "int8") and set(APPLIED) == set(coreml.PRECISIONS)
    with pytest.raises(BadInputError, match="int4"):
        check_precision("int4", "iOS16")
    for target in ("iOS16", "iOS17", "iOS18"):
        check_precision("int8", target)


def _materialized(build_op, target):
    """The value coremltools itself infers for the constexpr op ``build_op(mb)`` makes (its
    ``materialized_val_inference``), and our kernel's result for the same op and inputs."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    from onnxbridge.backends.coreml.evaluate import KERNELS

    made = {}

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,))], opset_version=getattr(ct.target, target))
    def prog(x):
        made["var"] = build_op(mb)
        return mb.identity(x=x)

    op = made["var"].op
    inputs = {k: np.asarray(v.val) for k, v in op.inputs.items()}
    return np.asarray(op.materialized_val_inference()), KERNELS[op.op_type](**inputs)


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("scale_dtype", [np.float16, np.float32])
def test_affine_dequantize_matches_coremltools(axis, dtype, scale_dtype):
    info = np.iinfo(dtype)
    data = RNG.integers(info.min, info.max + 1, (6, 5, 4)).astype(dtype)
    channels = data.shape[axis]
    zero_point = RNG.integers(info.min, info.max + 1, channels).astype(dtype)  # per channel, non-zero
    scale = (RNG.random(channels) * 0.1 + 0.01).astype(scale_dtype)
    assert np.any(zero_point != 0)
    want, got = _materialized(lambda mb: mb.constexpr_affine_dequantize(
        quantized_data=data, zero_point=zero_point, scale=scale, axis=axis), "iOS16")
    assert got.dtype == scale_dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, want.astype(scale_dtype))
    # the definition: scale * (data - zero_point) along ``axis``
    shape = [channels if i == axis % 3 else 1 for i in range(3)]
    np.testing.assert_allclose(got, scale.reshape(shape).astype(np.float64)
                               * (data.astype(np.float64) - zero_point.reshape(shape)), rtol=2e-3)


def test_affine_dequantize_scalar_parameters():
    data = RNG.integers(-128, 128, (3, 4)).astype(np.int8)
    want, got = _materialized(lambda mb: mb.constexpr_affine_dequantize(
        quantized_data=data, zero_point=np.int8(3), scale=np.float16(0.05), axis=1), "iOS16")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("blocks", [(8, 1), (2, 1), (8, 3), (1, 1)], ids=["per_channel", "blocked_rows",
                                                                         "blocked_both", "per_tensor"])
@pytest.mark.parametrize("offset", [True, False])
@pytest.mark.parametrize("scale_dtype", [np.float16, np.float32])
def test_blockwise_shift_scale_matches_coremltools(blocks, offset, scale_dtype):
    data = RNG.integers(-128, 128, (8, 12)).astype(np.int8)
    scale = (RNG.random(blocks) * 0.1 + 0.01).astype(scale_dtype)
    kwargs = {"data": data, "scale": scale}
    if offset:
        kwargs["offset"] = RNG.integers(-20, 20, blocks).astype(np.int8)
    want, got = _materialized(lambda mb: mb.constexpr_blockwise_shift_scale(**kwargs), "iOS18")
    assert got.dtype == scale_dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, want.astype(scale_dtype))
    rows, cols = data.shape[0] // blocks[0], data.shape[1] // blocks[1]
    spread = np.repeat(np.repeat(kwargs.get("offset", np.zeros(blocks, np.int8)), rows, 0), cols, 1)
    np.testing.assert_allclose(got, np.repeat(np.repeat(scale, rows, 0), cols, 1).astype(np.float64)
                               * (data.astype(np.float64) - spread), rtol=2e-3)


def test_inspect_shows_int8_weights(built, cli):
    int8, _, _ = built("mlp", "int8")
    fp32, _, _ = built("mlp", "fp32")
    res = cli("inspect", int8, "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    weights = {row["dtype"]: row for row in info["weights"]}
    assert weights["int8"]["tensors"] == 2 and weights["int8"]["elements"] == 2 * 256 * 512
    assert weights["fp16"]["tensors"] == 2 and weights["fp16"]["elements"] == 512 + 256  # the biases
    assert info["ops"]["constexpr_affine_dequantize"] == 2
    info = json.loads(cli("inspect", fp32, "--json").stdout)
    assert info["weights"] == [{"dtype": "fp32", "tensors": 4, "elements": 2 * 256 * 512 + 512 + 256}]
