"""Data movement over rank 5 whose sizes ONNX's shape inference cannot follow, legalized within Core ML's rank 5
(backends/coreml/legalize_rank.py): the rewrite is exact for any permutation (onnxruntime on the graph before and
after, at two sizes; Video Swin's 8-D windows in steps), and window partitions of a padded image (Swin in
transformers, torchvision and timm), timm's patch merging (which reads the 6-D tensor's shape) and RAFT's scaled 6-D
view convert to Core ML with fixed and flexible sizes, the hop passing."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxbridge
from onnxbridge.backends.coreml.legalize_rank import high_rank_chain_rule, high_rank_shape_rule, runs
from onnxbridge.legalize import apply
from tests.helpers.extras import requires

PERMS = list(itertools.permutations(range(6)))


def _chain(perm: list[int], scale: bool, video: bool = False) -> onnx.ModelProto:
    """x [b, h, w, c] (flexible) -> Reshape [b, h/2, 2, w/3, 3, c] (sizes from Shape) -> (x 0.5) -> Transpose(perm)
    -> Reshape [b, -1]; and the Shape of the transposed tensor as a second output. ``video``: x [b, t, h, w, c] and
    Video Swin's 8-D [b, t/2, 2, h/2, 2, w/3, 3, c]."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    rank = 5 if video else 4
    nodes = [helper.make_node("Shape", ["x"], ["s"])]
    for axis in range(rank):
        nodes.append(helper.make_node("Gather", ["s", f"i{axis}"], [f"d{axis}"], axis=0))
    parts = ["d0"]
    for axis, k in zip(range(1, rank - 1), (2, 2, 3) if video else (2, 3)):
        nodes.append(helper.make_node("Div", [f"d{axis}", f"k{k}"], [f"q{axis}"]))
        parts += [f"q{axis}", f"k{k}"]
    nodes += [helper.make_node("Concat", [*parts, f"d{rank - 1}"], ["target"], axis=0),
              helper.make_node("Reshape", ["x", "target"], ["six"])]
    moved = "six"
    if scale:
        nodes.append(helper.make_node("Mul", ["six", "half"], ["scaled"]))
        moved = "scaled"
    nodes += [helper.make_node("Transpose", [moved], ["t"], perm=list(perm)), helper.make_node("Shape", ["t"], ["ts"]),
              helper.make_node("Concat", ["d0", "minus_one"], ["flat"], axis=0),
              helper.make_node("Reshape", ["t", "flat"], ["y"])]
    dims = ["b", "t", "h", "w", "c"] if video else ["b", "h", "w", "c"]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("ts", TensorProto.INT64, None)],
                              [*(i64(f"i{a}", [a]) for a in range(rank)), i64("k2", [2]), i64("k3", [3]),
                               i64("minus_one", [-1]), numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray) -> list:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no fusions: exact comparison
    return ort.InferenceSession(model.SerializeToString(), options).run(None, {"x": x})


def test_the_rewrite_moves_every_element_as_the_rank6_graph():
    """A sample of the 720 permutations (every 9th), with and without an elementwise op on the way: each chain is
    rewritten (in steps where more than five groups of dims move apart), no Transpose over rank 5 is left and both
    outputs are equal at two sizes (dims of size 1 among them)."""
    rng = np.random.default_rng(0)
    sizes = [rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 9, 5), (1, 2, 3, 1))]
    steps = set()
    for n, perm in enumerate(PERMS[::9]):
        model = _chain(list(perm), scale=n % 2 == 1)
        legal, fired = apply(model, [high_rank_shape_rule(5), high_rank_chain_rule(5)])
        assert [f.split(" (")[0] for f in fired] == ["rank6-shape-from-reshape-target", "rank6-reshape-chain-to-rank5"]
        transposes = [list(n.attribute[0].ints) for n in legal.graph.node if n.op_type == "Transpose"]
        assert transposes and max(len(p) for p in transposes) <= 5
        steps.add(len(runs([None, None, 2, None, 3, None], list(perm))[0]) > 5)
        for x in sizes:
            for before, after in zip(_run(model, x), _run(legal, x)):
                np.testing.assert_array_equal(before, after)
    assert steps == {True, False}  # in one go and in steps


def test_video_windows_of_rank_8_move_in_steps():
    """Video Swin's window partition (8-D, six groups apart): exact, within rank 5."""
    model = _chain([0, 1, 3, 5, 2, 4, 6, 7], scale=False, video=True)
    legal, fired = apply(model, [high_rank_shape_rule(5), high_rank_chain_rule(5)])
    assert "rank6-reshape-chain-to-rank5" in fired[-1]
    assert all(len(n.attribute[0].ints) <= 5 for n in legal.graph.node if n.op_type == "Transpose")
    x = np.random.default_rng(1).standard_normal((2, 4, 6, 9, 3)).astype(np.float32)
    for before, after in zip(_run(model, x), _run(legal, x)):
        np.testing.assert_array_equal(before, after)


def windows():
    """Swin's window partition and reverse of an image padded to whole windows, a projection per window, timm's
    patch merging (``.permute(...).flatten(3)`` reads the 6-D shape) and RAFT's scaled 6-D view."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Windows(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            b, h, w, c = x.shape
            ph, pw = (4 - h % 4) % 4, (4 - w % 4) % 4
            xp = F.pad(x, (0, 0, 0, pw, 0, ph))
            hp, wp = h + ph, w + pw
            win = xp.view(b, hp // 4, 4, wp // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
            win = self.proj(win)
            back = win.view(b, hp // 4, wp // 4, 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
            merged = xp.reshape(b, hp // 2, 2, wp // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3)
            corr = (x.reshape(b, h, w, 1, c // 2, 2) / 3.0).reshape(b * h * w, 1, c // 2, 2)
            return back[:, :h, :w], merged, corr

    torch.manual_seed(0)
    return Windows().eval(), (torch.randn(2, 6, 7, 8),)


@pytest.mark.parametrize("dynamic", [[], ["x:0:batch:1..3", "x:1:h:5..9"]], ids=["fixed", "flexible"])
@pytest.mark.fast_cases("fixed")
@requires("coremltools", "torch")
def test_window_partitions_convert_to_core_ml(tmp_path, dynamic):
    rep = onnxbridge.convert(f"{__file__}:windows", to="coreml", output=tmp_path / "m.mlpackage", opset=17,
                             dynamic=dynamic).report
    assert rep["status"] == "passed", [(h["to"], h["status"], h.get("errors")) for h in rep["hops"]]
    notes = " ".join(n for n in rep["notes"] if n.startswith("legalized for Core ML"))
    assert notes.count("rank6-reshape-chain-to-rank5") == 4 and "rank6-shape-from-reshape-target" in notes
