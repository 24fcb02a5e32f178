"""The Paddle source side of the source -> ONNX hop: ops matched to the tensors of their paddle2onnx export, and
localization naming the op that differs. The models are defined in this file: paddle.jit.save reads forward's source
code."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tests.frontends.paddle.conftest import paddle
from tests.helpers.source_side import all_agree, planted


def paddle_check() -> dict:
    from onnxbridge.spine import load_source

    class Block(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(8, 8)
            self.ln = paddle.nn.LayerNorm(8)

        def forward(self, x):
            return x + self.ln(paddle.nn.functional.gelu(self.fc(x)))

    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.blocks = paddle.nn.LayerList([Block() for _ in range(5)])
            self.head = paddle.nn.Linear(8, 4)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return paddle.nn.functional.softmax(self.head(x))

    paddle.seed(0)
    net = Net()
    src = load_source(net, sample_inputs=(np.random.default_rng(0).standard_normal((3, 8)).astype("float32"),))
    with tempfile.TemporaryDirectory() as tmp:
        ex = src.export(Path(tmp), opset=None)
    sides = src.probe(ex.model)
    return {"all": all_agree(src, sides, ex.model),
            "planted": planted(src, sides, ex.model, net.blocks[2].fc.weight.name)}


def test_paddle_ops_match_and_localize():
    found = paddle_check()
    assert found["all"]["worst"] < 1e-5 and found["all"]["checkpoints"] >= 25
    assert found["all"]["sources"][0] == "blocks.0.fc: pd_op.matmul.0"
    assert found["all"]["sources"][-1] == "pd_op.softmax (output 0)"
    first = found["planted"]["first"]
    assert first["source"] == "blocks.2.fc: pd_op.matmul.2" and first["inputs_ok"], first
    assert found["planted"]["clean"] is None
