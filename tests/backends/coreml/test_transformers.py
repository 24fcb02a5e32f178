"""Core ML blockers seen on transformer families, each in a small torch module converted torch -> ONNX -> Core ML
in one command with every hop passing: Swin window partition/reverse (rank-6 reshapes, legalized to rank 5),
wav2vec2's positional-conv padding removal (a negative slice end on a flexible time axis) and T5's relative
position bias (an embedding lookup of buckets computed with log, min and where)."""
from __future__ import annotations

import itertools
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.backends.coreml.package import build
from onnxbridge.backends.coreml.runners import Runner
from onnxbridge.legalize.rank import merge_runs

from tests.helpers.extras import require

require("coremltools")
require("torch")


def swin_block():
    """Shifted-window attention: roll, window partition (view to rank 6, permute, reshape), attention per window
    with the shifted-window mask, window reverse (rank 6 again), roll back."""
    import torch
    from torch import nn

    def partition(x, w):
        b, h, wd, c = x.shape
        x = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, w, w, c)

    def reverse(windows, w, h, wd):
        b = windows.shape[0] // (h * wd // w // w)
        x = windows.view(b, h // w, wd // w, w, w, -1).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(b, h, wd, -1)

    class SwinBlock(nn.Module):
        def __init__(self, dim: int = 8, heads: int = 2, window: int = 2, size: int = 4):
            super().__init__()
            self.heads, self.window, self.shift = heads, window, window // 2
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.register_buffer("mask", self._mask(size))

        def _mask(self, size: int):
            w, s = self.window, self.shift
            img = torch.zeros(1, size, size, 1)
            cnt = 0
            for hs in (slice(0, -w), slice(-w, -s), slice(-s, None)):
                for ws in (slice(0, -w), slice(-w, -s), slice(-s, None)):
                    img[:, hs, ws, :] = cnt
                    cnt += 1
            win = partition(img, w).view(-1, w * w)
            diff = win[:, None, :] - win[:, :, None]
            return diff.masked_fill(diff != 0, -100.0)

        def forward(self, x):
            b, h, wd, c = x.shape
            w, n = self.window, self.window * self.window
            shifted = torch.roll(x, (-self.shift, -self.shift), (1, 2))
            win = partition(shifted, w).view(-1, n, c)
            q, k, v = self.qkv(win).view(-1, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            attn = q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5
            nw = self.mask.shape[0]
            attn = attn.view(-1, nw, self.heads, n, n) + self.mask[None, :, None]
            out = (attn.view(-1, self.heads, n, n).softmax(-1) @ v).transpose(1, 2).reshape(-1, w, w, c)
            y = reverse(self.proj(out), w, h, wd)
            return x + torch.roll(y, (self.shift, self.shift), (1, 2))

    torch.manual_seed(0)
    return SwinBlock().eval(), (torch.randn(2, 4, 4, 8),)


def wav2vec2_pos_conv():
    """wav2vec2's positional convolution: a grouped conv with even kernel and padding k//2, whose one extra
    frame is removed by ``x[:, :, :-1]``, then GELU and a residual; and the frames before the last."""
    import torch
    from torch import nn

    class PosConv(nn.Module):
        def __init__(self, dim: int = 8, kernel: int = 4):
            super().__init__()
            self.conv = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=2)

        def forward(self, x):
            y = self.conv(x.transpose(1, 2))[:, :, :-1]
            return x + nn.functional.gelu(y).transpose(1, 2), x[:, -3:-1]  # and frames counted from the end

    torch.manual_seed(0)
    return PosConv().eval(), (torch.randn(2, 9, 8),)


def t5_relative_bias():
    """T5's relative position bias as transformers computes it: buckets of key - query positions (exact below
    max_exact, log spaced above, clamped by min, chosen by where), bidirectional (encoder) and causal (decoder),
    each looked up in a (num_buckets, heads) table and added to attention scores (the causal clamp as an
    integer Clip)."""
    import math

    import torch
    from torch import nn

    def bucket(rel, bidirectional: bool, buckets: int = 32, max_distance: int = 128):
        out = torch.zeros_like(rel)
        if bidirectional:
            buckets //= 2
            out = out + (rel > 0).to(torch.long) * buckets
            rel = torch.abs(rel)
        else:
            rel = (-rel).clamp(min=0)  # transformers: -torch.min(rel, torch.zeros_like(rel))
        exact = buckets // 2
        large = exact + (torch.log(rel.float() / exact) / math.log(max_distance / exact)
                         * (buckets - exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, buckets - 1))
        return out + torch.where(rel < exact, rel, large)

    class RelativeBias(nn.Module):
        def __init__(self, heads: int = 2):
            super().__init__()
            self.encoder, self.decoder = nn.Embedding(32, heads), nn.Embedding(32, heads)

        def forward(self, x):
            s = x.shape[1]
            rel = torch.arange(s, dtype=torch.long)[None, :] - torch.arange(s, dtype=torch.long)[:, None]
            # [s, s, heads]; the decoder's table indexed directly, which the dynamo exporter makes a GatherND
            values = self.encoder(bucket(rel, True)) + self.decoder.weight[bucket(rel, False)]
            return (x @ x.transpose(1, 2))[:, None] + values.permute([2, 0, 1]).unsqueeze(0)

    torch.manual_seed(0)
    return RelativeBias().eval(), (torch.randn(2, 40, 4),)


def _convert(cli, tmp_path, factory: str, *args) -> dict:
    res = cli("convert", f"{__file__}:{factory}", "--to", "coreml", "-o", tmp_path / "m.mlpackage", "--opset", "17",
              "--report", tmp_path / "r.json", *args)
    rep = json.loads((tmp_path / "r.json").read_text())
    assert res.exit_code == 0, (res.output, [h.get("errors") for h in rep.get("hops", [])])
    # (the dynamo exporter runs at opset 18 below it: the adapters' hop onnx@18 -> onnx@N sits between the two)
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"] if not h["from"].startswith("onnx@")] == \
        [("torch", "onnx", "passed"), ("onnx", "coreml", "passed")]
    assert all(h["status"] == "passed" for h in rep["hops"])
    return rep


def test_merged_transpose_moves_every_element_as_the_rank6_one():
    """The legalization's shape arithmetic, against numpy, for every permutation of shapes with and without
    size-1 dims (exactness of the rewrite rests on it)."""
    x = np.arange(2 * 3 * 1 * 4 * 2 * 5).reshape(2, 3, 1, 4, 2, 5)
    for perm in itertools.permutations(range(6)):
        merged, merged_perm = merge_runs(list(x.shape), list(perm))
        assert np.array_equal(x.reshape(merged).transpose(merged_perm).reshape(-1), x.transpose(perm).reshape(-1))
    assert merge_runs([2, 2, 2, 2, 2, 8], [0, 1, 3, 2, 4, 5]) == ([4, 2, 2, 16], [0, 2, 1, 3])


@pytest.mark.parametrize("exporter", [["--opset", "17"], []], ids=["torchscript", "dynamo"])
@pytest.mark.slow
def test_swin_window_attention(cli, tmp_path, exporter):
    """Window partition and reverse reshape to rank 6: both are legalized (named in the notes) and the package
    holds no tensor over rank 5."""
    rep = _convert(cli, tmp_path, "swin_block", *exporter)
    notes = [n for n in rep["notes"] if n.startswith("legalized for Core ML")]
    assert len(notes) == 1 and notes[0].count("rank6-reshape-transpose-to-rank5") == 2, rep["notes"]
    ranks = {len(v.shape) for op in Runner(tmp_path / "m.mlpackage").function.operations for v in op.outputs}
    assert max(ranks) == 5  # the attention's own [windows, n, 3, heads, head_dim]


def test_check_takes_the_swin_block(cli, tmp_path):
    """`onnxbridge check --targets coreml` applies the same rules: the rank-6 reshapes are not listed."""
    import torch

    model, args = swin_block()
    torch.onnx.export(model, args, tmp_path / "swin.onnx", opset_version=17, dynamo=False)
    res = cli("check", tmp_path / "swin.onnx", "--targets", "coreml")
    assert res.exit_code == 0 and "coreml: can convert" in res.output, res.output


@pytest.mark.slow
def test_wav2vec2_padding_removal_on_a_flexible_time_axis(cli, tmp_path):
    """``x[:, :, :-1]`` and ``x[:, -3:-1]`` on the flexible time axis slice with negative starts and ends at run
    time (9 frames, then 10)."""
    rep = _convert(cli, tmp_path, "wav2vec2_pos_conv", "--dynamic", "x:1:time")
    assert rep["artifact"]["backend"]["flexible_inputs"]["x"][1] == [1, 1024]
    assert [s["x"][1] for s in rep["inputs"]["samples"]] == [9, 10]


@pytest.mark.parametrize("args", [["--opset", "17"], ["--opset", "17", "--dynamic", "x:1:seq"],
                                  ["--exporter", "dynamo", "--dynamic", "x:1:seq"]],
                         ids=["fixed", "flexible", "flexible_dynamo"])
@pytest.mark.fast_cases("fixed")
def test_t5_relative_position_bias(cli, tmp_path, args):
    """Fixed: the buckets fold to constants; flexible: they are computed at run time (integer abs, neg, clip,
    min, where, a full_like expanded to a run-time shape) and the tables gathered with them (Gather, and GatherND
    from the dynamo exporter)."""
    rep = _convert(cli, tmp_path, "t5_relative_bias", *args)
    ops = set(rep["artifact"]["backend"]["ops"])
    if "--dynamic" in args:
        assert {"gather", "log", "select", "minimum", "maximum"} <= ops
        assert [s["x"][1] for s in rep["inputs"]["samples"]] == [40, 41]
    else:
        assert "gather" not in ops  # the bias is a constant of the fixed sequence


@pytest.mark.slow
def test_window_partition_with_a_flexible_batch(cli, tmp_path):
    """An ONNX window partition with a flexible batch (``reshape(-1, ...)``): the -1 is the one unknown dim, merged
    into a run the Reshape infers, so the rank-6 chain is rewritten with the batch flexible; with ``--input-shape``
    fixing the batch first (as the build does) too."""
    nodes = [helper.make_node("Reshape", ["x", "split"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 1, 3, 2, 4, 5]),
             helper.make_node("Reshape", ["t", "windows"], ["y"])]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 4, 3])
    graph = helper.make_graph(nodes, "partition", [x_info],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([-1, 2, 2, 2, 2, 3]), "split"),
                               numpy_helper.from_array(np.array([-1, 2, 2, 3]), "windows")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              tmp_path / "p.onnx")
    for extra in ([], ["--input-shape", "x:2,4,4,3"]):
        res = cli("check", tmp_path / "p.onnx", "--targets", "coreml", *extra)
        assert res.exit_code == 0 and "coreml: can convert" in res.output, res.output
    for batches, shapes in (((2, 3), {}), ((2,), {"x": (2, 4, 4, 3)})):
        built = build(tmp_path / "p.onnx", tmp_path / "p.mlpackage", input_shapes=shapes)
        assert built.notes == ["legalized for Core ML: rank6-reshape-transpose-to-rank5 (node y)"]
        for batch in batches:
            x = np.random.default_rng(batch).standard_normal((batch, 4, 4, 3)).astype(np.float32)
            want = x.reshape(batch, 2, 2, 2, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 2, 2, 3)
            np.testing.assert_array_equal(Runner(tmp_path / "p.mlpackage")({"x": x})[0], want)


@pytest.mark.slow
def test_gather_nd_with_run_time_indices(tmp_path):
    """GatherND (``weight[idx]`` from the dynamo exporter): a constant table by run-time buckets, and an input by
    run-time (row, column) pairs, negatives among them, as onnxruntime gives."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("GatherND", ["table", "buckets"], ["bias"]),
             helper.make_node("GatherND", ["x", "pairs"], ["picked"])]
    graph = helper.make_graph(
        nodes, "gather_nd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 4]),
                             helper.make_tensor_value_info("buckets", TensorProto.INT64, [6, 6, 1]),
                             helper.make_tensor_value_info("pairs", TensorProto.INT64, [7, 2])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("bias", "picked")],
        [numpy_helper.from_array(rng.standard_normal((32, 2)).astype(np.float32), "table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "g.onnx")
    feeds = {"x": rng.standard_normal((3, 5, 4)).astype(np.float32), "buckets": rng.integers(-32, 32, (6, 6, 1)),
             "pairs": np.stack([rng.integers(-3, 3, 7), rng.integers(-5, 5, 7)], -1)}
    rep = onnxbridge.convert(tmp_path / "g.onnx", to="coreml", output=tmp_path / "g.mlpackage",
                             report=tmp_path / "r.json", inputs=feeds).report
    assert rep["status"] == "passed", rep["hops"][-1]["errors"]
    assert {"gather_nd", "select"} <= set(rep["artifact"]["backend"]["ops"])
