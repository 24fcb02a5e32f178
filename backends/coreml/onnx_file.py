"""The ONNX file the Core ML backend checks or builds, read so that a malformed one is refused with one line
(BadInputError naming it) before any lowering runs: ``onnxio.load_onnx`` reads external data only from the
model's own folder, ``wellformed.check`` refuses what onnx's checker and its own guard find, and an opset beyond
what this onnx knows is refused (the lowering reads onnx's schemas)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    import onnx


def read_onnx(path: Path) -> "onnx.ModelProto":
    """The model at ``path`` with its external data loaded, checked as the module says."""
    import onnx

    from onnxbridge import wellformed
    from onnxbridge.adapters import default_opset
    from onnxbridge.onnxio import load_onnx

    model = load_onnx(path, load_external_data=True)
    wellformed.check(model, f"'{path}'")
    opset, newest = default_opset(model), onnx.defs.onnx_opset_version()
    if opset > newest:
        raise BadInputError(f"'{path}' imports ONNX opset {opset}; the newest this onnx ({onnx.__version__}) knows "
                            f"is {newest}")
    return model
