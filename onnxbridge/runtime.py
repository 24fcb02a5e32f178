"""onnxruntime, the reference runtime: sessions, input specs and runs with clean errors."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from onnxbridge.errors import BadInputError, UnsupportedError
from onnxbridge.specs import TensorSpec

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import onnxruntime

_ORT_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
               "tensor(bfloat16)": "bfloat16", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
               "tensor(int16)": "int16", "tensor(uint16)": "uint16", "tensor(int32)": "int32",
               "tensor(uint32)": "uint32", "tensor(int64)": "int64", "tensor(uint64)": "uint64",
               "tensor(bool)": "bool", "tensor(string)": "str"}


def session(model: "str | Path | onnx.ModelProto", *, optimize: bool = True) -> "onnxruntime.InferenceSession":
    """A CPU session; load failures (unsupported opset, IR, op) become UnsupportedError."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    try:
        return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        msg = " ".join(str(exc).split())
        raise UnsupportedError(f"onnxruntime {ort.__version__} cannot load the model: {msg[:400]}") from None


def input_specs(sess: "onnxruntime.InferenceSession") -> list[TensorSpec]:
    return [TensorSpec(i.name, tuple(d if isinstance(d, int) else (d or None) for d in i.shape),
                       _ORT_DTYPES.get(i.type, "float32")) for i in sess.get_inputs()]


def output_names(sess: "onnxruntime.InferenceSession") -> list[str]:
    return [o.name for o in sess.get_outputs()]


def match_feeds(names: list[str], feeds: Mapping[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
    """Feeds for the model's inputs: by name; by position when no name matches and counts agree.

    Feeds the model does not take (inputs an exporter pruned as unused) are left out.
    """
    if all(n in feeds for n in names):
        return {n: feeds[n] for n in names}
    if not any(n in feeds for n in names) and len(feeds) == len(names):
        return dict(zip(names, feeds.values()))
    missing = [n for n in names if n not in feeds]
    raise BadInputError(f"inputs do not match the ONNX model: missing {missing}; model inputs are {names}, "
                        f"given {list(feeds)}")


def run(sess: "onnxruntime.InferenceSession", feeds: Mapping[str, "np.ndarray"]) -> list["np.ndarray"]:
    import numpy as np

    names = [i.name for i in sess.get_inputs()]
    matched = match_feeds(names, feeds)
    out = sess.run(None, {n: np.ascontiguousarray(v) for n, v in matched.items()})
    return [np.asarray(o) for o in out]


def fold_constants(src: Path, dest: Path, *, external_data: bool = False) -> None:
    """Write ``src`` with onnxruntime's basic graph optimizations applied (constant folding, redundant-node
    removal, Conv+BN/Add/Mul fusion) to ``dest``: plain ONNX, not tied to a provider (``external_data``: weights
    beside it in DEST.data, for models over 2 GB). Raises onnxruntime's error when it cannot load the model."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dest)
    so.log_severity_level = 3
    if external_data:
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{Path(dest).name}.data")
    ort.InferenceSession(str(src), sess_options=so, providers=["CPUExecutionProvider"])
