"""Paddle test models, built in code once per session (this folder runs in a process of its own)."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from tests.conftest import missing_modules
from tests.helpers.extras import require

os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("FLAGS_call_stack_level", "0")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    paddle = require("paddle")
if missing_modules("paddle2onnx"):
    pytest.skip("paddle2onnx not installed here nor in an environment of its own", allow_module_level=True)


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
    """Two inputs, two outputs."""

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


class Singular(paddle.nn.Layer):
    """svd: an operator paddle2onnx 2.1 cannot convert (it aborts the process)."""

    def forward(self, x):
        return paddle.linalg.svd(x)[1]


def save_static_mlp(prefix: str) -> None:
    """A static-graph inference program (save_inference_model, the pre-PIR way): .pdmodel + .pdiparams."""
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


IMAGE = paddle.static.InputSpec([None, 3, 16, 16], "float32", name="image")


@pytest.fixture(scope="session")
def paddle_files(tmp_path_factory):
    """jit.save'd models: PIR .json, legacy .pdmodel (OldIrGuard), a static-graph .pdmodel; and bad ones."""
    root = tmp_path_factory.mktemp("paddle_models")
    net = conv_net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paddle.jit.save(net, str(root / "pir" / "convnet"), input_spec=[IMAGE])
        with paddle.pir_utils.OldIrGuard():  # Paddle 3 still writes .pdmodel under the old IR
            paddle.jit.save(net, str(root / "legacy" / "convnet"), input_spec=[IMAGE])
        paddle.jit.save(TwoInputs(), str(root / "two" / "two"),
                        input_spec=[paddle.static.InputSpec([None, 4], "float32", "a"),
                                    paddle.static.InputSpec([None, 5], "float32", "b")])
    save_static_mlp(str(root / "static" / "mlp"))
    pir, legacy = root / "pir" / "convnet", root / "legacy" / "convnet"
    for folder, files in {
        "lonely": {"model.pdmodel": Path(f"{legacy}.pdmodel").read_bytes()},
        "lonely_pir": {"model.json": Path(f"{pir}.json").read_bytes()},
        "corrupt": {"model.json": b'{"not": "a program"}', "model.pdiparams": b"\x00" * 16},
        "corrupt_pdmodel": {"model.pdmodel": os.urandom(300), "model.pdiparams": Path(f"{legacy}.pdiparams").read_bytes()},
        "truncated": {"model.pdmodel": Path(f"{legacy}.pdmodel").read_bytes(),
                      "model.pdiparams": Path(f"{legacy}.pdiparams").read_bytes()[:200]},
        "two_models": {f"{stem}{suffix}": Path(f"{pir}{suffix}").read_bytes()
                       for stem in ("a", "b") for suffix in (".json", ".pdiparams")},
        "config": {"config.json": b'{"batch_size": 8}'},
    }.items():
        (root / folder).mkdir()
        for name, data in files.items():
            (root / folder / name).write_bytes(data)
    return root
