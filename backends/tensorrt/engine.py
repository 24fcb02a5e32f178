"""ONNX -> TensorRT engine: parse with OnnxParser (errors name the node), optimization profiles, workspace limit,
timing cache, progress while building; the engine and its sidecar of facts are written atomically."""
from __future__ import annotations

import time
import warnings as pywarnings
from pathlib import Path
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    from onnxbridge.backends.tensorrt.flavours import Flavour
    from onnxbridge.plugins import BuildResult


def network_flags(flavour: "Flavour", precision: str) -> int:
    """Strongly typed wherever the flag exists, except fp16 through the builder flag (that needs weak typing)."""
    trt = flavour.trt
    if precision == "fp16" and flavour.features["fp16_flag"]:
        return 0
    if flavour.features["strongly_typed_flag"]:
        return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


def parse(flavour: "Flavour", onnx_path: Path, flags: int = 0):
    """(builder, network, parser) for the model at ``onnx_path``; UnsupportedError naming every rejected node,
    BadInputError for a graph the parser would crash on (``malformed``)."""
    import onnx

    broken = malformed(onnx.load(str(onnx_path), load_external_data=False).graph)
    if broken:
        raise BadInputError(f"'{Path(onnx_path).name}' is not a well-formed ONNX graph: {'; '.join(broken[:5])}"
                            + (f" (+{len(broken) - 5} more)" if len(broken) > 5 else ""))
    trt = flavour.trt
    with flavour.capture() as log:
        builder = trt.Builder(flavour.logger())
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, flavour.logger())
        ok = parser.parse_from_file(str(onnx_path))
    if not ok or parser.num_errors:
        nodes = onnx.load(str(onnx_path), load_external_data=False).graph.node
        problems = [describe_error(parser.get_error(i), nodes) for i in range(parser.num_errors)]
        if not problems:
            problems = [m for sev, m in log if sev in ("ERROR", "INTERNAL_ERROR")][:3] or ["no reason given"]
        raise UnsupportedError(f"the {flavour.name} {flavour.version} ONNX parser rejects the model: "
                               + "; ".join(problems[:5])
                               + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""),
                               hint="run 'onnxbridge check MODEL --targets tensorrt' to list every blocker; replace "
                                    "the op before export or provide a TensorRT plugin")
    return builder, network, parser, [m for _, m in log]


def malformed(graph) -> list[str]:
    """Nodes, in ``graph`` and its subgraphs, that TensorRT's ONNX parser crashes on (SIGSEGV) rather than
    rejects: a node without outputs (every ONNX op has one)."""
    out = []
    for i, node in enumerate(graph.node):
        if not any(node.output):
            out.append(f"node '{node.name or f'#{i}'}' ({node.op_type}) has no output")
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out += malformed(sub)
    return out


def describe_error(err, nodes) -> str:
    """One parser error as 'node NAME (OP): reason'."""
    index = err.node()
    name, op = err.node_name(), err.node_operator()
    if 0 <= index < len(nodes):
        name = name or nodes[index].name or (nodes[index].output[0] if nodes[index].output else "")
        op = op or nodes[index].op_type
        domain = nodes[index].domain
        op = f"{domain}::{op}" if domain not in ("", "ai.onnx") else op
    reason = " ".join(err.desc().split())
    if reason.lower() in ("", "false", "0"):  # the parser's bare assertion text for an op it has no importer for
        reason = "this parser does not support the op"
    elif "Plugin not found" in reason:
        reason = f"no TensorRT importer or plugin for this op ({reason})"
    where = f"node '{name}' ({op})" if name or op else "the model"
    return f"{where}: {reason} [{err.code().name}]"


def io_of(network) -> tuple[list[dict], list[dict]]:
    def row(t) -> dict:
        return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name.lower()}

    return ([row(network.get_input(i)) for i in range(network.num_inputs)],
            [row(network.get_output(i)) for i in range(network.num_outputs)])


def build(flavour: "Flavour", onnx_path: Path, output: Path, *, precision: str, profiles_given: dict, context,
          workspace: int | None, timing_cache: str | None, prep: dict) -> "BuildResult":
    """Build and write the engine (its sidecar holds the facts); what was built, with the parser's and builder's
    warnings."""
    from onnxbridge.backends.tensorrt import artifact, profiles
    from onnxbridge.plugins import BuildResult

    trt = flavour.trt
    t0 = time.perf_counter()
    builder, network, parser, parse_log = parse(flavour, onnx_path, network_flags(flavour, precision))
    inputs, outputs = io_of(network)
    shape_tensors = [network.get_input(i).name for i in range(network.num_inputs)
                     if network.get_input(i).is_shape_tensor]
    if shape_tensors:
        raise UnsupportedError(f"input(s) {', '.join(shape_tensors)} are shape tensors (their values set shapes); "
                               "onnxbridge builds profiles for execution tensors only",
                               hint="fold them into constants before export")
    plan = profiles.plan([(i["name"], tuple(i["shape"])) for i in inputs], profiles_given, context)
    warnings = [f"TensorRT parser: {m}" for m in parse_log]
    with flavour.capture() as log:
        config = builder.create_builder_config()
        if workspace is not None:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace) << 20)
        if precision == "fp16" and flavour.features["fp16_flag"]:
            config.set_flag(trt.BuilderFlag.FP16)
        if plan:
            profile = builder.create_optimization_profile()
            for name, p in plan.items():
                profile.set_shape(name, p["min"], p["opt"], p["max"])
            config.add_optimization_profile(profile)
        cache = _load_cache(flavour, config, timing_cache, warnings)
        monitor = _monitor(flavour, context)
        if monitor is not None:
            config.progress_monitor = monitor
        plan_bytes = builder.build_serialized_network(network, config)
        if plan_bytes is None:
            errors = [m for sev, m in log if sev in ("ERROR", "INTERNAL_ERROR")]
            raise UnsupportedError(f"{flavour.name} {flavour.version} could not build the engine: "
                                   + ("; ".join(errors[:3]) or "no reason logged"),
                                   hint="see 'onnxbridge check MODEL --targets tensorrt'; dynamic inputs need "
                                        "--shapes NAME:MIN/OPT/MAX")
        data = bytes(plan_bytes)
        cache["saved"] = _save_cache(config, timing_cache, warnings) if timing_cache else False
    warnings += [f"TensorRT builder: {m}" for _, m in log]
    build_s = time.perf_counter() - t0
    facts = {**flavour.facts(), "precision": precision, "precision_in": prep.pop("precision_in"),
             "profiles": plan, "workspace_mb": workspace,
             "timing_cache": cache, "opset": prep.pop("opset"), "preflight": prep,
             "network_layers": network.num_layers, "inputs": inputs, "outputs": outputs,
             "build_s": round(build_s, 4), "engine_bytes": len(data)}
    artifact.write(output, data, facts)
    return BuildResult(facts, warnings=_dedupe(warnings), precision=applied_precision(flavour, precision))


def applied_precision(flavour: "Flavour", precision: str) -> dict:
    """What the engine computes in, as far as the build decides it (the report's ``artifact.precision``)."""
    if precision == "int8":  # Q/DQ in the graph: int8 weights and activations where TensorRT fuses them
        return {"weights": "int8", "compute": "int8 (Q/DQ in the graph; TensorRT keeps unfused layers in fp32)"}
    if precision == "fp16" and flavour.features["fp16_flag"]:  # weakly typed: TensorRT may still pick fp32 kernels
        return {"weights": "fp16 where TensorRT chose fp16 kernels", "compute": "fp16 allowed (builder flag FP16)"}
    if precision == "fp16":
        return {"weights": "fp16", "compute": "fp16 (strongly typed graph; LayerNormalization kept in fp32)"}
    return {"weights": "fp32", "compute": "fp32"}


def _load_cache(flavour: "Flavour", config, path: str | None, warnings: list[str]) -> dict:
    """Give the builder a timing cache (the file's, if it exists); TensorRT-RTX says its cache ops are no-ops."""
    if path is None:
        return {"path": None, "loaded": False, "saved": False}
    if not flavour.features["timing_cache"]:
        warnings.append(f"{flavour.name} {flavour.version} has no timing cache API; --timing-cache ignored")
        return {"path": str(path), "loaded": False, "saved": False}
    file = Path(path)
    blob = b""
    if file.is_file():
        blob = file.read_bytes()
    elif file.exists():
        raise BadInputError(f"--timing-cache '{path}' is not a file")
    with pywarnings.catch_warnings(record=True) as caught:
        pywarnings.simplefilter("always")
        try:
            cache = config.create_timing_cache(blob)
        except Exception as exc:  # a corrupt file: start from an empty cache rather than fail the build
            warnings.append(f"timing cache '{path}' unreadable ({' '.join(str(exc).split())[:120]}); starting empty")
            blob, cache = b"", config.create_timing_cache(b"")
        ignored = not config.set_timing_cache(cache, False)
    notes = [" ".join(str(w.message).split()) for w in caught]
    if ignored and blob:
        warnings.append(f"timing cache '{path}' does not match this TensorRT/GPU and was not used")
    warnings += [f"timing cache: {n}" for n in notes]
    return {"path": str(path), "loaded": bool(blob) and not ignored, "bytes_in": len(blob),
            "effective": not any("no-op" in n for n in notes)}


def _save_cache(config, path: str, warnings: list[str]) -> bool:
    from onnxbridge.atomic import atomic_write_bytes

    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore")
        cache = config.get_timing_cache()
        blob = bytes(cache.serialize()) if cache is not None else b""
    if not blob:
        warnings.append("the builder returned no timing cache to save")
        return False
    atomic_write_bytes(path, blob)
    return True


def _monitor(flavour: "Flavour", context):
    """A progress monitor printing the builder's top-level phases when progress is on (builds take minutes)."""
    from onnxbridge.plugins import BuildContext

    context = context or BuildContext()
    progress = context.progress
    if progress is None or not getattr(progress, "enabled", False) or not flavour.features["progress_monitor"]:
        return None
    trt = flavour.trt

    class Monitor(trt.IProgressMonitor):
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self.t0 = time.perf_counter()
            self.depth: dict[str, int] = {}

        def phase_start(self, parent, name, steps) -> None:
            self.depth[name] = self.depth.get(parent, -1) + 1 if parent else 0
            if self.depth[name] <= 1:
                progress.console.print(f"[dim]  TensorRT: {'  ' * self.depth[name]}{name} ({steps} steps) "
                                       f"+{time.perf_counter() - self.t0:.1f}s[/]")

        def step_complete(self, name, step) -> bool:
            return True  # never cancel

        def phase_finish(self, name) -> None:
            self.depth.pop(name, None)

    return Monitor()


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
