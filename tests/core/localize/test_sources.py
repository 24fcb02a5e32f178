"""The source side of the source -> ONNX hop: torch modules, Keras layers and Paddle ops matched to the tensors of
their ONNX export, and localization naming the module, layer or op that differs. Keras and Paddle, which cannot share
a process, are in tests/frontends/tensorflow/test_localize.py and tests/frontends/paddle/test_localize.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxbridge.frontends.tensorflow.probe import pair_scopes
from onnxbridge.localize.bisect import localize
from onnxbridge.localize.onnx_probe import OnnxProbe
from onnxbridge.localize.scopes import ScopedGraph
from onnxbridge.precision import to_fp16
from onnxbridge.spine import load_source
from onnxbridge.validation import Tolerance
from tests.helpers.extras import require

torch = require("torch")
from onnxbridge.frontends.pytorch.probe import node_scopes  # noqa: E402


class Block(torch.nn.Module):
    """A residual block; with a large ``gain`` its values leave fp16's range inside it and come back in fp32."""

    def __init__(self, width: int, gain: float = 1.0):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.gain = gain

    def forward(self, x):
        return x + torch.relu(self.fc(x) * self.gain) / self.gain


class Chain(torch.nn.Module):
    def __init__(self, blocks: int = 12, width: int = 16, hot: int | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block(width, 3e4 if i == hot else 1.0) for i in range(blocks))
        if hot is not None:
            with torch.no_grad():
                self.blocks[hot].fc.bias.fill_(3.0)  # fc(x) * 3e4 > 65504
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Rich(torch.nn.Module):
    """Conv, norm, attention (tuple output), an LSTM, a module called twice, a Dropout with no ONNX nodes, an
    in-place ReLU after a module (its captured output must not change)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.norm = torch.nn.LayerNorm(8)
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)
        self.shared = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.relu = torch.nn.ReLU(inplace=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = self.norm(self.conv(x).transpose(1, 2))
        a, _ = self.attn(h, h, h)
        y, _ = self.lstm(a + h)
        y = self.relu(self.shared(y))
        y = self.shared(torch.tanh(y)) * 0.5
        return self.head(self.drop(y))


def _export(model, x, tmp_path, exporter="auto"):
    src = load_source(model, sample_inputs=(x,), exporter=exporter)
    ex = src.export(tmp_path, opset=None)
    return src, ex, tmp_path / f"{ex.exporter.split('(')[1].rstrip(')')}.onnx"


def _all_agree(src, sides, model, base_dir=None):
    """Max |difference| between the probe's tensors and onnxruntime's on the whole model (``base_dir``: where its
    external data lives: the torch frontend reads the TorchScript export in place)."""
    full = onnx.ModelProto()
    full.CopyFrom(model)
    del full.graph.output[:]
    names = [c.tensor for c in sides.checkpoints]
    full.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    import onnxruntime as ort

    feeds = dict(src.sample.feeds)
    if base_dir is None:
        session = ort.InferenceSession(full.SerializeToString())
    else:
        onnx.save(full, str(Path(base_dir) / "all-outputs.onnx"))
        session = ort.InferenceSession(str(Path(base_dir) / "all-outputs.onnx"))
    want = dict(zip(names, session.run(names, feeds)))
    got = sides.probe.tensors(names, feeds)
    return max(float(np.max(np.abs(got[n] - want[n]))) for n in names)


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.fast_cases("torchscript")
def test_torch_modules_match_their_onnx_tensors(tmp_path, exporter):
    src, ex, path = _export(Rich(), torch.randn(2, 4, 5), tmp_path, exporter)
    sides = src.probe(onnx.load(str(path)))
    sources = [c.source for c in sides.checkpoints]
    # the dynamo exporter scopes both calls of ``shared`` alike (one run of nodes each); the TorchScript one names
    # the second call's scope ``shared_1``, which no module has: left out. ``drop`` has no ONNX node of its own.
    shared = ["shared@0", "relu", "shared@1"] if exporter == "dynamo" else ["relu"]
    assert sources == ["conv", "norm", "attn[0]", "lstm[0]", *shared, "head"], sources
    assert _all_agree(src, sides, onnx.load(str(path))) < 1e-5
    order = {n.output[0]: i for i, n in enumerate(onnx.load(str(path)).graph.node)}  # the probed graph's order
    assert [order[c.tensor] for c in sides.checkpoints] == sorted(order[c.tensor] for c in sides.checkpoints)
    assert sides.probe.runs == 1 and exporter in sides.method.lower()


@pytest.mark.slow
def test_torch_fp16_overflow_names_the_block(tmp_path):
    """The acceptance test of issue 17: values > 65504 inside blocks.7 only; torch fp32 vs the honest fp16 export
    (the source side matched on the export, and on the fp16 model made from it: same node names and scopes)."""
    src, ex, _ = _export(Chain(hot=7), torch.randn(4, 16), tmp_path)
    half = to_fp16(ex.model, base_dir=tmp_path)
    for probed in (ex.model, half):
        sides = src.probe(probed)
        assert "blocks.7" in {c.source for c in sides.checkpoints}
        report = localize(sides.probe, OnnxProbe(half, fp16=True), sides.checkpoints, [src.sample],
                          Tolerance.for_precision("fp16"), method=sides.method)
        first = report["first_divergent"]
        assert first is not None and first["source"] == "blocks.7" and first["inputs_ok"], first
        assert report["runs"] < len(sides.checkpoints) / 2
        assert "dynamo" in report["method"] and "torch forward hooks" in report["method"]


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.fast_cases("torchscript")
def test_torch_fp32_planted_weight_names_the_module(tmp_path, exporter):
    src, _, path = _export(Chain(), torch.randn(4, 16), tmp_path, exporter)
    full = onnx.load(str(path))  # with its weights (the dynamo export keeps them external)
    sides = src.probe(full)
    clean = localize(sides.probe, OnnxProbe(full), sides.checkpoints, [src.sample], Tolerance.for_precision("fp32"),
                     method=sides.method)
    assert clean["first_divergent"] is None
    weight = next(t for t in full.graph.initializer if t.name == "blocks.4.fc.weight")
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.05), weight.name))
    report = localize(sides.probe, OnnxProbe(full), sides.checkpoints, [src.sample], Tolerance.for_precision("fp32"),
                      method=sides.method)
    first = report["first_divergent"]
    assert first["source"] == "blocks.4.fc" and first["inputs_ok"], first


class Scaled(Chain):
    def forward(self, x, scale: float = 2.0):
        return super().forward(x) * scale


def test_torch_wrapped_for_torchscript_export(tmp_path):
    """A forward with a non-tensor argument is traced through a wrapper: its scopes start with ``inner``."""
    src, ex, _ = _export(Scaled(blocks=3), torch.randn(2, 16), tmp_path, "torchscript")
    assert ex.model.graph.node[0].name.startswith("/inner/")
    sides = src.probe(ex.model)
    assert [c.source for c in sides.checkpoints] == ["blocks.0.fc", "blocks.0", "blocks.1.fc", "blocks.1",
                                                     "blocks.2.fc", "blocks.2", "head"]
    assert _all_agree(src, sides, ex.model, ex.base_dir) < 1e-5


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torch_without_scopes_gives_none(tmp_path):
    src, ex, _ = _export(Chain(blocks=2), torch.randn(2, 16), tmp_path, "torchscript")
    plain = onnx.ModelProto()
    plain.CopyFrom(ex.model)
    for i, node in enumerate(plain.graph.node):
        node.name = f"n{i}"
    assert node_scopes(plain) == (None, [])
    assert src.probe(plain) is None
    scripted = load_source(torch.jit.script(Chain(blocks=2)), sample_inputs=(torch.randn(2, 16),))
    assert scripted.probe(ex.model) is None  # submodules of a ScriptModule take no hooks


def test_pair_scopes_follows_tf_unique_names():
    # layers dense, dense_1, dense_1_1, dense_2 traced by Keras 3: TF's unique scope names
    scopes = ["dense_1", "dense_1_2", "dense_1_1_2", "dense_2_1"]
    layers = ["dense", "dense_1", "dense_1_1", "dense_2"]
    assert pair_scopes(scopes, layers) == {"dense_1": "dense", "dense_1_2": "dense_1", "dense_1_1_2": "dense_1_1",
                                           "dense_2_1": "dense_2"}
    assert pair_scopes(["d_1", "e"], ["d", "e"]) == {"d_1": "d", "e": "e"}


def test_checkpoint_inputs_skip_unseen_tensors():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Neg", ["a"], ["b"], name="n"),
             helper.make_node("Add", ["b", "w"], ["c"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    cps = ScopedGraph(helper.make_model(graph)).checkpoints({"a": "first", "c": "last"})
    assert [(c.tensor, c.inputs, c.source) for c in cps] == [("a", ("x",), "first"), ("c", ("a",), "last")]
