"""What the backends' localization probes share: opening one in the worker (``open_sides``) and narrowing the
reference checkpoints to the tensors the backend can show (``visible``). Backends that run ONNX models cut them with
``onnxbridge.localize.onnx_probe.prefix_model``."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from onnxbridge.localize.probe import Checkpoint, Sides


def visible(checkpoints: Sequence[Checkpoint], shown: Mapping[str, str | None]) -> list[Checkpoint]:
    """The checkpoints whose tensor the backend shows (``shown``: tensor -> the backend's name for what makes it,
    which becomes ``source`` where given). A kept checkpoint's ``inputs`` that the backend does not show (fused
    away) are replaced by their own inputs, back to the nearest shown tensors or graph inputs, so ``inputs_ok``
    judges what the backend really computed from."""
    by_tensor = {c.tensor: c for c in checkpoints}
    effective: dict[str, tuple[str, ...]] = {}

    def reach(name: str) -> tuple[str, ...]:
        if name in shown or name not in by_tensor:
            return (name,)
        if name not in effective:
            effective[name] = ()  # a cycle cannot occur in a topological list; this guards a malformed one
            effective[name] = _unique(n for i in by_tensor[name].inputs for n in reach(i))
        return effective[name]

    kept = []
    for c in checkpoints:
        if c.tensor in shown:
            inputs = _unique(n for i in c.inputs for n in reach(i))
            kept.append(replace(c, inputs=inputs, source=shown[c.tensor] or c.source))
    return kept


def _unique(names) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def open_sides(spec, step: str, checkpoints: Sequence[Checkpoint], how: str) -> Sides:
    """Open the probe ``spec`` describes in the worker, ask it which checkpoint tensors it shows (its
    ``shows(names) -> {tensor: source}``) and say in ``method`` how many, and which were not (``how``: how the
    names were matched, in words)."""
    from onnxbridge.worker import open_probe

    probe = open_probe(spec, step)
    shown = probe.ask("shows", [c.tensor for c in checkpoints])
    kept = visible(checkpoints, shown)
    missing = [c.tensor for c in checkpoints if c.tensor not in shown]
    method = f"{how}: {len(kept)} of {len(checkpoints)} checkpoints shown"
    if missing:
        method += f" (not shown, e.g. fused away: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})"
    return Sides(probe, kept, method)
