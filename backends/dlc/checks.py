"""``onnxbridge check --targets dlc``: what stops an ONNX model from becoming one DLC, found before converting."""
from __future__ import annotations

import tempfile
from pathlib import Path

from onnxbridge.backends.dlc.prepare import dtype_blockers, legalize, op_blockers, opset_blockers, shape_blockers
from onnxbridge.errors import OnnxBridgeError, UnavailableError


def blockers(onnx_path: Path, input_shapes: dict) -> list[str]:
    """Dynamic dims left, opset steps the adapters cannot take, and ops without a QNN builder. When the shapes and
    opset allow, the model is prepared as the build prepares it (folded at the given input shapes, legalized by the
    same rules, its ops checked after that) in a scratch folder, and with onnxruntime-qnn installed dumped once for
    partitions; otherwise its ops are checked as they stand, after the rules, folding's ops let be."""
    from onnxbridge.onnxio import load_onnx

    model = load_onnx(onnx_path)
    shapes = {k: list(v) for k, v in input_shapes.items()}
    found = dtype_blockers(model) + shape_blockers(model, shapes) + opset_blockers(model)
    if found:
        return found + op_blockers(legalize(model)[0], folded=False)
    from onnxbridge.backends.dlc.convert import dump_one_graph
    from onnxbridge.backends.dlc.prepare import prepare

    with tempfile.TemporaryDirectory(prefix="onnxbridge-dlc-check-") as tmp:
        try:
            prepared = prepare(onnx_path, Path(tmp), shapes)
            dump_one_graph(prepared.path, Path(tmp) / "dump")
        except UnavailableError:
            pass  # no onnxruntime-qnn: the checks before the dump are all we can say
        except OnnxBridgeError as exc:
            found.append(exc.one_line())
    return found
