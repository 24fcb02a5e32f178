"""What the Keras and Paddle localization tests (tests/frontends/tensorflow/test_localize.py,
tests/frontends/paddle/test_localize.py) measure on a source and its export."""
from __future__ import annotations

import numpy as np


def all_agree(src, sides, model) -> dict:
    """Every checkpoint the source side shows against onnxruntime on the export (all tensors as outputs)."""
    import onnx
    import onnxruntime as ort

    names = [c.tensor for c in sides.checkpoints]
    full = onnx.ModelProto()
    full.CopyFrom(model)
    del full.graph.output[:]
    full.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    feeds = dict(src.sample.feeds)
    want = dict(zip(names, ort.InferenceSession(full.SerializeToString()).run(names, feeds)))
    got = sides.probe.tensors(names, feeds)
    worst = max(float(np.max(np.abs(got[n].astype(np.float64) - want[n]))) for n in names)
    return {"checkpoints": len(names), "sources": [c.source for c in sides.checkpoints], "worst": worst,
            "runs": sides.probe.runs}


def planted(src, sides, model, scale_initializer: str) -> dict:
    """Localize the source against the export with one weight (initializer or Constant) scaled by 1.05."""
    import onnx
    from onnx import numpy_helper

    from onnxbridge.localize.bisect import localize
    from onnxbridge.localize.onnx_probe import OnnxProbe
    from onnxbridge.validation import Tolerance

    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    consts = [a.t for n in bad.graph.node if n.op_type == "Constant" and n.output[0] == scale_initializer
              for a in n.attribute if a.name == "value"]  # paddle2onnx writes its weights as Constants
    weight = next((t for t in [*bad.graph.initializer, *consts] if t.name in (scale_initializer, "")), None)
    assert weight is not None, scale_initializer
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.05), weight.name))
    report = localize(sides.probe, OnnxProbe(bad), sides.checkpoints, [src.sample], Tolerance.for_precision("fp32"),
                      method=sides.method)
    same = localize(sides.probe, OnnxProbe(model), sides.checkpoints, [src.sample], Tolerance.for_precision("fp32"),
                    method=sides.method)
    return {"first": report["first_divergent"], "runs": report["runs"], "clean": same["first_divergent"],
            "method": sides.method}
