"""Symbolics the TorchScript exporter lacks below some opset, registered only during an export.

``aten::scaled_dot_product_attention`` is registered by torch from opset 14 because its causal
branch needs Trilu; the non-causal branch uses only opset-13 ops (MatMul, Softmax, Where, ...), so
transformer blocks can be exported at opset 13 natively.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

_SDPA = "aten::scaled_dot_product_attention"


def _sdpa_opset13(g, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
    from torch.onnx._internal.torchscript_exporter import symbolic_helper, symbolic_opset14

    if symbolic_helper._maybe_get_const(is_causal, "b"):
        raise torch.onnx.errors.SymbolicValueError(
            "causal scaled_dot_product_attention needs Trilu (opset 14); export at opset >= 14", query)
    return symbolic_opset14.scaled_dot_product_attention(g, query, key, value, attn_mask, dropout_p, is_causal,
                                                         scale, enable_gqa)


@contextlib.contextmanager
def extra_symbolics(opset: int | None) -> Iterator[None]:
    """Register our symbolics for the export at ``opset`` and remove them afterwards."""
    added = []
    if opset is not None and opset == 13:
        with contextlib.suppress(Exception):
            torch.onnx.register_custom_op_symbolic(_SDPA, _sdpa_opset13, 13)
            added.append((_SDPA, 13))
    try:
        yield
    finally:
        for name, version in added:
            with contextlib.suppress(Exception):
                torch.onnx.unregister_custom_op_symbolic(name, version)
