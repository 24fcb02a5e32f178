"""The torch side of the source -> ONNX hop for localization: module outputs through forward hooks, matched to
the ONNX tensors the exporter made for each module.

The exporters record the module each ONNX node came from: the dynamo exporter in node metadata
(``pkg.torch.onnx.name_scopes``: the module paths, then the FX node), the TorchScript exporter in node names
(``/blocks.7/fc/Gemm``). A module's ONNX tensor is the one its last node hands out of the module's nodes with the
shape of the module's output (``onnxbridge.localize.scopes``). A module called several times maps call by call
where its nodes form one run per call; modules with no nodes (Identity, Dropout in eval) or no single tensor per
output are left out. Where several modules hand on the same tensor the deepest names it.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from onnxbridge.frontends.pytorch.model import to_numpy

from onnxbridge.localize.probe import Sides
from onnxbridge.localize.scopes import ScopedGraph, depth, segments

if TYPE_CHECKING:
    import onnx
    from onnxbridge.frontends.pytorch.model import TorchModel

NAME_SCOPES = "pkg.torch.onnx.name_scopes"


def node_scopes(model: "onnx.ModelProto") -> tuple[str | None, list[tuple[str, ...]]]:
    """(exporter, per node the module paths it lies in, outermost first; the root module left out).

    ``exporter`` is "dynamo" (metadata name scopes), "torchscript" (``/a/b/Op`` node names) or None where
    neither is recorded."""
    nodes = model.graph.node
    meta = [{p.key: p.value for p in n.metadata_props} for n in nodes]
    if any(NAME_SCOPES in m for m in meta):
        scopes = []
        for m in meta:
            try:
                names = ast.literal_eval(m.get(NAME_SCOPES, "[]"))
            except (ValueError, SyntaxError):
                names = []
            # the first entry is the root module, the last the FX node the ONNX node was made from
            scopes.append(tuple(n for n in names[1:-1] if n))
        return "dynamo", scopes
    if any(n.name.startswith("/") and n.name.count("/") >= 2 for n in nodes):
        scopes = []
        for n in nodes:
            parts = n.name.split("/")[1:-1] if n.name.startswith("/") else []
            scopes.append(tuple(".".join(parts[: i + 1]) for i in range(len(parts))))
        return "torchscript", scopes
    return None, []


def _leaves(out: Any) -> list[torch.Tensor | None]:
    """A module output's leaves: tensors, and None in place of anything else (their positions are kept)."""
    return [x if isinstance(x, torch.Tensor) else None for x in torch.utils._pytree.tree_leaves(out)]


class TorchProbe:
    """Runs the torch module with forward hooks on only the modules asked for; ``targets`` maps an ONNX tensor
    name to (module path, call index, output leaf index)."""

    def __init__(self, source: "TorchModel", targets: Mapping[str, tuple[str, int, int]], modules: Mapping[str, Any]):
        self.source, self.targets, self.modules = source, dict(targets), modules
        self.what = f"torch forward hooks on {source.description}"
        self.runs = 0

    def tensors(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        wanted: dict[str, dict[tuple[int, int], str]] = defaultdict(dict)
        for name in names:
            path, call, leaf = self.targets[name]
            wanted[path][(call, leaf)] = name
        got: dict[str, np.ndarray] = {}
        handles = []

        def hook_for(path: str):
            calls = [0]
            asked = wanted[path]

            def hook(_module, _args, out):
                call = calls[0]
                calls[0] += 1
                leaves = None
                for (c, leaf), name in asked.items():
                    if c == call:
                        leaves = _leaves(out) if leaves is None else leaves
                        if leaf < len(leaves) and leaves[leaf] is not None:
                            got[name] = to_numpy(leaves[leaf].detach().clone())  # later in-place ops cannot touch it
            return hook
        try:
            for path in wanted:
                handles.append(self.modules[path].register_forward_hook(hook_for(path)))
            self.source._forward(*self.source._with_feeds(feeds))
        finally:
            for h in handles:
                h.remove()
        self.runs += 1
        missing = [n for n in names if n not in got]
        if missing:
            raise RuntimeError(f"torch did not show {', '.join(missing[:3])} (module "
                               f"{self.targets[missing[0]][0]} was not called as when it was exported)")
        return {n: got[n] for n in names}


def _profile(source: "TorchModel", modules: Mapping[str, Any]) -> dict[str, list[list[tuple | None]]]:
    """Per module path, per call, the shapes of its output leaves (None for a leaf that is no float tensor), from
    one run on the source's sample."""
    seen: dict[str, list[list[tuple | None]]] = defaultdict(list)

    def hook_for(path: str):
        def hook(_module, _args, out):
            seen[path].append([tuple(t.shape) if t is not None and t.is_floating_point() else None
                               for t in _leaves(out)])
        return hook
    handles = [m.register_forward_hook(hook_for(p)) for p, m in modules.items()]
    try:
        source._forward(source.args, source.kwargs)
    finally:
        for h in handles:
            h.remove()
    return seen


def torch_sides(source: "TorchModel", model: "onnx.ModelProto") -> Sides | None:
    """The torch side of the source -> ONNX hop, or None where the export records no module scopes (or the
    source is a TorchScript module or an ExportedProgram, whose submodules take no hooks)."""
    if source.program is not None or isinstance(source.module, torch.jit.ScriptModule) or \
            not isinstance(source.module, torch.nn.Module):
        return None
    exporter, scopes = node_scopes(model)
    if exporter is None:
        return None
    modules = {p: m for p, m in source.module.named_modules() if p}
    # the TorchScript exporter traced a wrapper (``_TensorsOnly``) when the module takes non-tensor arguments
    prefix = "inner." if exporter == "torchscript" and any(s and s[0] == "inner" for s in scopes) else ""
    by_module: dict[str, list[int]] = defaultdict(list)
    for i, paths in enumerate(scopes):
        for p in paths:
            p = p[len(prefix):] if prefix and p.startswith(prefix) else p
            if p in modules:
                by_module[p].append(i)
    graph = ScopedGraph(model)
    calls = _profile(source, {p: modules[p] for p in by_module})
    chosen: dict[str, tuple[str, int, int]] = {}
    for path, nodes in by_module.items():
        made = calls.get(path, [])
        runs = [tuple(nodes)] if len(made) == 1 else segments(nodes)
        if not made or len(runs) != len(made):
            continue
        for call, (leaves, run) in enumerate(zip(made, runs)):
            for leaf, shape in enumerate(leaves):
                if shape is None or leaves.count(shape) > 1:
                    continue  # two leaves of one shape (an LSTM's h and c): which is which is not recorded
                tensor = graph.output_of(run, shape)
                if tensor is None or tensor in graph.inputs:
                    continue
                old = chosen.get(tensor)
                if old is None or depth(path) > depth(old[0]):
                    chosen[tensor] = (path, call, leaf)
    if not chosen:
        return None
    names = {t: _source_name(path, call, leaf, len(calls[path]), sum(s is not None for s in calls[path][call]))
             for t, (path, call, leaf) in chosen.items()}
    checkpoints = graph.checkpoints(names)
    how = ("the dynamo exporter's name scopes (node metadata)" if exporter == "dynamo"
           else "the TorchScript exporter's node names")
    return Sides(TorchProbe(source, chosen, {p: modules[p] for p, _, _ in chosen.values()}), checkpoints,
                 f"torch forward hooks on {len({p for p, _, _ in chosen.values()})} modules matched to ONNX "
                 f"tensors through {how}")


def _source_name(path: str, call: int, leaf: int, calls: int, leaves: int) -> str:
    """``blocks.7``; ``fc@1`` for a module's second call; ``lstm[0]`` for one leaf of a tuple output."""
    return path + (f"@{call}" if calls > 1 else "") + (f"[{leaf}]" if leaves > 1 else "")
