"""Integer and boolean tensors through Core ML lowerings whose MIL ops take floats (pad, depth_to_space, nearest
upsample, relu) or no bools (gathers, scatters): one model of the mask-building
and data-movement patterns exporters emit (an attention mask cast to bool, flattened and gathered by run-time
indices; scatters at negative run-time indices), on int64 values beyond 2^24 (where a cast through fp32 would round)
and bools, compared exactly with onnxruntime, with static shapes and with a flexible sequence; and a transformers
model with its attention mask (slow)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.backends.coreml.hop import passed_coreml_hop
from tests.helpers.extras import require, requires

require("coremltools")

F, I64, I32, I8, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.INT8, TensorProto.BOOL
BIG = [2 ** 30 + 7, -(2 ** 29) - 3]  # not representable in fp32 (nor in fp16)


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _moves(seq) -> onnx.ModelProto:
    """x (float, [2, seq]) gives a bool mask and per-row run-time indices (ArgMax, made negative by the run-time
    sequence length); v (int64, [2, seq]) and img (int32, [1, 4, 2, 2]) carry large values, small (int8, as
    onnxruntime's DepthToSpace takes no wider integers) negative ones, whose three pieces are all non-zero."""
    n = helper.make_node
    nodes = [
        n("Greater", ["x", "zero"], ["m"]),
        n("ArgMax", ["x"], ["j"], axis=1),  # [2, 1] in [0, seq)
        n("Shape", ["x"], ["shape"]), n("Gather", ["shape", "one"], ["len"]),
        n("Sub", ["j", "len"], ["jn"]),  # the same positions, negative
        n("Reshape", ["jn", "flat"], ["jf"]),
        n("Gather", ["m", "jf"], ["gather"], axis=1),
        n("GatherElements", ["m", "j"], ["gather_elements"], axis=1),
        n("Concat", ["rows", "jn"], ["nd"], axis=1),
        n("GatherND", ["m", "nd"], ["gather_nd"]),
        n("Not", ["gather_elements"], ["flipped"]),
        n("ScatterElements", ["m", "jn", "flipped"], ["scatter_elements"], axis=1),
        n("ScatterND", ["v", "nd", "big"], ["scatter_nd"]),
        n("Not", ["gather_nd"], ["flipped_nd"]),
        n("ScatterND", ["m", "nd", "flipped_nd"], ["scatter_nd_bool"]),
        n("Flatten", ["m"], ["flatten_last"], axis=2),  # axis == rank: [2 * seq, 1]
        n("Flatten", ["v"], ["flatten_first"], axis=0),
        n("Unsqueeze", ["m", "two"], ["m_col"]), n("Unsqueeze", ["m", "one_axis"], ["m_row"]),
        n("And", ["m_col", "m_row"], ["pairs"]), n("Transpose", ["pairs"], ["pairs_t"], perm=[1, 0, 2]),
        n("Flatten", ["pairs_t"], ["flatten_both"], axis=1),  # [seq, 2 * seq]: flexible on both sides
        n("Pad", ["v", "pads", "fill"], ["pad"]),
        n("Pad", ["v", "pads"], ["pad_edge"], mode="edge"),
        n("Pad", ["m", "pads"], ["pad_bool"]),
        n("DepthToSpace", ["small"], ["depth_to_space"], blocksize=2),
        n("DepthToSpace", ["small"], ["pixel_shuffle"], blocksize=2, mode="CRD"),
        n("SpaceToDepth", ["depth_to_space"], ["space_to_depth"], blocksize=2),
        n("Resize", ["img", "", "scales"], ["resize"], mode="nearest"),
        n("Cast", ["v"], ["v32"], to=I32), n("Relu", ["v32"], ["relu"]),
        n("Split", ["v"], ["split"], axis=1),
    ]
    inits = {"zero": np.array(0, np.float32), "one": np.array(1, np.int64), "two": _i64(2), "one_axis": _i64(1),
             "flat": _i64(-1), "rows": _i64(0, 1).reshape(2, 1), "big": _i64(*BIG),
             "pads": _i64(0, 1, 0, 2), "fill": np.array(-123456789, np.int64),
             "scales": np.array([1, 1, 2, 2], np.float32)}
    bools = ("m", "gather", "gather_elements", "gather_nd", "scatter_elements", "scatter_nd_bool", "flatten_last",
             "flatten_both", "pad_bool")
    outputs = [o for node in nodes for o in node.output
               if o not in ("j", "shape", "len", "jn", "jf", "nd", "flipped", "flipped_nd", "v32", "m", "m_col", "m_row",
                            "pairs", "pairs_t")]
    types = {o: B if o in bools else I32 if o in ("relu", "resize") else I8 if "depth" in o or o == "pixel_shuffle"
             else I64 for o in outputs}
    graph = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("x", F, [2, seq]),
                                               helper.make_tensor_value_info("v", I64, [2, seq]),
                                               helper.make_tensor_value_info("img", I32, [1, 4, 2, 2]),
                                               helper.make_tensor_value_info("small", I8, [1, 4, 2, 2])],
                              [helper.make_tensor_value_info(o, types[o], None) for o in outputs],
                              [numpy_helper.from_array(a, k) for k, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(seq: int) -> dict:
    rng = np.random.default_rng(0)
    big = rng.integers(-(2 ** 31), 2 ** 31, (2, seq))
    return {"x": rng.standard_normal((2, seq)).astype(np.float32), "v": big.astype(np.int64),
            "img": rng.integers(-(2 ** 31), 2 ** 31, (1, 4, 2, 2)).astype(np.int32),
            "small": rng.integers(-128, 128, (1, 4, 2, 2)).astype(np.int8)}


@pytest.mark.parametrize("flexible", [False, True], ids=["fixed", "flexible"])
@pytest.mark.fast_cases("flexible")
def test_integer_and_boolean_moves_are_exact(flexible, tmp_path):
    """Every output equal to onnxruntime's (integer and bool outputs are compared exactly: a value rounded
    through fp32 fails); flexible: validated at 5 and grown to 6, and at 3 and 9."""
    feeds = _feeds(5)
    model = _moves("seq" if flexible else 5)
    rep = passed_coreml_hop(model, tmp_path, inputs=feeds,
                            **({"dynamic": ["x:1:seq:3..9", "v:1:seq:3..9"]} if flexible else {}))
    coreml = rep["hops"][-1]
    assert {o["name"] for o in coreml["outputs"]} >= {"scatter_nd", "pad", "depth_to_space", "resize", "gather"}
    assert {o["kind"] for o in coreml["outputs"]} == {"exact"}
    assert bool(rep["artifact"]["backend"]["flexible_inputs"]) == flexible


@pytest.mark.slow
@requires("torch", "transformers")
def test_transformers_attention_mask_on_a_flexible_sequence(tmp_path):
    """A transformers encoder given its attention mask (padding at the end) builds the mask as exported models do
    (the mask cast to bool, flattened, gathered at run-time positions): it converts with a flexible sequence and
    passes at 16, 17, 2 and 32 tokens."""
    import torch

    import onnxbridge
    from tests.helpers import zoo

    zoo.register_torchvision_ops()
    wrapped, (ids,) = zoo.model("distilbert")

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = wrapped.inner

        def forward(self, x, mask):
            return self.inner(input_ids=x, attention_mask=mask, return_dict=True)["last_hidden_state"]

    mask = torch.ones_like(ids)
    mask[:, -3:] = 0
    rep = onnxbridge.convert(Masked().eval(), (ids, mask), output=tmp_path / "m.mlpackage", to="coreml", opset=17,
                             dynamic=["x:1:seq:2..32", "mask:1:seq:2..32"]).report
    assert rep["status"] == "passed", rep["hops"][-1]["errors"]
    assert [s["x"][1] for s in rep["inputs"]["samples"]] == [16, 17, 2, 32]
