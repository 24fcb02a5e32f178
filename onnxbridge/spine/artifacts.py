"""Facts about models and artifacts on disk: what a file holds (``inspect_artifact``, read in the worker),
its size and companions, an ONNX model's inputs, and the libraries behind a backend (for messages)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING


from onnxbridge.errors import BadInputError
from onnxbridge.registry import dist_version
from onnxbridge.specs import TensorSpec


if TYPE_CHECKING:
    import onnx



def backend_libraries(name: str) -> str:
    """The distributions behind a backend, with versions, for crash messages."""
    from onnxbridge.plugins import BACKENDS

    plugin = BACKENDS.plugin(name)
    found = [f"{d} {dist_version(d)}" for d in (*plugin.requires, *plugin.any_of) if dist_version(d)]
    return ", ".join(found) or name


def hop_name(backend: str) -> str:
    """What a backend's hop is called (its ``to``): what really runs, e.g. the DLC's ``qnn-htp-simulator``."""
    from onnxbridge.plugins import BACKENDS

    return getattr(BACKENDS.module(backend), "HOP_NAME", backend)


def inspect_artifact(path: str | Path, kind: str | None = None) -> dict:
    """What a model file holds (``kind``: its backend, default by suffix). Backend artifacts are read in the
    worker process: their readers (coremltools, TensorRT) are native code."""
    from onnxbridge.pathchecks import regular
    from onnxbridge.plugins import BACKENDS, for_file
    from onnxbridge.worker import call

    regular(path, "the model", folder=True)  # a FIFO or a device would never end
    kind = kind or for_file(path) or "onnx"

    return call(f"{BACKENDS.plugin(kind).module}:inspect", (str(path),), step=f"reading {Path(path).name}",
                library=backend_libraries(kind))


def artifact_facts(path: Path, target: str, model: "onnx.ModelProto | None" = None,
                   files: list[str] | None = None) -> dict:
    """Facts about the written model (read back from disk when ``model`` is not given)."""
    from onnxbridge.adapters import default_opset
    from onnxbridge.external_data import external_files
    from onnxbridge.onnxio import load_onnx

    if model is None:
        model = load_onnx(path)
        files = external_files(model)
        missing = [f for f in files if not (path.parent / f).is_file()]
        if missing:
            raise BadInputError(f"'{path}' refers to external data that is missing: {', '.join(missing)}")
    return {"path": str(path), "format": target, "opset": default_opset(model), "ir_version": model.ir_version,
            "bytes": path.stat().st_size + sum((path.parent / f).stat().st_size for f in files),
            "external_data": files}


def companion_files(backend, output: Path) -> list[Path]:
    """The files a backend writes beside its artifact (an OpenVINO IR's .bin): ``companions(output)``, if declared."""
    companions = getattr(backend, "companions", None)
    return [Path(p) for p in companions(output)] if companions is not None else []


def size_on_disk(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (an .mlpackage)."""
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def onnx_source_info(model: "str | Path | onnx.ModelProto", proto: "onnx.ModelProto | None" = None) -> dict:
    """The report's ``source`` for an ONNX model (``proto``: the model at path ``model``, when already loaded)."""
    from onnxbridge.onnxio import load_onnx

    proto = proto or (load_onnx(model) if isinstance(model, (str, Path)) else model)
    inits = {t.name for t in proto.graph.initializer}
    inputs = [TensorSpec(i.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                       for d in i.type.tensor_type.shape.dim), None).as_dict()
              for i in proto.graph.input if i.name not in inits]
    path = str(model) if isinstance(model, (str, Path)) else None
    name = Path(path).name if path else proto.graph.name
    return {"frontend": "onnx", "framework": "onnx", "kind": "ONNX", "path": path,
            "description": f"ONNX model {name}", "inputs": inputs, "dynamic": []}


def read_onnx_inputs(path: Path) -> list[TensorSpec]:
    """The ONNX model's inputs (initializers aside) as onnxruntime lists them, read from the file's graph
    (no weights read, inline ones neither: ``load_in_place``; no session)."""
    import onnx

    from onnxbridge.inplace import load_in_place

    graph = load_in_place(path).graph
    inits = {t.name for t in graph.initializer}
    specs = []
    for i in graph.input:
        if i.name in inits:
            continue
        tensor = i.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else None
        specs.append(TensorSpec(i.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                              for d in tensor.shape.dim), dtype))
    return specs


def shown_name(path: Path) -> str:
    """A path as a message names it: the file name, or 'the converted model' for onnxbridge's scratch files."""
    return "the converted model" if path.name == "model.onnx" and "onnxbridge-" in str(path.parent) else path.name
