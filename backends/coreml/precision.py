"""What ``--precision`` applies to a Core ML build (compute and weight types; int8 weights quantized by
coremltools), and what a saved program holds."""
from __future__ import annotations

import numpy as np

from onnxbridge.backends.coreml.lower import TARGETS
from onnxbridge.errors import BadInputError


# --precision -> (what the program computes in, what its weights are stored as). int8 is weight-only: coremltools'
# linear_quantize_weights stores each large weight as int8 with a per-output-channel fp16 scale (symmetric, zero
# point 0) behind a constexpr op that Core ML dequantizes when it loads the model; activations and compute stay
# fp16 (Core ML's default for ML programs). No calibration data is involved.
APPLIED = {"fp32": ("fp32", "fp32"), "fp16": ("fp16", "fp16"), "int8": ("fp16", "int8")}
# the constexpr ops that hold int8 weights, by target, and the input that holds the int8 data
DEQUANTIZE_OPS = {"constexpr_affine_dequantize": "quantized_data",  # iOS16, iOS17
                  "constexpr_blockwise_shift_scale": "data"}  # iOS18 and newer
QUANTIZED = ("int8", "uint8", "int4", "uint4")  # stored dtypes of quantized weights
INT8_FIRST_TARGET = "iOS16"
# weights with no more elements stay float (coremltools' ``weight_threshold``; its default is 2048): a 256-element
# weight over 16 channels takes 576 bytes of weight.bin either way (int8 data plus the 64-byte-aligned blobs of its
# fp16 scales and zero points, or the fp16 data), so smaller ones would only lose accuracy
INT8_WEIGHT_THRESHOLD = 256


def check_precision(precision: str, target: str) -> None:
    """Refuse a precision this backend cannot apply for ``target`` (BadInputError, naming the way out)."""
    if precision not in APPLIED:
        raise BadInputError(f"--precision {precision} does not apply to --to coreml; use {', '.join(APPLIED)}")
    if precision == "int8" and TARGETS.index(target) < TARGETS.index(INT8_FIRST_TARGET):
        raise BadInputError(f"--precision int8 needs --target {INT8_FIRST_TARGET} or newer (building for {target}): "
                            "Core ML stores int8 weights through constexpr_affine_dequantize (iOS16) or "
                            "constexpr_blockwise_shift_scale (iOS18)")


def pass_pipeline(ct, precision: str):
    """coremltools' default graph passes, with its weight quantization pass for int8 placed after the fp16 cast
    and constant folding (so the weights it quantizes are the fp16 ones the program uses; scales are fp16) and
    before the cleanup passes; None (the default pipeline) otherwise."""
    if precision != "int8":
        return None
    from coremltools.optimize.coreml import OpLinearQuantizerConfig, OptimizationConfig

    pipeline = ct.PassPipeline.DEFAULT
    cleanup = ct.PassPipeline.CLEANUP.passes
    ends_with_cleanup = pipeline.passes[-len(cleanup):] == cleanup  # true in coremltools 9; else quantize last
    pipeline.insert_pass(len(pipeline.passes) - (len(cleanup) if ends_with_cleanup else 0),
                         "compression::linear_quantize_weights")
    pipeline.set_options("compression::linear_quantize_weights", {"config": OptimizationConfig(
        global_config=OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel",
                                              weight_threshold=INT8_WEIGHT_THRESHOLD))})
    return pipeline


def weight_table(function) -> list[dict]:
    """The weight tensors of a MIL function by stored dtype, one row each: ``{"dtype", "tensors", "elements"}``
    (int8 first). A weight is what coremltools keeps in ``weight.bin`` and its quantizer considers (a float const
    of >= 10 elements, ``should_use_weight_file``) or the data of a dequantize constexpr op; the scales and zero
    points feeding such an op are not counted."""
    from coremltools.converters.mil.backend.mil.load import should_use_weight_file
    from coremltools.converters.mil.mil import types

    rows: dict[str, dict] = {}

    def visit(block) -> None:
        for op in block.operations:
            for inner in op.blocks:
                visit(inner)
            if op.op_type in DEQUANTIZE_OPS:
                var = op.inputs[DEQUANTIZE_OPS[op.op_type]]
            elif op.op_type == "const" and not any(c.op_type.startswith("constexpr_")
                                                   for c in op.outputs[0].child_ops):
                var = op.outputs[0]
                value = var.val
                if not (isinstance(value, np.ndarray) and value.dtype.kind == "f" and should_use_weight_file(value)):
                    continue
            else:
                continue
            name = types.builtin_to_string(var.dtype)
            row = rows.setdefault(name, {"dtype": name, "tensors": 0, "elements": 0})
            row["tensors"] += 1
            row["elements"] += int(np.prod(var.shape))

    visit(function)
    return sorted(rows.values(), key=lambda r: (r["dtype"] not in QUANTIZED, r["dtype"]))


def applied_precision(function, compute: str) -> dict:
    """What the program holds: weight and compute types, and how many weight tensors are quantized / float
    (float ones: at most ``INT8_WEIGHT_THRESHOLD`` elements, 1-D such as biases, or a float precision)."""
    counts = {r["dtype"]: r["tensors"] for r in weight_table(function)}
    quantized = sum(n for k, n in counts.items() if k in QUANTIZED)
    floats = {k: n for k, n in counts.items() if k not in QUANTIZED}
    weights = "int8" if quantized else "fp32" if "fp32" in floats else "fp16" if floats else compute
    return {"weights": weights, "compute": compute, "quantized_weights": quantized,
            "float_weights": sum(floats.values())}
