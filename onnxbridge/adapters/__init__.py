"""Move an ONNX model to another default-domain opset.

This first version drives ``onnx.version_converter`` one model at a time and guards it: model-local
functions are inlined first (the converter drops them), steps known to change numbers silently are
refused naming the node, converter failures name the blocking node, and ``ir_version`` is set for
the target. Nodes are never rewritten here beyond what the converter does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx

MIN_OPSET = 7


def default_opset(model: "onnx.ModelProto") -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def max_known_opset() -> int:
    import onnx.defs

    return onnx.defs.onnx_opset_version()


def _node_label(node) -> str:
    return f"'{node.name}' ({node.op_type})" if node.name else f"a {node.op_type} node"


def _tensor_dtypes(model: "onnx.ModelProto") -> dict[str, int]:
    g = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _ranks(model: "onnx.ModelProto") -> dict[str, int]:
    g = model.graph
    return {v.name: len(v.type.tensor_type.shape.dim) for v in [*g.input, *g.output, *g.value_info]
            if v.type.tensor_type.HasField("shape")}


def blockers(model: "onnx.ModelProto", opset: int) -> list[str]:
    """Nodes whose move to ``opset`` onnx.version_converter is known to get silently wrong."""
    import onnx
    from onnx import TensorProto

    src = default_opset(model)
    if src == opset:
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        inferred = model
    dtypes, ranks = _tensor_dtypes(inferred), _ranks(inferred)
    lo, hi = min(src, opset), max(src, opset)
    up = opset > src
    found = []
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        if up and lo <= 10 < hi and (op == "Upsample" or (op == "Resize" and src == 10)):
            found.append(f"{_node_label(node)}: moving Upsample/Resize-10 past opset 11 changes its coordinate "
                         "mode (onnx.version_converter keeps the new half_pixel default)")
        if up and op == "Hardmax" and lo <= 12 < hi:
            axis, rank = attrs.get("axis", 1), ranks.get(node.input[0])
            if rank is None or axis % rank != rank - 1:
                found.append(f"{_node_label(node)}: Hardmax axis {axis} is not the last axis; opset 13 "
                             "changed its semantics")
        if not up and op in ("Softmax", "LogSoftmax", "Hardmax") and lo <= 12 < hi:
            axis, rank = attrs.get("axis", -1), ranks.get(node.input[0])
            if rank is None or axis % rank != rank - 1:
                found.append(f"{_node_label(node)}: {op} over axis {axis} (not the last) cannot be expressed "
                             "below opset 13 by onnx.version_converter")
        if up and op in ("Clip", "Pad") and lo <= 10 < hi and dtypes.get(node.input[0]) != TensorProto.FLOAT:
            found.append(f"{_node_label(node)}: {op} on a non-float32 tensor gets float32 constants when "
                         "moved past opset 11")
    return found


def adapt(model: "onnx.ModelProto", opset: int) -> "onnx.ModelProto":
    """Return a copy of ``model`` at default-domain ``opset``; raise UnsupportedError naming the node."""
    import onnx
    import onnx.version_converter

    src = default_opset(model)
    if src == opset:
        return model
    newest = max_known_opset()
    if not MIN_OPSET <= opset <= newest:
        raise UnsupportedError(f"opset {opset} is outside what this onnx {onnx.__version__} knows "
                               f"({MIN_OPSET}..{newest})")
    if model.functions:
        import onnx.inliner

        model = onnx.inliner.inline_local_functions(model)
    found = blockers(model, opset)
    if found:
        raise UnsupportedError(f"cannot move opset {src} -> {opset} without changing numbers: {found[0]}"
                               + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""),
                               hint=f"export at opset {opset} directly, or keep opset {src}")
    try:
        out = onnx.version_converter.convert_version(model, opset)
    except Exception as exc:
        raise _explain(model, src, opset, exc) from None
    _restore_external(model, out)
    if default_opset(out) != opset:
        raise UnsupportedError(f"onnx.version_converter returned opset {default_opset(out)}, not {opset}")
    from onnxbridge.builder import set_ir_version

    set_ir_version(out)
    return out


def _restore_external(before: "onnx.ModelProto", after: "onnx.ModelProto") -> None:
    """Re-attach external data references the converter dropped (onnx 1.17 loses data_location)."""
    from onnx import TensorProto

    refs = {t.name: t for t in before.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    for t in after.graph.initializer:
        ref = refs.get(t.name)
        if ref is not None and t.data_location != TensorProto.EXTERNAL and not t.raw_data:
            del t.external_data[:]
            t.external_data.extend(ref.external_data)
            t.data_location = TensorProto.EXTERNAL


def _explain(model: "onnx.ModelProto", src: int, dst: int, exc: Exception) -> UnsupportedError:
    """Turn a converter error ('No Adapter From Version $14 for Add') into one that names the node."""
    import re

    msg = " ".join(str(exc).split())
    m = re.search(r"for (\w+)", msg)
    op = m.group(1) if m else None
    node = next((n for n in model.graph.node if n.op_type == op), None) if op else None
    where = f"node {_node_label(node)}" if node else (f"an {op} node" if op else "the model")
    return UnsupportedError(f"cannot move {where} from opset {src} to {dst}: {msg}",
                            hint=f"export at opset {dst} directly, or keep opset {src}")
