"""``--split-tail`` on a real detector: torchvision's SSDlite (random weights, trained-like BatchNorm statistics, three
classes, 20 detections) to Core ML and to a DLC, the backend's artifact and the tail validated as one pipeline
against PyTorch. Where each backend stops (TopK with a run-time K, NonZero...) is its own check's answer: the test
asserts the cut is at a node the backend refused, not which one."""
from __future__ import annotations

import importlib.util

import onnx
import pytest

import onnxbridge
from onnxbridge.split import tail_path
from tests.helpers.extras import requires


def _has_ops() -> bool:
    return True


def ssdlite():
    """SSDlite320-MobileNetV3 on a 64x64 image (resized to 320 inside), returning boxes, scores and labels."""
    import torch

    from tests.helpers.zoo import calibrate_batchnorm, register_torchvision_ops

    register_torchvision_ops()
    import torchvision.extension
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    torchvision.extension._has_ops = _has_ops  # the TorchScript exporter compiles it: a lambda does not compile

    class Detector(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(list(x))[0]
            return out["boxes"], out["scores"], out["labels"]

    torch.manual_seed(0)
    model = Detector(ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3,
                                                   detections_per_img=20, topk_candidates=20)).eval()
    calibrate_batchnorm(model, (torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(2)),))
    for p in model.parameters():
        p.requires_grad_(False)
    return model, (torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1)),)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [pytest.param(".mlpackage", marks=requires("torch", "coremltools")),
                                    pytest.param(".dlc", marks=requires("torch", "onnxruntime_qnn"))])
def test_ssdlite_runs_as_a_split_pipeline(tmp_path, suffix):
    if importlib.util.find_spec("torchvision") is None:  # not imported by a mark: it needs its operators first
        pytest.skip("torchvision is not installed")
    import numpy as np

    out = tmp_path / f"ssdlite{suffix}"
    model, sample = ssdlite()
    np.savez(tmp_path / "x.npz", x=sample[0].numpy())  # one batch: the HTP simulator takes ~15 s a run here
    rep = onnxbridge.convert(model, sample, output=out, split_tail=True, exporter="torchscript",
                             inputs=tmp_path / "x.npz", output_names=["boxes", "scores", "labels"],
                             report=tmp_path / "r.json").report
    split = rep["split"]
    assert split["at"]["node"] in split["refused"] and split["at"]["node"] in split["at"]["reason"]
    tail = onnx.load(tail_path(out))
    assert split["at"]["node"] in {n.name for n in tail.graph.node}
    assert [o.name for o in tail.graph.output] == ["boxes", "scores", "labels"]
    source, head, pipeline = rep["hops"]
    assert (source["kind"], head["kind"], pipeline["kind"]) == ("source", "backend", "pipeline")
    assert source["status"] == "passed" and pipeline["samples"] >= 1
    assert [o["name"] for o in pipeline["outputs"]] == ["boxes", "scores", "labels"]
    if suffix == ".mlpackage":  # Core ML computes in fp32 here: the pipeline gives PyTorch's detections
        assert head["status"] == pipeline["status"] == rep["status"] == "passed", rep["hops"]
    elif pipeline["status"] == "failed":  # the HTP computes in fp16: a failure must be fp16's own, not the split's
        failed = [o for o in pipeline["outputs"] if not o["passed"]]
        assert all("fp16 cannot hold this output" in o.get("failed_check", "") or o["kind"] == "exact"
                   for o in failed), failed
