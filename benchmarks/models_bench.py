"""Benchmark-only model factories, loadable as ``onnxbridge convert benchmarks/models_bench.py:wide_mlp``.

Each factory returns ``(model, sample_inputs)``; weights are seeded, nothing is downloaded.
"""
from __future__ import annotations

import torch
from torch import nn

WIDTH = 2048  # 6 x Linear(2048, 2048) in fp32 = ~100.7 MB of weights
DEPTH = 6


def wide_mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A deep stack of wide Linear+ReLU layers: ~100 MB of weights, so weight handling dominates."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    return model.eval(), (torch.randn(8, WIDTH),)
