"""The Core ML legalization applied before lowering, on the model with ``--input-shape``'s sizes in place."""
from __future__ import annotations

from typing import TYPE_CHECKING

from onnxbridge.backends.coreml.inputs import MAX_RANK

if TYPE_CHECKING:
    import onnx


def legalize(model: "onnx.ModelProto", input_shapes: dict | None = None) -> tuple["onnx.ModelProto", list[str]]:
    """``model`` with the Core ML legalization rules applied, and which fired on which node. ``input_shapes``
    (``--input-shape``) fix flexible input dims first, as the build does, so rules needing static shapes see them."""
    from onnxbridge.backends.coreml.legalize_rank import high_rank_chain_rule, high_rank_shape_rule
    from onnxbridge.legalize import apply
    from onnxbridge.legalize.rank import max_rank_rule

    # Shapes of 6-D tensors from their Reshape's target first (they would keep those tensors), then the core rule
    # where the 6-D sizes are known, then the chain rule for the rest (sizes computed at run time)
    return apply(_with_input_shapes(model, input_shapes or {}), [
        high_rank_shape_rule(MAX_RANK), max_rank_rule(MAX_RANK), high_rank_chain_rule(MAX_RANK)])


def _with_input_shapes(model: "onnx.ModelProto", input_shapes: dict) -> "onnx.ModelProto":
    """A copy of ``model`` whose flexible input dims have the sizes ``input_shapes`` gives (inputs of another rank
    are left for ``program`` to refuse), without the value_info naming the old dims; ``model`` when none is given."""
    import onnx

    if not input_shapes:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        dims, given = vi.type.tensor_type.shape.dim, input_shapes.get(vi.name)
        if given is None or len(given) != len(dims):
            continue
        for dim, size in zip(dims, given):
            if not dim.dim_value > 0 and isinstance(size, int) and size > 0:
                dim.dim_value = size  # clears dim_param (a oneof)
    del out.graph.value_info[:]
    return out
