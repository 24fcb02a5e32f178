"""The check the Core ML lowering tests share: a model converted to Core ML whose ``onnx -> coreml`` hop passed."""
from __future__ import annotations

from pathlib import Path

import onnx

import onnxbridge


def passed_coreml_hop(model: "onnx.ModelProto | Path", tmp_path: Path, **convert) -> dict:
    """Convert ``model`` (saved first when a ModelProto) to Core ML with the ``convert`` arguments (``inputs``,
    ``atol``, ...), assert the Core ML hop passed against onnxruntime (naming the outputs that did not), and return
    the report."""
    src = model
    if isinstance(model, onnx.ModelProto):
        src = tmp_path / "m.onnx"
        onnx.save(model, src)
    rep = onnxbridge.convert(src, to="coreml", output=tmp_path / "m.mlpackage", report=tmp_path / "r.json",
                             **convert).report
    coreml = rep["hops"][-1]
    assert (coreml["from"], coreml["to"]) == ("onnx", "coreml")
    assert rep["status"] == "passed", [(o["name"], o.get("max_abs"), o.get("error")) for o in coreml["outputs"]] + \
        coreml["errors"]
    return rep
