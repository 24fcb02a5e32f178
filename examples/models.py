"""Small PyTorch models built in code, as factories for `onnxbridge convert examples/models.py:NAME`.

Each factory returns ``(model, sample_inputs)``; weights are seeded, nothing is downloaded.
"""
from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Conv + BatchNorm + ReLU, bilinear 2x upsampling, a 1x1 head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head = nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.up(torch.relu(self.bn(self.conv(x)))))


class LSTMTagger(nn.Module):
    """Two-layer LSTM over a sequence, a linear read-out per step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(12, 24, num_layers=2, batch_first=True)
        self.out = nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.out(y)


class EncoderBlock(nn.Module):
    """One pre-norm transformer encoder block (multi-head attention + MLP)."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def _seeded(model: nn.Module) -> nn.Module:
    """Non-trivial BatchNorm statistics, so a dropped or mis-folded norm shows in the numbers."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


def cnn():
    torch.manual_seed(0)
    return _seeded(SmallCNN()), (torch.randn(2, 3, 32, 32),)


def lstm():
    torch.manual_seed(0)
    return LSTMTagger().eval(), (torch.randn(2, 7, 12),)


def transformer():
    torch.manual_seed(0)
    return EncoderBlock().eval(), (torch.randn(2, 10, 32),)


def calibration_npz(path, sample: torch.Tensor, batches: int = 8, seed: int = 1):
    """``batches`` seeded random batches shaped like ``sample``, saved as ``x`` in ``path`` (.npz): stands in for
    the representative data int8 conversions calibrate on (``--calibration``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    np.savez(path, x=rng.standard_normal((batches, *sample.shape)).astype(np.float32))
    return path
