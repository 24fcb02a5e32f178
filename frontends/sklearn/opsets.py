"""Which opsets skl2onnx is asked for, and the ``ai.onnx.ml`` opset that goes with a main opset."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

ML = "ai.onnx.ml"
SKL2ONNX_MAX_ML = 3  # skl2onnx refuses to emit ai.onnx.ml above 3


def newest_main() -> int:
    """The newest main opset both skl2onnx (tested) and the installed onnx know: the default."""
    import onnx.defs
    from skl2onnx import get_latest_tested_opset_version

    return min(get_latest_tested_opset_version(), onnx.defs.onnx_opset_version())


def paired_ml(main: int) -> int:
    """The ai.onnx.ml opset the onnx release that introduced ``main`` shipped with (opset 17 -> 3, 21 -> 5)."""
    import onnx.helper

    pairs = [(row[2], row[3]) for row in onnx.helper.VERSION_TABLE]
    at_or_below = [ml for m, ml in pairs if m <= main]
    return max(at_or_below) if at_or_below else 1


def declare(model: onnx.ModelProto, main: int) -> tuple[int | None, str | None]:
    """One opset_import entry per domain (skl2onnx can repeat the main one); ai.onnx.ml raised to the
    opset paired with ``main``, or the newest below it where none of the model's ml ops is deprecated.

    Returns (the declared ml opset or None when the model has no ml op, a note when it is not the pair).
    """

    versions: dict[str, int] = {}
    for imp in model.opset_import:
        versions[imp.domain] = max(versions.get(imp.domain, 0), imp.version)
    ml_ops = {n.op_type for n in model.graph.node if n.domain == ML}
    note = None
    if ml_ops:
        want = paired_ml(main)
        used = versions.get(ML, 1)
        ml = want
        while ml > used and any(_deprecated(op, ml) for op in ml_ops):
            ml -= 1
        if ml != want:
            blocking = sorted(op for op in ml_ops if _deprecated(op, want))
            note = (f"{ML} opset {ml} instead of {want} (paired with opset {main}): "
                    f"{', '.join(blocking)} {'is' if len(blocking) == 1 else 'are'} deprecated in {ML} {want}")
        versions[ML] = max(ml, used)
    else:
        versions.pop(ML, None)
    del model.opset_import[:]
    for domain, version in versions.items():
        model.opset_import.add(domain=domain, version=version)
    return versions.get(ML), note


def _deprecated(op: str, version: int) -> bool:
    import onnx.defs

    try:
        return onnx.defs.get_schema(op, version, ML).deprecated
    except onnx.defs.SchemaError:
        return True
