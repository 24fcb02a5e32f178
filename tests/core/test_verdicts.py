"""Every verdict is a fact: fp16 is checked with fp16 arithmetic, precisions not applied are refused, every name
the user gives is checked against the model, opsets beyond the installed onnx are refused, NaN/inf, shape and dtype
mismatches say so in their own words, and latency is a real, labelled measurement."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from tests.conftest import ROOT, assert_one_line_error, check_report
from tests.helpers.extras import require

torch = require("torch")
from torch import nn  # noqa: E402

FACTORY = str(ROOT / "examples" / "models.py")

MODELS = '''
import torch
from torch import nn


class Overflow(nn.Module):
    """relu(h * 60000) / 60000: exact in fp32; h * 60000 leaves fp16's range (65504) once |h| > 1.09."""

    def forward(self, h):
        return torch.relu(h * 60000) / 60000


class Block(nn.Module):
    """LayerNorm + nn.MultiheadAttention + GELU MLP: its fp16 export crashed onnxruntime's default session."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, tokens):
        h = self.ln(tokens)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = tokens + a
        return x + self.mlp(x)


def overflow():
    torch.manual_seed(0)
    return Overflow().eval(), (torch.rand(2, 8) * 6 - 3,)


def attn():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 10, 32),)


class Image(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, image_feats):
        return self.conv(image_feats)


def image():
    torch.manual_seed(0)
    return Image().eval(), (torch.randn(1, 3, 8, 8),)
'''


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "verdict_models.py"
    path.write_text(MODELS)
    return str(path)


# --- fp16 ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_fp16_overflow_fails_and_names_the_intermediate(factories, cli, tmp_path):
    """onnxruntime's CPU provider alone would compute this chain in fp32 and say "passed"."""
    res = cli("convert", f"{factories}:overflow", "-o", tmp_path / "o.onnx", "--precision", "fp16",
              "--report", tmp_path / "r.json", "--junit", tmp_path / "r.xml", "--html", tmp_path / "r.html")
    assert res.exit_code == 1, res.output
    assert "left fp16's range" in res.stderr and "inf in" in res.stderr
    rep = check_report(tmp_path / "r.json")
    export, hop = rep["hops"]  # the export is checked in fp32, the fp16 model against it
    assert export["status"] == "passed" and export["tolerance"]["rule"] == "fp32"
    assert hop["status"] == "failed" and hop["to"].endswith(":fp16") and rep["introduced_by"].endswith(":fp16")
    assert any("(Mul)" in e and "left fp16's range" in e for e in hop["errors"])
    assert "inf in" in hop["outputs"][0]["reason"] and "stored as fp16" in hop["runtimes"][hop["to"]]
    assert "inf in" in ET.parse(tmp_path / "r.xml").getroot().find(".//failure").get("message")
    assert "left fp16&#x27;s range" in (tmp_path / "r.html").read_text()
    # the same file passes when the inputs keep h * 60000 within fp16's range: the check is fp16, not broken
    small = {"h": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)}
    np.savez(tmp_path / "small.npz", **small)
    assert cli("validate", f"{factories}:overflow", tmp_path / "o.onnx", "--precision", "fp16",
               "--inputs", tmp_path / "small.npz").exit_code == 0


def test_fp16_evaluation_rounds_every_intermediate_like_numpy_float16():
    """The node-by-node run against numpy float16 arithmetic, op by op (each op rounds its result to fp16)."""
    from onnxbridge.fp16eval import Fp16Evaluator

    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float16) * np.float16(3)
    w = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float16)
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
             helper.make_node("Add", ["b", "x"], ["c"]), helper.make_node("MatMul", ["c", "w"], ["d"]),
             helper.make_node("Sqrt", ["d"], ["e"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4, 16])],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT16, [4, 16])],
                              [numpy_helper.from_array(np.array(3.3, np.float16), "k"), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    evaluator = Fp16Evaluator(model)
    got = evaluator({"x": x})[0]
    with np.errstate(all="ignore"):
        a = (x * np.float16(3.3)).astype(np.float16)
        b = np.exp(a.astype(np.float32)).astype(np.float16)  # overflows to inf for a > 11.09
        c = (b + x).astype(np.float16)
        d = (c.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)  # fp32 accumulation, fp16 result
        e = np.sqrt(d.astype(np.float32)).astype(np.float16)
    assert np.isinf(b).any(), "the case must overflow somewhere"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(e))
    finite = np.isfinite(e)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(e))
    assert np.allclose(got[finite].astype(np.float32), e[finite].astype(np.float32), rtol=2e-3, atol=1e-3)
    assert evaluator.last_notes and "(Exp)" in evaluator.last_notes[0]
    # onnxruntime's own session runs the chain in fp32: no inf where fp16 arithmetic has one
    plain = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isinf(got).sum() > np.isinf(plain).sum()


@pytest.mark.slow
def test_fp16_attention_with_a_dynamic_batch_converts_and_loads_with_default_options(factories, cli, tmp_path):
    out = tmp_path / "a.onnx"
    res = cli("convert", f"{factories}:attn", "-o", out, "--precision", "fp16", "--dynamic", "tokens:0:batch",
              "--report", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rep = check_report(tmp_path / "r.json")
    assert rep["artifact"]["precision"] == {"requested": "fp16", "weights": "fp16", "compute": "fp16",
                                            "inputs_outputs": rep["artifact"]["precision"]["inputs_outputs"]}
    assert rep["hops"][0]["samples"] == 2  # the grown batch too
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])  # default options: no crash
    y = sess.run(None, {"tokens": np.ones((3, 10, 32), np.float32)})[0]
    assert y.shape == (3, 10, 32) and np.isfinite(y).all()
    assert "Transpose" in {n.op_type for n in onnx.load(out).graph.node}


@pytest.mark.slow
def test_fp16_costs_this_much_against_the_plain_run(factories, tmp_path):
    """The figure the issue asks for (printed; the assertion only keeps it sane): the rounded graph (every fp16
    value stored as fp16) vs the file in one plain session; the node-by-node evaluator computes the same numbers."""
    import time

    from onnxbridge.fp16eval import Fp16Evaluator
    from onnxbridge.runtime import Session

    result = onnxbridge.convert(f"{factories}:attn", output=tmp_path / "a.onnx", precision="fp16")
    assert result.passed
    feeds = {"tokens": np.random.default_rng(0).standard_normal((2, 10, 32)).astype(np.float32)}
    nodes = Session(str(tmp_path / "a.onnx"))
    np.testing.assert_array_equal(nodes(feeds)[0], Fp16Evaluator(str(tmp_path / "a.onnx"))(feeds)[0])
    sess = ort.InferenceSession(str(tmp_path / "a.onnx"), providers=["CPUExecutionProvider"])

    def best(fn):
        fn(feeds)
        times = []
        for _ in range(20):
            t = time.perf_counter()
            fn(feeds)
            times.append(time.perf_counter() - t)
        return min(times)

    ratio = best(nodes) / best(lambda f: sess.run(None, f))
    print(f"fp16 rounded graph / plain onnxruntime: {ratio:.1f}x")
    assert ratio < 10


# --- precisions -------------------------------------------------------------------------------------------------

def test_int8_onnx_is_refused_not_faked(cli, tmp_path):
    res = cli("convert", FACTORY + ":cnn", "-o", tmp_path / "c.onnx", "--precision", "int8")
    assert_one_line_error(res, 2, "--precision int8 is not applied by --to onnx", "fp32, fp16")
    assert not (tmp_path / "c.onnx").exists()


@pytest.mark.slow
def test_the_report_states_the_applied_precision(tmp_path):
    rep = onnxbridge.convert(FACTORY + ":cnn", output=tmp_path / "c.onnx").report
    assert rep["artifact"]["precision"]["weights"] == "fp32" and rep["artifact"]["precision"]["compute"] == "fp32"


# --- names --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["--dynamic", "images:0"], ["--dynamic", "'images'", "'image_feats'"]),
    (["--input-shape", "images:1,3,8,8"], ["--input-shape", "'images'", "image_feats"]),
    (["--input-name", "a", "--input-name", "b"], ["2 input names", "1 tensor inputs"]),
    (["--output-name", "y", "--output-name", "z"], ["--output-name gives 2 name(s)", "1 output(s)"]),
    (["--atol", "logits:1e-3"], ["'logits'", "'output'"]),
    (["--rtol", "logits:1e-3"], ["'logits'", "'output'"]),
])
def test_a_name_that_matches_nothing_is_exit_2(factories, cli, tmp_path, args, needles):
    out = tmp_path / "m.onnx"
    res = cli("convert", f"{factories}:image", "-o", out, *args, "--report", tmp_path / "r.json")
    assert_one_line_error(res, 2, *needles)
    assert not out.exists() and not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_inputs_keys_are_checked(factories, cli, tmp_path):
    model = tmp_path / "m.onnx"
    assert cli("-q", "convert", f"{factories}:image", "-o", model).exit_code == 0
    np.savez(tmp_path / "typo.npz", image_feat=np.zeros((1, 3, 8, 8), np.float32))
    assert_one_line_error(cli("validate", f"{factories}:image", model, "--inputs", tmp_path / "typo.npz"), 2,
                          "'image_feat'", "'image_feats'")
    np.savez(tmp_path / "positional.npz", np.zeros((1, 3, 8, 8), np.float32))  # arr_0: taken by position
    assert cli("validate", f"{factories}:image", model, "--inputs", tmp_path / "positional.npz").exit_code == 0


@pytest.mark.slow
def test_check_refuses_unknown_input_shape_names(cli, tmp_path):
    model = tmp_path / "m.onnx"
    assert onnxbridge.convert(FACTORY + ":cnn", output=model).passed
    assert_one_line_error(cli("check", model, "--targets", "onnx", "--input-shape", "images:1,3,32,32"), 2,
                          "'images'", "'x'")


# --- opsets and IR ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_an_opset_beyond_the_installed_onnx_is_refused_for_every_source(cli, tmp_path):
    beyond = onnx.defs.onnx_opset_version() + 3
    res = cli("convert", FACTORY + ":cnn", "-o", tmp_path / "c.onnx", "--opset", beyond)
    assert_one_line_error(res, 2, f"--opset {beyond}", f"onnx {onnx.__version__}")
    model = tmp_path / "m.onnx"
    assert onnxbridge.convert(FACTORY + ":cnn", output=model).passed
    assert_one_line_error(cli("convert", model, "-o", tmp_path / "d.onnx", "--opset", beyond), 2, f"--opset {beyond}")
    assert_one_line_error(cli("adapt", model, "-o", tmp_path / "d.onnx", "--opset", beyond), 2, f"--opset {beyond}")
    assert not (tmp_path / "c.onnx").exists() and not (tmp_path / "d.onnx").exists()


@pytest.mark.parametrize("opset", [13, 17, onnx.defs.onnx_opset_version()])
@pytest.mark.fast_cases("17")
def test_the_ir_version_is_the_one_the_opset_needs(tmp_path, opset):
    rep = onnxbridge.convert(FACTORY + ":cnn", output=tmp_path / "c.onnx", opset=opset).report
    want = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)], ignore_unknown=True)
    assert rep["artifact"]["ir_version"] == max(want, 4)
    onnx.checker.check_model(str(tmp_path / "c.onnx"), full_check=True)


# --- failure words --------------------------------------------------------------------------------------------

def _tiny(tmp_path, op: str, dtype=TensorProto.FLOAT, shape=(2, 3)) -> str:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", dtype, None)])
    path = tmp_path / f"{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_nan_is_named(tmp_path, cli):
    """The source computes Relu; the 'converted' model computes Log, which is NaN for negative inputs."""
    src, bad = _tiny(tmp_path, "Relu"), _tiny(tmp_path, "Log")
    res = cli("validate", src, bad, "--report", tmp_path / "r.json", "--junit", tmp_path / "r.xml",
              "--markdown", tmp_path / "r.md", "--html", tmp_path / "r.html")
    assert res.exit_code == 1
    assert "NaN in" in res.stderr and "max abs 0" not in res.stderr
    out = check_report(tmp_path / "r.json")["hops"][0]["outputs"][0]
    assert out["reason"].startswith("NaN in") and "where the reference has numbers" in out["reason"]
    for name in ("r.xml", "r.md", "r.html"):
        assert "NaN in" in (tmp_path / name).read_text(), name
    assert "NaN in" in res.stdout


def test_shape_and_dtype_mismatches_have_their_own_words():
    from onnxbridge.compare import compare

    shape = compare(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), atol=0, rtol=0)
    assert not shape["passed"] and shape["error"] == "shape [3, 2] where the reference is [2, 3]"
    dtype = compare(np.zeros(3, np.float32), np.zeros(3, np.int64), atol=0, rtol=0)
    assert not dtype["passed"] and dtype["error"] == "dtype int64 where the reference is float32"
    widths = compare(np.arange(3, dtype=np.int64), np.arange(3, dtype=np.int32), atol=0, rtol=0)
    assert widths["passed"]  # integer widths (Core ML's int32 for int64) compare by value
    inf = compare(np.ones(4, np.float32), np.array([1, np.inf, -np.inf, 1], np.float32), atol=1e-4, rtol=0)
    assert not inf["passed"] and inf["reason"] == "inf in 2 of 4 values where the reference is finite"


# --- latency ------------------------------------------------------------------------------------------------

def test_latency_is_measured_fresh_and_labelled(cli, tmp_path):
    res = cli("convert", FACTORY + ":cnn", "-o", tmp_path / "c.onnx", "--latency-runs", "3",
              "--report", tmp_path / "r.json", "--html", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    hop = check_report(tmp_path / "r.json")["hops"][0]
    assert hop["latency_s"]["torch"] > 2e-5  # a real forward of the CNN, not a cached answer
    assert hop["runtimes"]["torch"].startswith("torch 2.13") and hop["runtimes"]["onnx"].startswith("onnxruntime")
    html = (tmp_path / "r.html").read_text()
    assert "latency" in html and "onnxruntime" in html
