"""Convert Paddle models built here with the Python API and print what the reports say.

    python examples/convert_paddle.py [OUT_DIR]

A conv net (live, with an InputSpec) and the same net saved with paddle.jit.save, as PIR .json +
.pdiparams and as a legacy .pdmodel + .pdiparams, are converted at opset 13, 17 and 21 and validated
against Paddle at the sample batch and at batch + 1.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("FLAGS_call_stack_level", "0")
warnings.filterwarnings("ignore", message=".*ccache.*")

import paddle  # noqa: E402

import onnxbridge  # noqa: E402


class ConvNet(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 16, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(16)
        self.fc = paddle.nn.Linear(16, 10)

    def forward(self, image):
        y = paddle.nn.functional.relu(self.bn(self.conv(image)))
        return paddle.nn.functional.softmax(self.fc(y.mean(axis=[2, 3])))


def convnet():
    """The seeded ConvNet in eval mode and its InputSpec (batch dynamic): a factory (``convert_paddle.py:convnet``)."""
    paddle.seed(0)
    net = ConvNet()
    net.eval()  # saved for inference (the live layer's mode does not matter: its reference runs in eval mode)
    return net, [paddle.static.InputSpec([None, 3, 32, 32], "float32", name="image")]


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    net, spec = convnet()
    saved = out / "paddle_convnet" / "convnet"
    paddle.jit.save(net, str(saved), input_spec=spec)  # PIR: convnet.json
    with paddle.pir_utils.OldIrGuard():
        paddle.jit.save(net, str(saved), input_spec=spec)  # the old IR: convnet.pdmodel
    failed = 0
    for name, source, sample in (("Layer + InputSpec", net, spec), ("jit.save .json", saved.with_suffix(".json"), None),
                                 ("jit.save .pdmodel", saved.with_suffix(".pdmodel"), None)):
        for opset in (13, 17, 21):
            path = out / f"paddle_{name.split()[-1].strip('.')}_opset{opset}.onnx"
            result = onnxbridge.convert(source, sample, output=path, opset=opset, report=path.with_suffix(".json"))
            rep = result.report
            worst = max(o.get("max_abs", 0.0) for h in rep["hops"] for o in h["outputs"])
            print(f"{name:18s} opset {rep['artifact']['opset']:>2}  {rep['status']:7s} max abs diff {worst:.2e}  "
                  f"{rep['timings']['total_s']:.2f}s  -> {path}")
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
