"""The Paddle side of the source -> ONNX hop for localization: results of the Paddle program's ops, fetched from
Paddle's static executor, matched to the ONNX tensors paddle2onnx made from them.

paddle2onnx names the ONNX tensor that holds an op's result ``p2o.<op>.<k>.<j>``: result ``j`` of the ``k``-th op
of that type in the PIR program (``p2o.pd_op.gelu.1.0``); the graph outputs it names are renamed by the export
(``PaddleModel.fetch_names``). The probe runs the inference program export converts (saved again, as export
does) with those values fetched. ``source`` is the op (``pd_op.matmul.1``), after the layer whose parameter it
reads where it reads one (``blocks.1.fc: pd_op.matmul.1``). An old-IR program (``.pdmodel``) has no such names.
"""
from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxbridge.localize.probe import Sides
from onnxbridge.localize.scopes import ScopedGraph

if TYPE_CHECKING:
    import onnx
    from onnxbridge.frontends.paddle.model import PaddleModel

P2O = re.compile(r"^p2o\.(.+)\.(\d+)\.(\d+)$")


class PaddleProbe:
    """Runs the saved PIR program in Paddle's static executor, fetching the asked ops' results; ``targets`` maps
    an ONNX tensor name to its ``p2o.<op>.<k>.<j>`` name."""

    def __init__(self, source: "PaddleModel", folder: "tempfile.TemporaryDirectory", targets: Mapping[str, str]):
        self.source, self._folder, self.targets = source, folder, dict(targets)
        self.folder = Path(folder.name)  # removed with the probe
        self.what = f"Paddle static executor on the inference program of {source.description}"
        self.runs = 0
        self._loaded: tuple[Any, Any, Any, dict[str, Any]] | None = None

    def _program(self, paddle) -> tuple[Any, Any, Any, dict[str, Any]]:
        """(program, executor, scope, p2o name -> value), loaded once; the program's own fetch ops removed."""
        if self._loaded is None:
            scope = paddle.static.Scope()
            exe = paddle.static.Executor(paddle.CPUPlace())
            with paddle.static.scope_guard(scope):
                program, _, fetches = paddle.static.load_inference_model(str(self.folder / "model"), exe)
            values = op_results(program)
            values.update((f"fetch.{i}", v) for i, v in enumerate(fetches))  # the graph outputs, in order
            block = program.global_block()
            for op in list(block.ops):
                if op.name() == "pd_op.fetch":
                    block.remove_op(op)
            self._loaded = (program, exe, scope, values)
        return self._loaded

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from onnxbridge.frontends.paddle.model import import_paddle

        from onnxbridge.quiet import native_output_silenced

        paddle = import_paddle()
        paddle.enable_static()
        try:
            program, exe, scope, values = self._program(paddle)
            asked = list(dict.fromkeys(self.targets[n] for n in names))
            feed = {s.name: np.ascontiguousarray(feeds[s.name]) for s in self.source.input_specs}
            with paddle.static.scope_guard(scope), native_output_silenced():
                got = exe.run(program, feed=feed, fetch_list=[values[a] for a in asked])
        finally:
            paddle.disable_static()
        self.runs += 1
        by_name = {a: np.asarray(v) for a, v in zip(asked, got)}
        return {n: by_name[self.targets[n]] for n in names}


CONTROL_FLOW = ("pd_op.if", "pd_op.while")  # ops with blocks of their own: what their blocks hold is counted too


def op_results(program: Any) -> dict[str, Any]:
    """``p2o.<op>.<k>.<j>`` -> the PIR value: result ``j`` of the ``k``-th op of type ``<op>``, in program order;
    up to the first control-flow op (the ops inside its blocks would shift the counts after it)."""
    count: dict[str, int] = {}
    out = {}
    for op in program.global_block().ops:
        kind = op.name()
        if kind in CONTROL_FLOW:
            break
        k = count.get(kind, 0)
        count[kind] = k + 1
        for j in range(op.num_results()):
            out[f"p2o.{kind}.{k}.{j}"] = op.result(j)
    return out


def _shape(value: Any) -> tuple[int | None, ...] | None:
    """A PIR value's shape, unknown dims (-1) as None."""
    try:
        return tuple(None if d < 0 else int(d) for d in value.shape)
    except Exception:  # noqa: BLE001 - a value without a dense shape: no check
        return None


def _param_layers(source: "PaddleModel") -> dict[str, str]:
    """Parameter name (``linear_1.w_0``) -> the path of the layer that owns it, for a live layer."""
    if source.layer is None:
        return {}
    return {p.name: path.rsplit(".", 1)[0] if "." in path else "" for path, p in source.layer.named_parameters()}


def _readers_of_params(program: Any) -> dict[str, str]:
    """p2o name -> the parameter its op reads (the first one), for ops that read a parameter."""
    params = {}
    count: dict[str, int] = {}
    for op in program.global_block().ops:
        kind = op.name()
        k = count.get(kind, 0)
        count[kind] = k + 1
        for operand in op.operands_source() if hasattr(op, "operands_source") else []:
            maker = operand.get_defining_op()
            if maker is not None and maker.name() == "builtin.parameter":
                name = maker.attrs().get("parameter_name")
                if name:
                    for j in range(op.num_results()):
                        params[f"p2o.{kind}.{k}.{j}"] = name
                    break
    return params


def paddle_sides(source: "PaddleModel", model: "onnx.ModelProto") -> Sides | None:
    """The Paddle side of the source -> ONNX hop, or None where the program is no PIR program (or no ONNX tensor
    carries a paddle2onnx op name)."""
    from onnxbridge.frontends.paddle.model import import_paddle

    graph = ScopedGraph(model)
    p2o = {o: o for node in graph.nodes for o in node.output if o and P2O.match(o) and graph.is_float(o)}
    if not p2o:
        return None
    folder = tempfile.TemporaryDirectory(prefix="onnxbridge-paddle-probe-")
    program_file, _ = source._inference_files(Path(folder.name))
    if program_file.suffix != ".json":
        folder.cleanup()
        return None
    paddle = import_paddle()
    probe = PaddleProbe(source, folder, {})
    paddle.enable_static()
    try:
        program, _, _, values = probe._program(paddle)
        params = _readers_of_params(program)
    finally:
        paddle.disable_static()
    targets = {t: name for t, name in p2o.items() if name in values and graph.fits(t, _shape(values[name]))}
    if not targets:
        return None
    for i, out in enumerate(model.graph.output):  # the export renamed them; the program's fetch targets
        if f"fetch.{i}" in values and out.name in graph.producer and graph.is_float(out.name) and \
                graph.fits(out.name, _shape(values[f"fetch.{i}"])):
            targets[out.name] = f"fetch.{i}"
    probe.targets = targets
    layers = _param_layers(source)
    names = {}
    for t, name in targets.items():
        if name.startswith("fetch."):
            names[t] = f"{values[name].get_defining_op().name()} (output {name[len('fetch.'):]})"
            continue
        op = name[len("p2o."):].rsplit(".", 1)[0]  # pd_op.matmul.1
        layer = layers.get(params.get(name, ""))
        names[t] = f"{layer}: {op}" if layer else op
    return Sides(probe, graph.checkpoints(names),
                 f"Paddle op results ({len(targets)} ops) fetched from the PIR program, matched to ONNX tensors "
                 "through paddle2onnx's tensor names (p2o.<op>.<index>)")
