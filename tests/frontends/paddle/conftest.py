"""Paddle test models, built in code once per session (this folder runs in a process of its own)."""
from __future__ import annotations

import os
import warnings

import pytest

os.environ.setdefault("GLOG_minloglevel", "2")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    paddle = pytest.importorskip("paddle")
pytest.importorskip("paddle2onnx")


class ConvNet(paddle.nn.Layer):
    """conv + batch norm + pooling + linear: eval vs training mode matters through BatchNorm."""

    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 8, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(8)
        self.fc = paddle.nn.Linear(8, 5)

    def forward(self, image):
        y = paddle.nn.functional.relu(self.bn(self.conv(image)))
        return paddle.nn.functional.softmax(self.fc(y.mean(axis=[2, 3])))


class TwoInputs(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc = paddle.nn.Linear(4, 3)

    def forward(self, a, b):
        return self.fc(a) + paddle.sum(b, axis=1, keepdim=True), paddle.tanh(a) * 2.0


def conv_net() -> ConvNet:
    paddle.seed(0)
    net = ConvNet()
    net.bn._mean.set_value(paddle.linspace(-0.5, 0.5, 8))
    net.bn._variance.set_value(paddle.linspace(0.5, 2.0, 8))
    return net


def save_legacy_mlp(prefix: str) -> None:
    """A legacy (pre-PIR) inference program: .pdmodel + .pdiparams."""
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [-1, 6], "float32")
                h = paddle.static.nn.fc(x, 5, activation="relu")
                y = paddle.nn.functional.softmax(paddle.static.nn.fc(h, 3))
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            paddle.static.save_inference_model(prefix, [x], [y], exe, program=main)
    finally:
        paddle.disable_static()


@pytest.fixture(scope="session")
def net():
    return conv_net()


@pytest.fixture(scope="session")
def paddle_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("paddle_models")
    net = conv_net()
    spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", name="image")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paddle.jit.save(net, str(root / "pir" / "convnet"), input_spec=spec)
        paddle.jit.save(TwoInputs(), str(root / "two" / "two"),
                        input_spec=[paddle.static.InputSpec([None, 4], "float32", "a"),
                                    paddle.static.InputSpec([None, 5], "float32", "b")])
    save_legacy_mlp(str(root / "legacy" / "mlp"))
    (root / "lonely").mkdir()
    (root / "lonely" / "model.pdmodel").write_bytes((root / "legacy" / "mlp.pdmodel").read_bytes())
    (root / "corrupt").mkdir()
    (root / "corrupt" / "model.json").write_text('{"not": "a program"}')
    (root / "corrupt" / "model.pdiparams").write_bytes(b"\x00" * 16)
    return root
