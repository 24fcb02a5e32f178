"""Core ML lowerings transformer models need (rotary embeddings, causal masks, cumulative positions, run-time
shapes): each op in a small model converted to Core ML, its saved MIL program run by the host evaluator and
compared with onnxruntime, at fixed shapes and with a flexible sequence."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.backends.coreml.hop import passed_coreml_hop
from tests.helpers.extras import require, requires

require("coremltools")


def _model(nodes, inputs, outputs, typed=(), opset=17):
    """Inputs ``(name, shape[, elem_type])`` (a str dim is flexible), outputs ``name`` or ``(name, elem_type)``,
    ``typed`` initializers keep their dtype."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else TensorProto.FLOAT, i[1])
                     for i in inputs],
        [helper.make_tensor_value_info(*((o, TensorProto.FLOAT) if isinstance(o, str) else o), None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in typed])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _i64(*values):
    return np.array(values, np.int64)


def _trilu_nodes():
    return [helper.make_node("Trilu", ["x", f"k{i}"], [f"{'u' if up else 'l'}{i}"], upper=up)
            for up in (0, 1) for i in range(3)] + [helper.make_node("Trilu", ["x"], ["d"]),
                                                   helper.make_node("Trilu", ["r", "k0"], ["ru"]),
                                                   helper.make_node("Trilu", ["r", "k2"], ["rl"], upper=0)]


TRILU_KS = [("k0", np.array(-1, np.int64)), ("k1", np.array(0, np.int64)), ("k2", np.array(2, np.int64))]
TRILU_OUT = [f"{c}{i}" for c in "lu" for i in range(3)] + ["d", "ru", "rl"]

CASES = {
    "cos_sin": _model([helper.make_node("Cos", ["x"], ["c"]), helper.make_node("Sin", ["x"], ["s"]),
                       helper.make_node("Mul", ["c", "s"], ["y"])], [("x", [2, "seq", 8])], ["y", "c"]),
    # exclusive / reverse on float and integer (int64 -> int32) values, negative axis
    "cumsum": _model([helper.make_node("CumSum", ["x", "ax"], ["a"]),
                      helper.make_node("CumSum", ["x", "ax"], ["e"], exclusive=1),
                      helper.make_node("CumSum", ["x", "axn"], ["r"], reverse=1),
                      helper.make_node("CumSum", ["x", "axn"], ["er"], exclusive=1, reverse=1),
                      helper.make_node("CumSum", ["m", "ax"], ["pos"])],
                     [("x", [2, "seq", 3]), ("m", [2, "seq"], TensorProto.INT64)],
                     ["a", "e", "r", "er", ("pos", TensorProto.INT64)], [("ax", _i64(1)), ("axn", _i64(-1))]),
    # constant indices with negatives, run-time int64 indices (negatives fixed at run time), fewer rows than x
    "gather_elements": _model([helper.make_node("GatherElements", ["x", "ci"], ["a"], axis=-1),
                               helper.make_node("GatherElements", ["x", "ri"], ["b"], axis=1),
                               helper.make_node("GatherElements", ["x", "ci2"], ["c"], axis=0)],
                              [("x", [3, 4]), ("ri", [3, 2], TensorProto.INT64)], ["a", "b", "c"],
                              [("ci", _i64([0, -1, 2], [3, -4, 1], [1, 1, -2])), ("ci2", _i64([2, -3, 0]))]),
    # NaN from sqrt of negatives: is_nan as x != x, masked out with Where
    "isnan_where": _model([helper.make_node("Sqrt", ["x"], ["s"]), helper.make_node("IsNaN", ["s"], ["n"]),
                           helper.make_node("Not", ["n"], ["ok"]), helper.make_node("Equal", ["n", "ok"], ["never"]),
                           helper.make_node("Where", ["n", "zero", "s"], ["y"])],
                          [("x", [2, "seq", 5])], ["y", ("n", TensorProto.BOOL), ("never", TensorProto.BOOL)],
                          [("zero", np.array(0.0, np.float32))]),
    # Expand to another input's (flexible) shape, bidirectionally broadcast, of floats and booleans
    "expand": _model([helper.make_node("Shape", ["y"], ["s"]), helper.make_node("Expand", ["x", "s"], ["e"]),
                      helper.make_node("Greater", ["x", "zero"], ["pos"]),
                      helper.make_node("Expand", ["pos", "s"], ["b"])],
                     [("x", [2, "seq", 1]), ("y", ["seq", 3])], ["e", ("b", TensorProto.BOOL)],
                     [("zero", np.array(0.0, np.float32))]),
    # square and rectangular (rows flexible), upper and lower, k below, on and above the diagonal
    "trilu": _model(_trilu_nodes(), [("x", [2, "seq", "seq"]), ("r", ["seq", 3])], TRILU_OUT, TRILU_KS, opset=14),
}
RNG = np.random.default_rng(0)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# name -> validation inputs for a sequence of ``n``, and the model's flexible sequence (None: static shapes)
FEEDS = {"cos_sin": lambda n: {"x": _x(2, n, 8) * 4},
         "cumsum": lambda n: {"x": _x(2, n, 3), "m": RNG.integers(0, 2, (2, n))},
         "gather_elements": lambda n: {"x": _x(3, 4), "ri": RNG.integers(-4, 4, (3, 2))},
         "isnan_where": lambda n: {"x": _x(2, n, 5)},
         "expand": lambda n: {"x": _x(2, n, 1), "y": _x(n, 3)},
         "trilu": lambda n: {"x": _x(2, n, n), "r": _x(n, 3)}}


def _convert(src: Path, tmp_path: Path, **kw) -> dict:
    return passed_coreml_hop(src, tmp_path, **kw)


def _fixed(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """``model`` with every input's dims set to its feed's shape."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in model.graph.input:
        for dim, size in zip(vi.type.tensor_type.shape.dim, feeds[vi.name].shape):
            dim.dim_value = size
    return model


@pytest.mark.parametrize("name,flexible", [(n, f) for n in sorted(CASES) for f in (False, True)
                                           if not (f and n == "gather_elements")])
@pytest.mark.fast_cases("expand-False")
def test_op_matches_onnxruntime(name, flexible, tmp_path):
    """Fixed: static input shapes; flexible: the sequence stays a Core ML RangeDim and the validation runs it
    at 5 and grown to 6."""
    feeds = FEEDS[name](5)
    src = tmp_path / f"{name}.onnx"
    onnx.save(CASES[name] if flexible else _fixed(CASES[name], feeds), src)
    rep = _convert(src, tmp_path, inputs=feeds)
    if flexible:
        assert rep["artifact"]["backend"]["flexible_inputs"] and len(rep["inputs"]["samples"]) == 2
    else:
        assert not rep["artifact"]["backend"]["flexible_inputs"] and len(rep["inputs"]["samples"]) == 1


def rotary_block():
    """A tiny causal self-attention block with rotary position embeddings: positions by cumsum of the
    (left-padded) attention mask, cos/sin of their frequencies, rotate_half, and a torch.triu causal mask of the
    run-time sequence length."""
    import torch
    from torch import nn

    class RotaryAttention(nn.Module):
        def __init__(self, dim: int = 16, heads: int = 2):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            half = torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim
            self.register_buffer("inv_freq", 1.0 / 10000 ** half)

        def rotate_half(self, t):
            a, b = t.chunk(2, dim=-1)
            return torch.cat([-b, a], dim=-1)

        def forward(self, x, mask):
            b, s, _ = x.shape
            positions = (mask.cumsum(dim=-1) - 1).masked_fill(mask == 0, 1)  # [b, s], as transformers does
            freqs = positions[..., None].float() * self.inv_freq  # [b, s, head_dim / 2]
            emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [b, 1, s, head_dim]
            cos, sin = emb.cos(), emb.sin()
            q, k, v = (t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
            q, k = q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin
            causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
            scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5 + causal
            y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, -1)
            return self.out(y)

    torch.manual_seed(0)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    return RotaryAttention().eval(), (torch.randn(2, 7, 16), mask)


@pytest.mark.parametrize("dynamic", [[], ["--dynamic", "x:1:seq", "--dynamic", "mask:1:seq"]],
                         ids=["fixed", "dynamic_sequence"])
@pytest.mark.slow
@requires("torch")
def test_rotary_attention_block(cli, tmp_path, dynamic):
    """torch -> ONNX -> Core ML in one command, every hop passing; with a dynamic sequence the Core ML input
    keeps it flexible and the validation also runs it grown (8)."""
    res = cli("convert", f"{__file__}:rotary_block", "--to", "coreml", "-o", tmp_path / "rope.mlpackage",
              "--opset", "17", "--report", tmp_path / "r.json", *dynamic)
    rep = json.loads((tmp_path / "r.json").read_text())
    assert res.exit_code == 0, (res.output, [h.get("errors") for h in rep.get("hops", [])])
    assert [(h["from"], h["to"], h["status"]) for h in rep["hops"]] == [("torch", "onnx", "passed"),
                                                                      ("onnx", "coreml", "passed")]
    ops = set(rep["artifact"]["backend"]["ops"])
    assert {"cos", "sin", "cumsum", "select"} <= ops
    if dynamic:
        assert rep["artifact"]["backend"]["flexible_inputs"]["x"][1] == [1, 1024]
        assert [s["x"][1] for s in rep["inputs"]["samples"]] == [7, 8] and "band_part" in ops


def run_time_shapes():
    """Sizes of a flexible sequence used as data: Range to it, ConstantOfShape of it, Expand to a shape torch
    computes with Where from a Shape chain (whose own Shape is taken), GatherElements with run-time indices,
    IsNaN."""
    import torch
    from torch import nn

    class RunTimeShapes(nn.Module):
        def forward(self, x):
            b, s, d = x.shape
            pos = torch.arange(s)
            causal = torch.zeros(s, s).masked_fill(pos[None, :] > pos[:, None], float("-inf")).expand(b, 1, s, s)
            reversed_rows = torch.gather(x, 1, (s - 1 - pos).view(1, s, 1).expand(b, s, d))
            y = ((x @ x.transpose(-1, -2))[:, None] + causal).softmax(-1) @ reversed_rows[:, None]
            return y.reshape(b, s, -1) + torch.isnan(x.log()).float()

    torch.manual_seed(0)
    return RunTimeShapes().eval(), (torch.randn(2, 5, 4),)


@pytest.mark.parametrize("dynamic", [[], ["--dynamic", "x:1"]], ids=["fixed", "dynamic_sequence"])
@pytest.mark.slow
@requires("torch")
def test_run_time_shapes(cli, tmp_path, dynamic):
    res = cli("convert", f"{__file__}:run_time_shapes", "--to", "coreml", "-o", tmp_path / "s.mlpackage",
              "--opset", "17", "--report", tmp_path / "r.json", *dynamic)
    rep = json.loads((tmp_path / "r.json").read_text())
    assert res.exit_code == 0, (res.output, [h.get("errors") for h in rep.get("hops", [])])
    assert [h["status"] for h in rep["hops"]] == ["passed", "passed"]
    ops = set(rep["artifact"]["backend"]["ops"])
    assert {"gather_along_axis", "not_equal"} <= ops
    if dynamic:
        assert {"range_1d", "fill", "shape"} <= ops and [s["x"][1] for s in rep["inputs"]["samples"]] == [5, 6]


def test_check_no_longer_lists_the_ops(cli, tmp_path):
    """Every op of the cases above, in one model: `onnxbridge check --targets coreml` finds nothing to refuse."""
    nodes, inputs, outputs, inits = [], {}, [], {}
    for name, case in CASES.items():
        model = onnx.ModelProto.FromString(case.SerializeToString())
        for node in model.graph.node:
            node.input[:] = [f"{name}_{i}" if i else i for i in node.input]
            node.output[:] = [f"{name}_{o}" for o in node.output]
            nodes.append(node)
        inputs.update({f"{name}_{vi.name}": vi for vi in model.graph.input})
        outputs += [f"{name}_{vi.name}" for vi in model.graph.output]
        inits.update({f"{name}_{t.name}": numpy_helper.to_array(t) for t in model.graph.initializer})
    for name, vi in inputs.items():
        vi.name = name
    graph = helper.make_graph(nodes, "all", list(inputs.values()),
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert {"Cos", "Sin", "CumSum", "GatherElements", "IsNaN", "Trilu"} <= {n.op_type for n in model.graph.node}
    onnx.save(model, tmp_path / "all.onnx")
    res = cli("check", tmp_path / "all.onnx", "--targets", "coreml")
    assert res.exit_code == 0 and "coreml: can convert" in res.output, res.output


def test_a_scalar_input_that_must_be_constant_is_refused_by_name(tmp_path):
    """A rank-0 graph input is a [1] Core ML input; where the op needs its value at build time (CumSum's axis) the
    node is a blocker, not a crash inside coremltools."""
    from onnx import TensorProto, helper

    node = helper.make_node("CumSum", ["x", "axis"], ["y"], name="cs")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                                            helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    src = tmp_path / "cumsum.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), src)
    from onnxbridge.spine import check_targets

    blockers = check_targets(str(src), ["coreml"])["blockers"]
    assert len(blockers) == 1 and blockers[0].startswith("coreml: node 'cs' (CumSum)") and "axis" in blockers[0]
