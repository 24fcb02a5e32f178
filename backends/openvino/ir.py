"""OpenVINO IR files: importing openvino, reading an IR back, and what it holds (``inspect``)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from onnxbridge.errors import BadInputError

# rt_info keys the build writes into the IR, read back by ``inspect`` (and the key OpenVINO writes its version in)
PRECISION_KEY = ["onnxbridge", "precision"]
WRITER_KEY = ["onnxbridge", "version"]
# the compile config the hop validated the IR with (OpenVINO does not apply a hint written in the IR, so a reader
# must pass it to compile_model): "INFERENCE_PRECISION_HINT=f32"
VALIDATED_KEY = ["onnxbridge", "validated_with"]
VALIDATED = {"INFERENCE_PRECISION_HINT": "f32"}  # the config the hop's runner compiles with
RUNTIME_VERSION_KEY = "Runtime_version"


def load():
    """The ``openvino`` module; UnavailableError (exit 3, with the install hint) when it cannot be imported."""
    from onnxbridge.backends.openvino import PLUGIN

    return PLUGIN.import_toolchain("openvino")


def release(ov) -> str:
    """The OpenVINO release, e.g. ``2026.4.1`` (``openvino.__version__`` adds the build)."""
    return ov.__version__.split("-")[0]


def weights_of(xml: Path) -> Path:
    """The .bin OpenVINO writes and reads beside an .xml."""
    return xml.with_suffix(".bin")


def read(path: Path):
    """``(openvino, core, model)`` read from ``path`` and its .bin; BadInputError when they are not a readable IR."""
    ov = load()
    if not path.is_file():
        raise BadInputError(f"'{path}' does not exist or is not a file")
    if not weights_of(path).is_file():
        raise BadInputError(f"'{path}' has no weights file '{weights_of(path).name}' beside it (an OpenVINO IR is "
                            ".xml + .bin)")
    core = ov.Core()
    try:
        model = core.read_model(str(path), str(weights_of(path)))
    except Exception as exc:  # noqa: BLE001 - openvino raises RuntimeError and its own classes
        raise BadInputError(f"'{path}' is not a readable OpenVINO IR: {reason(exc)}") from None
    return ov, core, model


def reason(exc: BaseException, limit: int = 300) -> str:
    """The last informative line of an OpenVINO error (its messages start with where a check failed)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Check '", "Exception from src", "FrontEnd API failed"))]
    text = (useful or lines or [type(exc).__name__])[-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shape(partial) -> list | None:
    """A partial shape as a list: ints for static dims, None for dynamic ones; None for a dynamic rank."""
    if partial.rank.is_dynamic:
        return None
    return [d.get_length() if d.is_static else None for d in partial]


def dtype(element_type) -> str:
    """numpy's name for an element type (``float32``), else OpenVINO's (``string``)."""
    try:
        import numpy as np

        return np.dtype(element_type.to_dtype()).name
    except Exception:  # noqa: BLE001 - types numpy has no dtype for
        return element_type.get_type_name()


def ports(model) -> dict:
    """Inputs and outputs: name, shape (None where dynamic), partial shape as OpenVINO prints it, dtype."""
    def row(port):
        return {"name": port.get_any_name(), "shape": shape(port.get_partial_shape()),
                "partial_shape": str(port.get_partial_shape()), "dtype": dtype(port.get_element_type())}

    return {"inputs": [row(p) for p in model.inputs], "outputs": [row(p) for p in model.outputs]}


def ops(model) -> dict[str, int]:
    """How many of each op type the model holds, most frequent first."""
    return dict(Counter(op.get_type_name() for op in model.get_ordered_ops()).most_common())


def constants(model) -> dict[str, int]:
    """Constant tensors by element type (``f16`` ones are the weights ``compress_to_fp16`` compressed)."""
    return dict(Counter(op.get_output_element_type(0).get_type_name() for op in model.get_ordered_ops()
                        if op.get_type_name() == "Constant").most_common())


def rt_value(model, key) -> str | None:
    """A string from the model's rt_info, or None where it has none."""
    try:
        return model.get_rt_info(key).astype(str) if model.has_rt_info(key) else None
    except Exception:  # noqa: BLE001 - a value that is not a string
        return None


def inspect(path: Path) -> dict:
    """What the IR holds: who wrote it, I/O, ops and constants by type; ``precision`` when onnxbridge built it."""
    ov, _, model = read(path)
    info = {"path": str(path), "format": "openvino", "xml_bytes": path.stat().st_size,
            "bin_bytes": weights_of(path).stat().st_size, "written_by": rt_value(model, RUNTIME_VERSION_KEY),
            "reader": f"OpenVINO {ov.__version__}"}
    precision, writer = rt_value(model, PRECISION_KEY), rt_value(model, WRITER_KEY)
    if precision:
        info["precision"] = precision
    if writer:
        info["built_by"] = f"onnxbridge {writer}"
    validated = rt_value(model, VALIDATED_KEY)
    if validated:  # pass these to compile_model to compute what onnxbridge validated
        info["validated_with"] = dict(item.split("=", 1) for item in validated.split(";") if "=" in item)
    return {**info, **ports(model), "ops": ops(model), "constants": constants(model)}
