"""The engine file and its sidecar, and ``inspect``.

A serialized engine can only be opened by a runtime that reaches a CUDA device (even its I/O), so the build also
writes ``ENGINE.json`` beside it: what the builder knew (flavour, version, I/O of the network, profiles, precision),
tied to the engine by size and SHA-256. ``inspect`` reads the engine itself when the runtime can deserialize it
(bindings, profiles and the engine inspector's layer list, from the engine); otherwise it shows the sidecar's facts
and says so (``source``). A sidecar that does not match the engine's bytes is ignored, never trusted; one that
matches is checked field by field (``SIDECAR_FIELDS``), and one that is not a JSON object, or not of that shape, is
refused (BadInputError). An engine file is checked for a TensorRT magic (and, for TensorRT-RTX, the size its
header records) before any runtime sees it.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from onnxbridge.backends.tensorrt import PRECISIONS
from onnxbridge.backends.tensorrt.flavours import MAGIC, MODULES
from onnxbridge.errors import BadInputError

SIDECAR_FORMAT = "onnxbridge-tensorrt-sidecar/1"
SIDECAR_KEYS = ("flavour", "version", "api", "precision", "precision_in", "profiles", "opset", "workspace_mb",
                "network_layers", "inputs", "outputs")
SIDECAR_MAX_BYTES = 16 << 20  # ours are a few kB
SIDECAR_HINT = "rebuild the engine, or delete the sidecar to inspect the engine alone"
MAX_INT = 2**63 - 1  # TensorRT's dims and sizes are int64
MAX_RANK = 8  # TensorRT's Dims::MAX_DIMS
HEADER_BYTES = 24  # magic, header version, and (TensorRT-RTX, header version 2) the engine's size at offset 16


def _int(v, low: int = 0) -> bool:
    return type(v) is int and low <= v <= MAX_INT  # not bool, not float (NaN, 1e400)


def _dims(v, low: int) -> bool:
    return isinstance(v, list) and len(v) <= MAX_RANK and all(_int(d, low) for d in v)


def _io(v) -> bool:
    return isinstance(v, list) and all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                       and _dims(r.get("shape"), -1) and isinstance(r.get("dtype"), str) for r in v)


def _profile(p) -> bool:
    return isinstance(p, dict) and all(_dims(p.get(k), 1) for k in ("min", "opt", "max")) \
        and len({len(p["min"]), len(p["opt"]), len(p["max"])}) == 1 \
        and all(a <= b <= c for a, b, c in zip(p["min"], p["opt"], p["max"]))


# every field the build writes: (check, what it must be)
SIDECAR_FIELDS = {
    "engine": (lambda v: isinstance(v, str), "a string"),
    "engine_bytes": (_int, "an int >= 0"),
    "engine_sha256": (lambda v: isinstance(v, str), "a string"),
    "flavour": (lambda v: v in tuple(MODULES), " or ".join(MODULES)),
    "version": (lambda v: isinstance(v, str), "a string"),
    "api": (lambda v: isinstance(v, str), "a string"),
    "precision": (lambda v: v in PRECISIONS, " or ".join(PRECISIONS)),
    "precision_in": (lambda v: isinstance(v, str), "a string"),
    "profiles": (lambda v: isinstance(v, dict) and all(map(_profile, v.values())),
                 "an object of input -> {min, opt, max}: shapes of ints >= 1, min <= opt <= max"),
    "opset": (lambda v: _int(v, 1), "an int >= 1"),
    "workspace_mb": (lambda v: v is None or _int(v), "null or an int >= 0"),
    "network_layers": (_int, "an int >= 0"),
    "inputs": (_io, f"a list of {{name, shape (at most {MAX_RANK} ints >= -1), dtype}}"),
    "outputs": (_io, f"a list of {{name, shape (at most {MAX_RANK} ints >= -1), dtype}}"),
}


def sidecar_path(engine: str | Path) -> Path:
    engine = Path(engine)
    return engine.with_name(engine.name + ".json")


def write(output: Path, data: bytes, facts: dict) -> None:
    """The engine, then its sidecar, each through a temp file in the same folder and ``os.replace``."""
    from onnxbridge.atomic import atomic_write_bytes, write_json

    atomic_write_bytes(output, data)
    write_json(sidecar_path(output), {"format": SIDECAR_FORMAT, "engine": output.name, "engine_bytes": len(data),
                                      "engine_sha256": hashlib.sha256(data).hexdigest(),
                                      **{k: facts[k] for k in SIDECAR_KEYS if k in facts}})


def read_engine(path: Path) -> bytes:
    """The bytes of an engine file; BadInputError when they cannot be a serialized TensorRT engine: too short,
    no TensorRT magic, or a TensorRT-RTX header recording another size (truncated or padded)."""
    if not path.is_file():
        raise BadInputError(f"engine '{path}' does not exist or is not a file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"engine '{path}' cannot be read ({exc.strerror or exc})") from None
    if len(data) < HEADER_BYTES or data[:4] not in MAGIC:
        raise BadInputError(f"'{path}' is not a serialized TensorRT engine: {len(data)} bytes starting "
                            f"{data[:4]!r}, not {' or '.join(map(repr, MAGIC))}")
    version, size = struct.unpack_from("<I4xQ", data, 8)
    if data[:4] == b"vtrt" and version == 2 and size != len(data):
        raise BadInputError(f"'{path}' is truncated or altered: its header records {size} bytes, the file holds "
                            f"{len(data)}")
    return data


def read_sidecar(engine: Path, data: bytes) -> tuple[dict | None, str | None]:
    """(facts, None) when the sidecar exists and matches ``data``; else (None, why not). BadInputError when it is
    not a JSON object, or matches and is not of the shape the build writes (``SIDECAR_FIELDS``)."""
    path = sidecar_path(engine)
    if not path.is_file():
        return None, f"no sidecar {path.name}"
    facts = _sidecar_json(path)
    if facts.get("format") != SIDECAR_FORMAT:
        return None, f"sidecar {path.name} is not {SIDECAR_FORMAT}"
    if facts.get("engine_bytes") != len(data) or facts.get("engine_sha256") != hashlib.sha256(data).hexdigest():
        return None, f"sidecar {path.name} does not match the engine's bytes (stale); ignored"
    for key, (ok, what) in SIDECAR_FIELDS.items():
        if key not in facts or not ok(facts[key]):
            raise BadInputError(f"sidecar '{path}': field '{key}' is {'missing' if key not in facts else 'wrong'}; "
                                f"it must be {what}", hint=SIDECAR_HINT)
    return facts, None


def _sidecar_json(path: Path) -> dict:
    """The sidecar's JSON object; BadInputError when it is too big, not JSON, too deeply nested or not an object."""
    try:
        size = path.stat().st_size
        facts = json.loads(path.read_bytes().decode("utf-8")) if size <= SIDECAR_MAX_BYTES else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise BadInputError(f"sidecar '{path}' is not readable JSON ({text})", hint=SIDECAR_HINT) from None
    if size > SIDECAR_MAX_BYTES:
        raise BadInputError(f"sidecar '{path}' is {size} bytes, not a sidecar (they are a few kB)", hint=SIDECAR_HINT)
    if not isinstance(facts, dict):
        raise BadInputError(f"sidecar '{path}' holds a JSON {type(facts).__name__}, not an object", hint=SIDECAR_HINT)
    return facts


def load_engine(path: Path, data: bytes, flavour_name: str | None):
    """(flavour, engine) deserialized, or raise HopSkipped saying why the runtime cannot open it here (no CUDA
    device); without the runtime installed, UnavailableError (exit 3, with the install hint)."""
    from onnxbridge.backends.tensorrt import flavours
    from onnxbridge.errors import HopSkipped

    flavour = flavours.load(flavour_name)
    trt = flavour.trt
    with flavour.capture() as log:
        runtime = trt.Runtime(flavour.logger())
        engine = runtime.deserialize_cuda_engine(data) if runtime is not None else None
    if engine is None:
        text = " ".join(m for _, m in log)
        if "cudaError 35" in text or "cudaError 100" in text or "no CUDA-capable device" in text \
                or "CUDA initialization failure" in text or "driver" in text.lower():
            cause = next((m for m in (m for _, m in log) if "cudaError" in m or "CUDA" in m), "")
            detail = cause[cause.find("cudaError"):].split(")")[0] if "cudaError" in cause else cause[:120]
            raise HopSkipped("no CUDA device" + (f" ({detail})" if detail else ""))
        first = next((m for sev, m in log if sev in ("ERROR", "INTERNAL_ERROR")), "no reason logged")
        raise HopSkipped(f"the {flavour.name} {flavour.version} runtime cannot deserialize {path.name}: {first[:200]}")
    return flavour, runtime, engine


def engine_facts(flavour, engine) -> dict:
    """I/O, profiles and layers as the deserialized engine reports them."""
    trt = flavour.trt
    io = {"inputs": [], "outputs": []}
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    profiles = []
    for name in names:
        mode = engine.get_tensor_mode(name)
        row = {"name": name, "shape": list(engine.get_tensor_shape(name)),
               "dtype": engine.get_tensor_dtype(name).name.lower()}
        io["inputs" if mode == trt.TensorIOMode.INPUT else "outputs"].append(row)
    for p in range(engine.num_optimization_profiles):
        for row in io["inputs"]:
            if -1 in row["shape"]:
                low, opt, high = engine.get_tensor_profile_shape(row["name"], p)
                profiles.append({"profile": p, "input": row["name"], "min": list(low), "opt": list(opt),
                                 "max": list(high)})
    layers = []
    if flavour.features["engine_inspector"]:
        inspector = engine.create_engine_inspector()
        info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON) or "{}")
        for layer in info.get("Layers", []) if isinstance(info, dict) else []:
            layers.append({"name": layer if isinstance(layer, str) else layer.get("Name"),
                           "type": None if isinstance(layer, str) else layer.get("LayerType")})
    return {**io, "profile_shapes": profiles, "layers": layers, "num_layers": engine.num_layers}


def inspect(path: str | Path) -> dict:
    """What an engine holds: flavour and version that built it, I/O, profiles, and the layers when it can be opened."""
    from onnxbridge.backends.tensorrt import flavours
    from onnxbridge.errors import HopSkipped

    path = Path(path)
    data = read_engine(path)
    side, why = read_sidecar(path, data)
    flavour = flavours.for_engine(data, side.get("flavour") if side else None)
    info: dict = {"path": str(path), "format": "tensorrt", "bytes": len(data), "magic": data[:4].decode("latin-1"),
                  "flavour": flavour or "unknown"}
    if side:
        info.update({k: side[k] for k in SIDECAR_KEYS if k in side})
        info["profiles"] = [{"input": k, **{b: v[b] for b in ("min", "opt", "max")}}
                            for k, v in (side.get("profiles") or {}).items()]
    try:
        loaded, _, engine = load_engine(path, data, flavour)
    except HopSkipped as exc:
        info["deserialized"] = False
        info["source"] = ("sidecar written at build time (the engine cannot be opened here: "
                          f"{exc.one_line()})" if side else f"engine header only ({why}; {exc.one_line()})")
        info.setdefault("inputs", [])
        info.setdefault("outputs", [])
        return info
    info.update(engine_facts(loaded, engine))
    info["deserialized"] = True
    info["runtime"] = f"{loaded.name} {loaded.version}"
    info["source"] = "the deserialized engine" + ("" if side else f" ({why})")
    return info
