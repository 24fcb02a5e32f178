"""The engine file and its sidecar, and ``inspect``.

A serialized engine can only be opened by a runtime that reaches a CUDA device (even its I/O), so the build also
writes ``ENGINE.json`` beside it: what the builder knew (flavour, version, I/O of the network, profiles, precision),
tied to the engine by size and SHA-256. ``inspect`` reads the engine itself when the runtime can deserialize it
(bindings, profiles and the engine inspector's layer list, from the engine); otherwise it shows the sidecar's facts
and says so (``source``). A sidecar that does not match the engine's bytes is ignored, never trusted.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from onnxbridge.errors import BadInputError

SIDECAR_FORMAT = "onnxbridge-tensorrt-sidecar/1"
SIDECAR_KEYS = ("flavour", "version", "api", "precision", "precision_in", "profiles", "opset", "workspace_mb",
                "network_layers", "inputs", "outputs")


def sidecar_path(engine: str | Path) -> Path:
    engine = Path(engine)
    return engine.with_name(engine.name + ".json")


def write(output: Path, data: bytes, facts: dict) -> None:
    """The engine, then its sidecar, each through a temp file in the same folder and ``os.replace``."""
    from onnxbridge.fileio import atomic_write_bytes, write_json

    atomic_write_bytes(output, data)
    write_json(sidecar_path(output), {"format": SIDECAR_FORMAT, "engine": output.name, "engine_bytes": len(data),
                                      "engine_sha256": hashlib.sha256(data).hexdigest(),
                                      **{k: facts[k] for k in SIDECAR_KEYS if k in facts}})


def read_sidecar(engine: Path, data: bytes) -> tuple[dict | None, str | None]:
    """(facts, None) when the sidecar exists and matches ``data``; else (None, why not)."""
    path = sidecar_path(engine)
    if not path.is_file():
        return None, f"no sidecar {path.name}"
    try:
        facts = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"sidecar {path.name} unreadable: {exc}"
    if facts.get("format") != SIDECAR_FORMAT:
        return None, f"sidecar {path.name} is not {SIDECAR_FORMAT}"
    if facts.get("engine_bytes") != len(data) or facts.get("engine_sha256") != hashlib.sha256(data).hexdigest():
        return None, f"sidecar {path.name} does not match the engine's bytes (stale); ignored"
    return facts, None


def load_engine(path: Path, data: bytes, flavour_name: str | None):
    """(flavour, engine) deserialized, or raise HopSkipped saying why the runtime cannot open it here."""
    from onnxbridge.backends.tensorrt import flavours
    from onnxbridge.errors import HopSkipped, UnavailableError

    try:
        flavour = flavours.load(flavour_name)
    except UnavailableError as exc:
        raise HopSkipped(f"{flavour_name or 'TensorRT'} runtime not installed: {exc.one_line()}") from None
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
        for layer in info.get("Layers", []):
            layers.append({"name": layer if isinstance(layer, str) else layer.get("Name"),
                           "type": None if isinstance(layer, str) else layer.get("LayerType")})
    return {**io, "profile_shapes": profiles, "layers": layers, "num_layers": engine.num_layers}


def inspect(path: str | Path) -> dict:
    """What an engine holds: flavour and version that built it, I/O, profiles, and the layers when it can be opened."""
    from onnxbridge.backends.tensorrt import flavours
    from onnxbridge.errors import HopSkipped

    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"engine '{path}' does not exist or is not a file")
    data = path.read_bytes()
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
