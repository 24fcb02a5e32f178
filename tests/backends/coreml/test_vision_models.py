"""A real vision architecture with a flexible image to Core ML, every hop passing: transformers' SegFormer (toy
sizes, random weights), whose decode head resizes each stage's features to the first stage's size, both known only
at run time. (Swin's padded window partitions, rank 6 with sizes computed at run time, are in ``test_rank``.)"""
from __future__ import annotations

import pytest

import onnxbridge
from tests.helpers.extras import requires


def _hf(cls: str, config: str, key: str, **cfg):
    import torch

    from tests.helpers.zoo import _hf as build

    torch.manual_seed(0)
    return build(cls, config, key, "pixel_values", **cfg)().eval(), (torch.randn(1, 3, 64, 64),)


def segformer():
    return _hf("SegformerForSemanticSegmentation", "SegformerConfig", "logits", num_encoder_blocks=2, depths=[1, 1],
               sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2], patch_sizes=[7, 3],
               strides=[4, 2], mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5)


@pytest.mark.slow
@requires("coremltools", "transformers")
def test_segformer_with_a_flexible_image(tmp_path):
    rep = onnxbridge.convert(f"{__file__}:segformer", to="coreml", output=tmp_path / "m.mlpackage", opset=17,
                             dynamic=["x:2:height:32..80", "x:3:width:32..80"]).report
    assert rep["status"] == "passed", [(h["to"], h["status"], h.get("errors")) for h in rep["hops"]]
    assert len({tuple(s["x"]) for s in rep["inputs"]["samples"]}) >= 3  # the range's ends validated too
