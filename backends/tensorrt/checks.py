"""``onnxbridge check --targets tensorrt``: what stops a model from becoming an engine, found without building."""
from __future__ import annotations

from pathlib import Path


def blockers(onnx_path: Path, context=None) -> list[str]:
    """Opset ceiling blockers, ops ``supports_operator`` refuses, and the nodes a dry parse rejects."""
    from onnxbridge.adapters import check as adapter_check
    from onnxbridge.adapters import default_opset
    from onnxbridge.backends.tensorrt import engine, flavours
    from onnxbridge.errors import UnsupportedError
    from onnxbridge.onnxio import load_onnx, save_onnx

    flavour = flavours.load()  # UnavailableError (exit 3, with the install hint) without TensorRT
    model = load_onnx(onnx_path)
    found: list[str] = []
    opset, ceiling = default_opset(model), flavour.opset_ceiling
    if opset > ceiling:
        found += [f"opset {opset} -> {ceiling} (the {flavour.name} parser's ceiling): {b}"
                  for b in adapter_check(model, ceiling)]
    with flavour.capture():
        builder = flavour.trt.Builder(flavour.logger())
        parser = flavour.trt.OnnxParser(builder.create_network(0), flavour.logger())
        refused: dict[str, list[str]] = {}
        for node in _nodes(model.graph):
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            if node.domain in ("", "ai.onnx") and parser.supports_operator(node.op_type):
                continue
            refused.setdefault(key, []).append(node.name or (node.output[0] if node.output else "?"))
    for op, names in refused.items():
        shown = ", ".join(f"'{n}'" for n in names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        found.append(f"op {op} is not supported by the {flavour.name} {flavour.version} parser without a plugin: "
                     f"node{'s' if len(names) > 1 else ''} {shown}")
    if found:  # a dry parse would only repeat these
        return found
    import tempfile

    with tempfile.TemporaryDirectory(prefix="onnxbridge-trt-check-") as tmp:
        path = Path(onnx_path)
        if opset > ceiling:
            from onnxbridge.adapters import adapt

            path = Path(tmp) / "adapted.onnx"
            save_onnx(adapt(load_onnx(onnx_path, load_external_data=True), ceiling), path)
        try:
            engine.parse(flavour, path, engine.network_flags(flavour, "fp32"))
        except UnsupportedError as exc:
            found.append(str(exc))
    return found


def _nodes(graph):
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _nodes(sub)
