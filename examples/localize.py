"""Where the numbers broke: a conversion that fails validation, and the node (and torch module) that broke it.

A 12-block residual MLP whose block 7 computes values beyond fp16's range (65504) internally. In fp32 everything
agrees; converted with ``--precision fp16`` the export still checks out in fp32, the fp16 model's own hop (the fp16
file against the fp32 graph) fails, and ``--localize`` names the ONNX node of block 7 where the value left fp16's
range (the node the fp16 check named, confirmed against the fp32 graph's prefix models). The same model then goes to
Core ML in fp16, where the divergence is named on the ONNX -> Core ML hop (the MIL program on our host evaluator),
and an ONNX model with one weight changed is compared with the original (``validate a.onnx b.onnx``).

Run: python examples/localize.py [OUT_DIR]
Same from the command line:
    onnxbridge convert examples/localize.py:hot_chain -o chain.onnx --precision fp16 --localize
    onnxbridge validate a.onnx b.onnx        # --localize auto is validate's default
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

import onnxbridge


class Block(torch.nn.Module):
    """A residual block; with a large ``gain`` its values leave fp16's range inside it (and come back after)."""

    def __init__(self, width: int, gain: float = 1.0):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.fc(x) * self.gain) / self.gain


class Chain(torch.nn.Module):
    def __init__(self, blocks: int = 12, width: int = 16, hot: int | None = 7):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block(width, 3e4 if i == hot else 1.0) for i in range(blocks))
        if hot is not None:
            with torch.no_grad():
                self.blocks[hot].fc.bias.fill_(3.0)  # fc(x) * 3e4 > 65504 in block 7 only
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def hot_chain():
    """The factory for the command line: (model, sample inputs)."""
    return Chain().eval(), (torch.randn(2, 16, generator=torch.Generator().manual_seed(1)),)


def main(out: Path) -> dict:
    model, sample = hot_chain()
    found = {}

    result = onnxbridge.convert(model, sample, output=out / "chain16.onnx", precision="fp16", localize=True,
                                report=out / "torch_fp16.json", renderers={"html": out / "torch_fp16.html"})
    hop = next(h for h in result.report["hops"] if h["to"].endswith(":fp16"))
    found["onnx -> onnx fp16"] = hop["localization"]["first_divergent"]
    print(f"ONNX -> ONNX fp16: {hop['status']}; {onnxbridge.report.localization_summary(hop)}")

    result = onnxbridge.convert(model, sample, to="coreml", output=out / "chain16.mlpackage", precision="fp16",
                                localize=True, report=out / "coreml_fp16.json")
    hop = next(h for h in result.report["hops"] if h["to"] == "coreml")
    found["onnx -> coreml fp16"] = hop["localization"]["first_divergent"]
    print(f"ONNX -> Core ML fp16: {hop['status']}; {onnxbridge.report.localization_summary(hop)}")

    import onnx
    from onnx import numpy_helper

    onnxbridge.convert(Chain(hot=None).eval(), sample, output=out / "a.onnx")
    changed = onnx.load(out / "a.onnx")
    weights = [t for t in changed.graph.initializer if t.name.startswith("blocks.4") and "weight" in t.name]
    weights[0].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weights[0]) * 1.05, weights[0].name))
    onnx.save(changed, out / "b.onnx")
    rep = onnxbridge.validate(out / "a.onnx", out / "b.onnx", report=out / "onnx_pair.json")
    found["a.onnx -> b.onnx"] = rep["hops"][0]["localization"]["first_divergent"]
    print(f"a.onnx vs b.onnx: {rep['status']}; {onnxbridge.report.localization_summary(rep['hops'][0])}")
    return found


if __name__ == "__main__":
    found = main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="localize-")))
    expected = {"onnx -> onnx fp16": "mul_7", "onnx -> coreml fp16": "mul_7", "a.onnx -> b.onnx": "linear_4"}
    wrong = [hop for hop, name in expected.items() if not found[hop] or name not in str(found[hop].values())]
    sys.exit(f"localization did not name the planted node on: {', '.join(wrong)}" if wrong else 0)
