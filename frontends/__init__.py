"""Frontends: one per source framework, imported only when used.

A frontend module defines ``accepts(source) -> bool`` (cheap: no framework import) and
``load(source, **options) -> SourceModel`` (see ``base.py``).
"""
from __future__ import annotations

from onnxbridge.registry import Plugin, Registry

FRONTENDS = Registry("frontend", [
    Plugin("torch", "onnxbridge.frontends.pytorch", requires=("torch", "onnxscript"), extra="torch",
           description="PyTorch nn.Module, factory module:function, torch.export .pt2, TorchScript .pt"),
    Plugin("onnx", "onnxbridge.frontends.onnxfile", requires=("onnx", "onnxruntime"),
           description="an existing ONNX model (re-target opset, validate against it)"),
])
