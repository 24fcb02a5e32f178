"""What happens to the ONNX model before TensorRT's parser sees it, in order:

1. adapt down to the flavour's opset ceiling (``onnxbridge.adapters``);
2. fold constants (onnxruntime's basic graph optimizations, which emit standard ONNX ops only);
3. where the parser has no INT64, cast int64 initializers to int32 where the value fits and the op's schema takes
   int32 at that input (out-of-range values are reported: the parser would clamp them);
4. precision in the graph: fp16 with ``onnxbridge.precision.to_fp16`` (fp32 I/O) plus LayerNormalization kept in
   fp32, unless the TensorRT has the FP16 builder flag; int8 as Q/DQ nodes from calibration data (``quantize``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from onnxbridge.backends.tensorrt.flavours import Flavour

KEEP_FP32 = frozenset({"LayerNormalization"})  # mean/variance of fp16 activations overflow or lose precision
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def prepare(onnx_path: Path, workdir: Path, flavour: "Flavour", precision: str,
            calibration: dict | None) -> tuple[Path, dict, list[str]]:
    """Write the model TensorRT will parse into ``workdir``; returns (path, facts, warnings)."""
    from onnxbridge.adapters import adapt, default_opset
    from onnxbridge.onnxio import load_onnx, save_onnx

    facts: dict = {}
    warnings: list[str] = []
    model = load_onnx(onnx_path, load_external_data=True)
    have = default_opset(model)
    ceiling = flavour.opset_ceiling
    facts["opset_in"] = have
    if have > ceiling:
        model = adapt(model, ceiling)
    facts["opset"] = default_opset(model)
    model, folded = fold_constants(model, workdir)
    facts["constant_folding"] = folded
    if not flavour.features["native_int64"]:
        cast, out_of_range = cast_int64_weights(model)
        facts["int64_weights_cast"] = cast
        warnings += [f"int64 weight '{n}' does not fit int32; the TensorRT parser will clamp it" for n in out_of_range]
    else:
        facts["int64_weights_cast"] = []
    if precision == "fp16" and not flavour.features["fp16_flag"]:
        from onnxbridge.precision import to_fp16

        kept = sorted({n.op_type for n in model.graph.node if n.op_type in KEEP_FP32})
        model = keep_fp32(to_fp16(model), KEEP_FP32)
        facts["precision_in"] = ("graph: onnxbridge.precision.to_fp16 (fp32 inputs/outputs)"
                                 + (f", {', '.join(kept)} kept in fp32" if kept else ""))
    elif precision == "fp16":
        facts["precision_in"] = "builder flag FP16 (weakly typed network)"
    elif precision == "int8":
        from onnxbridge.backends.tensorrt.quantize import to_qdq

        path = workdir / "trt-fp32.onnx"
        save_onnx(model, path)
        model, qfacts = to_qdq(path, workdir, calibration)
        facts["precision_in"] = "graph: Q/DQ (onnxruntime.quantization.quantize_static, symmetric int8)"
        facts["calibration"] = qfacts
    else:
        facts["precision_in"] = "fp32 graph" + (" (strongly typed)" if flavour.features["strongly_typed_flag"] else "")
    out = workdir / "trt-input.onnx"
    save_onnx(model, out)
    return out, facts, warnings


def fold_constants(model: "onnx.ModelProto", workdir: Path) -> tuple["onnx.ModelProto", dict]:
    """``model`` with constant subgraphs folded by onnxruntime (basic level); returns it and node counts."""
    from onnxbridge.onnxio import EXTERNAL_DATA_THRESHOLD, load_onnx, save_onnx
    from onnxbridge.runtime import fold_constants as fold

    src, dst = workdir / "trt-prefold.onnx", workdir / "trt-folded.onnx"
    save_onnx(model, src)
    try:
        fold(src, dst, external_data=model.ByteSize() > EXTERNAL_DATA_THRESHOLD)
        folded = load_onnx(dst, load_external_data=True)
    except Exception as exc:  # a model onnxruntime cannot load is left as it is; TensorRT may still parse it
        return model, {"applied": False, "reason": " ".join(str(exc).split())[:200]}
    # onnxruntime drops the model's metadata and may add its own opset imports; keep ours
    folded.ClearField("metadata_props")
    folded.metadata_props.extend(model.metadata_props)
    return folded, {"applied": True, "nodes_before": len(model.graph.node), "nodes_after": len(folded.graph.node)}


def cast_int64_weights(model: "onnx.ModelProto") -> tuple[list[str], list[str]]:
    """Cast int64 initializers to int32 in place where every reader's schema takes int32 at that input, through a
    type variable used by no other input or output; returns (cast names, names whose values do not fit)."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    from onnxbridge.adapters import default_opset

    opset = default_opset(model)
    readers: dict[str, list[tuple]] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, i))
    graph_io = {v.name for v in (*model.graph.input, *model.graph.output)}
    cast, out_of_range = [], []
    for t in model.graph.initializer:
        if t.data_type != TensorProto.INT64 or t.name in graph_io:
            continue
        arr = numpy_helper.to_array(t)
        if arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
            out_of_range.append(t.name)
            continue
        if readers.get(t.name) and all(_takes_int32_alone(node, i, opset) for node, i in readers[t.name]):
            t.CopyFrom(numpy_helper.from_array(arr.astype(np.int32), t.name))
            cast.append(t.name)
    return cast, out_of_range


def _takes_int32_alone(node, index: int, opset: int) -> bool:
    import onnx.defs

    if node.domain not in ("", "ai.onnx"):
        return False
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
    except onnx.defs.SchemaError:
        return False
    if index >= len(schema.inputs) or schema.inputs[index].option.name == "Variadic":
        return False
    formal = schema.inputs[index]
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    if formal.type_str not in allowed or "tensor(int32)" not in allowed[formal.type_str]:
        return False
    others = [f for k, f in enumerate(schema.inputs) if k != index] + list(schema.outputs)
    return all(f.type_str != formal.type_str for f in others)


def keep_fp32(model: "onnx.ModelProto", ops: frozenset[str]) -> "onnx.ModelProto":
    """After ``to_fp16``: run every node whose op is in ``ops`` in fp32 (Casts to fp32 before, back to fp16 after)."""
    from onnx import TensorProto, helper

    nodes = []
    for node in model.graph.node:
        if node.op_type not in ops or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        label = node.name or node.output[0]
        for i, name in enumerate(node.input):
            if name:
                wide = f"{label}__in{i}_fp32"
                nodes.append(helper.make_node("Cast", [name], [wide], to=TensorProto.FLOAT, name=f"{wide}__cast"))
                node.input[i] = wide
        outs = []
        for i, name in enumerate(node.output):
            if name:
                wide = f"{label}__out{i}_fp32"
                outs.append(helper.make_node("Cast", [wide], [name], to=TensorProto.FLOAT16, name=f"{wide}__cast"))
                node.output[i] = wide
        for a in node.attribute:
            if a.name == "stash_type":
                a.i = TensorProto.FLOAT
        nodes += [node, *outs]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model
