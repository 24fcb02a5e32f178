"""A detector-like PyTorch model whose post-processing depends on its data (boolean indexing -> NonZero, then
``torch.unique``) converted with ``split_tail=True`` (``--split-tail``): where a backend cannot take part of the model,
the graph is cut before the first node its own check refuses. The backend's artifact holds the head and
``OUTPUT.tail.onnx`` beside it the rest, for onnxruntime; the two are validated as one pipeline against PyTorch.

    python examples/split_tail.py [OUT_DIR]

Or one backend from the command line: ``onnxbridge convert examples/split_tail.py:detector -o det.dlc --split-tail``.
The DLC (QNN) and Core ML cut before NonZero or Unique; OpenVINO takes the whole model, so it gets it whole and no
tail is written. Needs ``pip install 'onnxbridge[coreml,qnn,openvino]'`` (a backend that is not installed is
skipped).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

import onnxbridge


class TinyDetector(torch.nn.Module):
    """A conv "score map", the cells above a threshold, and the distinct scores among them. The weights and the
    sample are small integers, so every backend computes the scores exactly (fp16 too) and the threshold picks
    the same cells everywhere."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)
        weights = torch.randint(-1, 2, self.conv.weight.shape, generator=torch.Generator().manual_seed(0))
        self.conv.weight.data = weights.float()

    def forward(self, x):
        scores = torch.relu(self.conv(x)).sum(1).flatten()
        picked = scores[scores > 2.5]
        return scores, picked, torch.unique(picked)


def detector():
    """The factory ``onnxbridge convert examples/split_tail.py:detector`` loads: the model and its sample."""
    model = TinyDetector().eval()
    return model, (torch.randint(-2, 3, (1, 3, 8, 8), generator=torch.Generator().manual_seed(1)).float(),)


BACKENDS = {"dlc": ("onnxruntime_qnn", ".dlc"), "coreml": ("coremltools", ".mlpackage"),
            "openvino": ("openvino", ".xml")}


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, sample = detector()
    failed = 0
    for to, (module, suffix) in BACKENDS.items():
        if importlib.util.find_spec(module) is None:
            print(f"{to}: skipped ({module} is not installed)")
            continue
        path = out / f"detector{suffix}"
        result = onnxbridge.convert(model, sample, output=path, opset=17, split_tail=True,
                                    output_names=["scores", "picked", "labels"], report=out / f"detector_{to}.json")
        split = result.report["split"]
        if split["at"] is None:
            print(f"{to}: {split['runs']}")
        else:
            at = split["at"]
            print(f"{to}: cut before node '{at['node']}' ({at['op']}): {at['reason']}")
            print(f"{'':6s}the tail {split['tail']} holds {split['tail_nodes']} node(s) "
                  f"({', '.join(split['tail_ops'])}) and takes {', '.join(split['tensors'])} from the head")
        for hop in result.report["hops"]:
            print(f"{'':6s}{hop['kind']:9s} {hop['from']} -> {hop['to']}: {hop['status']}")
        print(f"{to}: {result.report['status']}")
        failed += result.report["status"] != "passed"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
