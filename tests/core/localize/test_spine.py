"""Localization as convert and validate run it: which hops get a block, what the CLI and the renderers show, and a
hop that cannot be localized says why without changing its verdict."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest
from onnx import numpy_helper

import onnxbridge
from tests.conftest import ROOT, check_report
from tests.helpers.extras import require

torch = require("torch")
sys.path.insert(0, str(ROOT / "examples"))
from localize import Chain, hot_chain  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """a.onnx (a 12-block chain) and b.onnx, the same with blocks.4's weight x1.05."""
    out = tmp_path_factory.mktemp("pair")
    _, sample = hot_chain()
    onnxbridge.convert(Chain(hot=None).eval(), sample, output=out / "a.onnx")
    model = onnx.load(out / "a.onnx")
    weight = next(t for t in model.graph.initializer if t.name.startswith("blocks.4") and "weight" in t.name)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.05, weight.name))
    onnx.save(model, out / "b.onnx")
    return out / "a.onnx", out / "b.onnx"


@pytest.mark.slow
def test_torch_fp16_convert_names_the_module_that_overflows(tmp_path):
    model, sample = hot_chain()
    res = onnxbridge.convert(model, sample, output=tmp_path / "m.onnx", precision="fp16", localize=True,
                             report=tmp_path / "r.json")
    export, hop = check_report(tmp_path / "r.json")["hops"]
    # the export itself checks out in fp32; the fp16 model's own hop fails where block 7's Mul leaves fp16's range
    assert export["status"] == "passed" and hop["status"] == "failed" and hop["to"].endswith(":fp16")
    loc = hop["localization"]
    assert "mul_7" in loc["first_divergent"]["node"] and loc["first_divergent"]["inputs_ok"], loc
    assert "localize_s" in res.report["timings"]
    assert "mul_7" in onnxbridge.report.failure_summary(res.report)


@pytest.mark.slow
def test_convert_does_not_localize_unless_asked_and_on_covers_passing_hops(tmp_path):
    model, sample = Chain(hot=None).eval(), hot_chain()[1]
    rep = onnxbridge.convert(model, sample, output=tmp_path / "a.onnx").report
    assert "localization" not in rep["hops"][0] and "localize_s" not in rep["timings"]
    rep = onnxbridge.convert(model, sample, output=tmp_path / "b.onnx", localize="on").report
    loc = rep["hops"][0]["localization"]
    assert rep["status"] == "passed" and loc["first_divergent"] is None and loc["trace"], loc


@pytest.mark.slow
def test_validate_localizes_a_failed_onnx_pair_by_default_through_the_cli(pair, tmp_path, cli):
    a, b = pair
    out = cli("validate", str(a), str(b), "--report", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"),
              "--markdown", str(tmp_path / "r.md"))
    assert out.exit_code == 1, out.stderr
    loc = json.loads((tmp_path / "r.json").read_text())["hops"][0]["localization"]
    assert loc["first_divergent"]["node"] == "node_linear_4" and loc["first_divergent"]["op"] == "Gemm", loc
    assert "node_linear_4" in out.stdout + out.stderr
    assert "node_linear_4" in (tmp_path / "j.xml").read_text() and "node_linear_4" in (tmp_path / "r.md").read_text()
    off = cli("validate", str(a), str(b), "--localize", "off", "--report", str(tmp_path / "off.json"))
    assert off.exit_code == 1 and "localization" not in json.loads((tmp_path / "off.json").read_text())["hops"][0]


def test_an_unknown_localize_mode_is_exit_2(pair, cli):
    res = cli("validate", str(pair[0]), str(pair[1]), "--localize", "always")
    assert res.exit_code == 2 and "always" in res.stderr


def test_a_planted_adapter_bug_is_named_when_an_onnx_source_is_moved_to_another_opset(tmp_path, monkeypatch):
    """convert m.onnx --opset 12 with the Softmax-13 down rule patched wrong: the ONNX source's probe (its tensors
    matched by name in the adapted model) names the Softmax."""
    from onnxbridge.adapters.registry import DOWN, load_rules
    from onnxbridge.adapters.rules import softmax
    from tests.core.localize.test_onnx_pair import softmax_model

    def wrong(node, rw):  # the real rule, but the core Softmax flattens the last two axes
        nodes = softmax.transpose_op_transpose(node, rw)
        for n in nodes or ():
            for a in n.attribute if n.op_type == "Softmax" else ():
                if a.name == "axis":
                    a.i -= 1
        return nodes

    load_rules()
    onnx.save(softmax_model(), tmp_path / "m.onnx")
    assert "localization" not in onnxbridge.convert(tmp_path / "m.onnx", output=tmp_path / "ok.onnx", opset=12,
                                                    localize=True).report["hops"][0]
    monkeypatch.setitem(DOWN._fns, ("Softmax", 13), wrong)
    rep = onnxbridge.convert(tmp_path / "m.onnx", output=tmp_path / "bad.onnx", opset=12, localize=True).report
    first = rep["hops"][0]["localization"]["first_divergent"]
    # the adapted graph's node that makes the Softmax's output (the rewrite's last Transpose), and the source's node
    assert (first["output"], first["source"], first["inputs_ok"]) == ("probs", "attn_softmax", True), first
    assert first["node"].startswith("attn_softmax"), first


@pytest.mark.slow
def test_a_framework_source_against_a_backend_artifact_says_why_it_is_not_localized(tmp_path):
    """validate model vs .mlpackage directly: no ONNX graph in between to name nodes by (skipped, with the way)."""
    require("coremltools")
    model, sample = hot_chain()
    onnxbridge.convert(model, sample, to="coreml", output=tmp_path / "m.mlpackage", precision="fp16")
    rep = onnxbridge.validate(model, tmp_path / "m.mlpackage", sample_inputs=sample, precision="fp16")
    hop = rep["hops"][0]
    assert hop["status"] == "failed" and "validate the artifact against the ONNX model" in \
        hop["localization"]["skipped"], hop.get("localization")


def test_a_localization_that_breaks_leaves_the_verdict_and_says_so(pair, monkeypatch):
    from onnxbridge.localize import onnx_probe

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(onnx_probe, "localize_onnx_pair", broken)
    monkeypatch.setattr(onnx_probe.OnnxProbe, "tensors", broken)
    rep = onnxbridge.validate(*pair)
    assert rep["status"] == "failed"
    assert rep["hops"][0]["localization"]["skipped"].startswith("localization could not run: RuntimeError: boom")


@pytest.mark.slow
def test_the_example_names_every_planted_node(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "localize.py"), str(tmp_path)], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ONNX -> ONNX fp16: failed" in out.stdout and "mul_7" in out.stdout and "node_linear_4" in out.stdout
    for report in tmp_path.glob("*.json"):
        check_report(report)
