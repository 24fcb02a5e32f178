"""MaxPool, AveragePool, LpPool: attributes added over time (storage_order, ceil_mode, dilations,
count_include_pad) and the Indices output; going down they must be unused or default."""
from __future__ import annotations

from onnxbridge.adapters.registry import down
from onnxbridge.adapters.rewriter import drop_attr, drop_default, get_attr, refuse


def _no_ceil_mode(node):
    drop_default(node, "ceil_mode", 0, "output sizes rounded up")


def _no_dilations(node):
    dilations = get_attr(node, "dilations")
    if dilations is not None and any(d != 1 for d in dilations):
        refuse(f"dilations={list(dilations)}")
    drop_attr(node, "dilations")


@down("MaxPool", 8)
def maxpool_down_8(node, rw):
    """The Indices output and storage_order arrived in 8."""
    drop_default(node, "storage_order", 0, "column-major indices")
    if len(node.output) > 1 and node.output[1]:
        refuse("the Indices output")
    del node.output[1:]


@down("MaxPool", 10)
def maxpool_down_10(node, rw):
    """ceil_mode and dilations arrived in 10."""
    _no_ceil_mode(node)
    _no_dilations(node)


@down("AveragePool", 7)
def avgpool_down_7(node, rw):
    """count_include_pad arrived in 7."""
    drop_default(node, "count_include_pad", 0, "padding counted in the average")


@down("AveragePool", 10)
def avgpool_down_10(node, rw):
    """ceil_mode arrived in 10."""
    _no_ceil_mode(node)


@down("AveragePool", 19)
def avgpool_down_19(node, rw):
    """dilations arrived in 19."""
    _no_dilations(node)


@down("LpPool", 18)
def lppool_down_18(node, rw):
    """ceil_mode and dilations arrived in 18."""
    _no_ceil_mode(node)
    _no_dilations(node)
