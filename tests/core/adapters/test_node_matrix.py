"""Zero silent mismatches: the onnx node cases of the ops the adapters issue lists, moved to every opset
from 7 to onnxruntime's ceiling. Each move either reproduces the stored outputs or is refused clearly."""
from __future__ import annotations

import pytest

from onnxbridge.adapters import adapt
from tests.core.adapters.node_cases import FP16_TOL, ORT_MAX, opset_of, outcome, usable_cases, usable_fp16_cases

OPS = ("squeeze", "unsqueeze", "reduce_sum", "reduce_mean", "slice", "top_k", "gather", "concat", "reshape",
       "transpose", "matmul", "gemm", "conv", "maxpool", "averagepool", "globalaveragepool", "batchnorm",
       "dropout", "cast", "where", "expand", "pad", "edge_pad", "reflect_pad", "constant_pad", "softmax",
       "logsoftmax", "hardmax", "resize", "upsample", "clip", "split", "layer_normalization", "gelu",
       "hardswish", "argmax", "shape")


def _selected(cases=None):
    return [c for c in (cases or usable_cases()) if any(c.name.startswith(f"test_{op}") for op in OPS)]


@pytest.mark.parametrize("target", range(7, ORT_MAX + 1))
@pytest.mark.fast_cases("7", "23")
def test_every_move_is_right_or_refused(target):
    import onnx

    if target > onnx.defs.onnx_opset_version():
        pytest.skip(f"onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()}")
    cases = _selected()
    assert len(cases) > 100
    results = {c.name: outcome(adapt, c.model, c.data_sets, target) for c in cases}
    bad = {name: r for name, r in results.items() if r in ("WRONG", "broken")}
    assert not bad, bad
    moved = [c for c in cases if opset_of(c.model) != target]
    passed = sum(results[c.name] == "passed" for c in moved)
    assert passed > len(moved) // 3, (passed, len(moved))  # most moves succeed; refusals are the exception


@pytest.mark.parametrize("target", range(7, ORT_MAX + 1))
@pytest.mark.fast_cases("23")
def test_every_fp16_move_is_right_or_refused(target):
    """The same moves with the cases rewritten to compute in fp16 (expected: onnxruntime at the case's opset)."""
    import onnx

    if target > onnx.defs.onnx_opset_version():
        pytest.skip(f"onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()}")
    cases = _selected(usable_fp16_cases())
    assert len(cases) > 60
    results = {c.name: outcome(adapt, c.model, c.data_sets, target, *FP16_TOL) for c in cases}
    bad = {name: r for name, r in results.items() if r in ("WRONG", "broken")}
    assert not bad, bad
    moved = [c for c in cases if opset_of(c.model) != target]
    assert sum(results[c.name] == "passed" for c in moved) > len(moved) // 3
