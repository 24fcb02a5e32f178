"""ONNX -> OpenVINO IR: ``openvino.convert_model``, ops it rejects named by node, and the atomic write of the
.xml + .bin pair."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.backends.openvino import PRECISIONS
from onnxbridge.backends.openvino.ir import PRECISION_KEY, VALIDATED, VALIDATED_KEY, WRITER_KEY, constants, load, \
    ops, ports, reason, release, weights_of
from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    from onnxbridge.plugins import BuildResult

# the summary lines of OpenVINO's "Model wasn't fully converted" error, and its per-op detail blocks
_NO_RULE = re.compile(r"^-- No conversion rule found for operations: (.+)$", re.M)
_FAILED = re.compile(r"^-- Conversion is failed for: (.+)$", re.M)
_DETAIL = re.compile(r"^-- (\S+) with a message:\n(.*?)(?=^-- |^Summary:|\Z)", re.M | re.S)
_VERSION = re.compile(r"-(\d+)$")
_NOISE = ("Check '", "[ONNX Frontend]", "While validating", "Exception from src", "FrontEnd API failed")
COMPUTE = "fp32 (onnxbridge's runner sets the CPU plugin's INFERENCE_PRECISION_HINT to f32: no silent bf16)"


def convert(ov, onnx_path: Path):
    """The ``openvino.Model`` of the ONNX file; UnsupportedError naming every node OpenVINO cannot convert."""
    model, found = _converted(ov, onnx_path)
    if found:
        raise UnsupportedError(f"OpenVINO {release(ov)} cannot convert '{onnx_path.name}': " + "; ".join(found),
                               hint="replace those ops before converting, or convert to another target")
    return model


def _converted(ov, onnx_path: Path) -> tuple[object | None, list[str]]:
    """(the model, []) or (None, what OpenVINO rejected)."""
    try:
        return ov.convert_model(str(onnx_path)), []
    except Exception as exc:  # noqa: BLE001 - OpConversionFailure, GeneralFailure, RuntimeError
        return None, rejections(exc, onnx_path, release(ov))


def rejections(exc: BaseException, onnx_path: Path, version: str) -> list[str]:
    """One line per op in OpenVINO's conversion error, with the ONNX nodes of that op; the error's last informative
    line when it names no op."""
    from onnxbridge.modelwalk import graphs
    from onnxbridge.onnxio import load_onnx

    text = str(exc)
    details = {op: _detail(body) for op, body in _DETAIL.findall(text)}
    nodes = [node for g in graphs(load_onnx(onnx_path).graph) for node in g.node]
    found = []
    for pattern, what in ((_NO_RULE, f"has no conversion rule in OpenVINO {version}'s ONNX frontend"),
                          (_FAILED, "failed to convert")):
        for line in pattern.findall(text):
            for token in (t.strip() for t in line.split(",") if t.strip()):
                op, names = _nodes_of(token, nodes)
                why = f" ({details[token]})" if details.get(token) else ""
                found.append(f"op {op} {what}{why}: " + _names(names))
    return found or [reason(exc)]


def _detail(body: str) -> str:
    """The message of a detail block without OpenVINO's source locations."""
    lines = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith(_NOISE)]
    return " ".join(lines)[:300]


def _nodes_of(token: str, nodes: list) -> tuple[str, list[str]]:
    """(the op as onnxbridge spells it, the names of its ``nodes``) for an OpenVINO op token: ``Det-22``
    (op-opset), ``com.example.FooBar`` (domain.op)."""
    version = _VERSION.search(token)
    bare = token[: version.start()] if version else token
    domain, _, op_type = bare.rpartition(".")
    domain = _domain(domain)
    spelled = (f"{domain}::{op_type}" if domain else op_type) + (f" (opset {version[1]})" if version else "")
    names = [node.name or f"(writing '{node.output[0]}')" for node in nodes
             if node.op_type == op_type and _domain(node.domain) == domain]
    return spelled, names


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _names(nodes: list[str]) -> str:
    if not nodes:
        return "no node of that op found in the ONNX graph"
    shown = ", ".join(f"'{n}'" for n in nodes[:5]) + (f" (+{len(nodes) - 5} more)" if len(nodes) > 5 else "")
    return f"node{'s' if len(nodes) > 1 else ''} {shown}"


def blockers(onnx_path: Path) -> list[str]:
    """What stops the model from converting, found by converting it in memory (nothing is written); without
    OpenVINO, UnavailableError (exit 3, with the install hint), as for a build."""
    return _converted(load(), onnx_path)[1]


def build(onnx_path: Path, output: Path, *, target: str | None = None, precision: str = "fp32",
          calibration: dict | None = None) -> "BuildResult":
    """Convert (and for int8 quantize on ``calibration``), save ``output`` and its .bin atomically (staged beside it,
    then renamed), and return what the saved IR holds, read back from the staged files."""
    from onnxbridge import __version__
    from onnxbridge.atomic import place, placing
    from onnxbridge.plugins import native_writes

    if target is not None:
        raise BadInputError("--target does not apply to --to openvino (an IR is compiled for a device when loaded)")
    if precision not in PRECISIONS:
        raise BadInputError(f"--precision {precision} is not applied by --to openvino (it applies "
                            f"{', '.join(PRECISIONS)})")
    if calibration and precision != "int8":
        raise BadInputError("--calibration applies to --precision int8 only")
    ov = load()
    t = time.perf_counter()
    model = convert(ov, onnx_path)
    caught: list[str] = []
    quantization = None
    if precision == "int8":
        from onnxbridge.backends.openvino.quantize import quantize

        model, quantization = quantize(model, calibration, caught)
    model.set_rt_info(precision, PRECISION_KEY)
    model.set_rt_info(__version__, WRITER_KEY)
    model.set_rt_info(";".join(f"{k}={v}" for k, v in VALIDATED.items()), VALIDATED_KEY)
    with placing(output) as staged:  # the .xml is placed when the block ends, its .bin just before
        with native_writes(staged.parent, f"'{output}'"):  # a full disk: one line, not "basic_ios::clear"
            ov.save_model(model, str(staged), compress_to_fp16=precision == "fp16")
        saved = ov.Core().read_model(str(staged), str(weights_of(staged)))
        built = _result(ov, saved, precision, staged)
        place(weights_of(staged), weights_of(output))
    if quantization:
        built.facts["quantization"] = quantization
    built.facts["build_s"] = round(time.perf_counter() - t, 4)
    built.warnings = caught
    return built


def default_precision(ov) -> str | None:
    """What the CPU plugin computes fp32 models in when compile_model gets no config (``bf16`` on a CPU with bf16
    units); None where it cannot say. An IR cannot change it: OpenVINO ignores INFERENCE_PRECISION_HINT and
    EXECUTION_MODE_HINT in a model's ``runtime_options`` rt_info."""
    try:
        return ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    except Exception:  # noqa: BLE001 - no CPU plugin, or a build without the property
        return None


def _applied(precision: str, by_type: dict, fake_quantize: int, default: str | None = None) -> dict:
    """What the IR stores its weights in and what the CPU plugin computes in (the report's ``artifact.precision``);
    ``default``: what a compile with no config computes in on this CPU, said where it is not f32."""
    compute = COMPUTE + (f"; a default compile on this CPU (no config) computes in {default}"
                         if default not in (None, "f32") else "")
    if precision == "int8":
        return {"weights": f"int8 ({by_type.get('i8', 0)} i8 weight constants, NNCF)",
                "compute": f"int8 in the ops after its {fake_quantize} FakeQuantize node(s); elsewhere {compute}"}
    if precision == "fp16":
        return {"weights": f"fp16 (compress_to_fp16: {by_type.get('f16', 0)} f16 constants, converted to f32 where "
                           "used)", "compute": compute}
    return {"weights": "fp32", "compute": compute}


def _result(ov, saved, precision: str, staged: Path) -> "BuildResult":
    """The IR as saved: its facts, notes and applied precision."""
    from onnxbridge.plugins import BuildResult

    io, by_type, histogram = ports(saved), constants(saved), ops(saved)
    fp16 = precision == "fp16"
    default = default_precision(ov)
    notes = [f"compress_to_fp16 applied: {by_type.get('f16', 0)} constant(s) stored as f16 in "
             f"{weights_of(staged).name}; the IR decompresses them to f32 (Convert) for compute"] if fp16 else []
    facts = {"openvino": ov.__version__, "precision": precision, "compress_to_fp16": fp16,
             "default_compile": {"device": "CPU", "inference_precision": default,
                                 "validated_with": dict(VALIDATED)},
             **io, "dynamic_inputs": {r["name"]: r["partial_shape"] for r in io["inputs"]
                                      if r["shape"] is None or None in r["shape"]},
             "ops": histogram, "constants": by_type, "weights_file": weights_of(staged).name,
             "xml_bytes": staged.stat().st_size, "bin_bytes": weights_of(staged).stat().st_size}
    return BuildResult(facts, notes=notes,
                       precision=_applied(precision, by_type, histogram.get("FakeQuantize", 0), default))
