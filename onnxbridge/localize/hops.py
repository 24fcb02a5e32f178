"""Localization for each kind of hop, as the spine runs it: which two sides are probed, and a block that says why
when a hop cannot be localized (never an error that ends the run)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    from onnxbridge.records import Hop
    from onnxbridge.plugins import SourceModel
    from onnxbridge.specs import Sample
    from onnxbridge.validation import Tolerance

MODES = ("off", "auto", "on")


def mode_of(value: Any, default: str) -> str:
    """``--localize`` as one of MODES: True is "on", False/None the default; ``auto`` localizes failed hops only,
    ``on`` every hop that compared numbers."""
    if value is None:
        return default
    if value is True:
        return "on"
    if value is False:
        return "off"
    if value not in MODES:
        raise BadInputError(f"--localize {value!r} is not one of {', '.join(MODES)}")
    return value


def wanted(mode: str, hop: "Hop") -> bool:
    """Whether ``hop`` gets a localization: it compared outputs (a hop that failed before any comparison, or was
    skipped, has nothing to bisect) and failed, or ``mode`` is "on"."""
    compared = bool(hop.outputs) and hop.status in ("passed", "failed")
    return compared and (mode == "on" or (mode == "auto" and hop.status == "failed"))


def tolerance_of(hop: "Hop | dict") -> "Tolerance":
    """The tolerance localization holds the hop's tensors to: the hop's ``atol``/``rtol`` (after its runner raised
    them, e.g. the simulator's fp16; kept beside any rule's own budget) where it records them, else its precision's
    defaults (``onnxbridge.compare.TOLERANCES``; fp32 for a precision it does not know), and the hop's rule with its
    ``factor``: a hop judged against the fp16 emulation has its tensors judged against the emulation's tensors
    (``onnxbridge.localize.tolerance``), any other elementwise. ``hop``: a Hop, or its record in a report."""
    import dataclasses

    from onnxbridge.compare import TOLERANCES
    from onnxbridge.records import Hop
    from onnxbridge.validation import FP16_FACTOR, Tolerance

    t = (hop.tolerance if isinstance(hop, Hop) else hop.get("tolerance")) or {}
    precision = t.get("precision") if t.get("precision") in TOLERANCES else "fp32"
    atol, rtol = TOLERANCES[precision]
    atol = float(t["atol"]) if t.get("atol") is not None else atol
    rtol = float(t["rtol"]) if t.get("rtol") is not None else rtol
    per = tuple((n, v.get("atol"), v.get("rtol")) for n, v in (t.get("per_output") or {}).items()
                if isinstance(v, dict))
    given = {"atol": atol, "rtol": rtol, "precision": precision, "per_output": per, "reason": t.get("reason")}
    if t.get("rule"):  # only "fp16-emulation" changes how tensors are judged here; the others are elementwise
        given.update(rule=str(t["rule"]), factor=float(t.get("factor") or FP16_FACTOR))
    known = {f.name for f in dataclasses.fields(Tolerance)}
    return Tolerance(**{k: v for k, v in given.items() if k in known})


# the fp16 range check's words (onnxbridge.fp16eval): the node that made inf/NaN from finite inputs
RANGE_CHECK = re.compile(r"fp16: node '(?P<node>.*?)' \((?P<op>[^)]*)\) made (?:inf|NaN) in '(?P<tensor>.*?)' "
                         r"from finite inputs")


def suspects_of(hop: dict) -> list[dict]:
    """Nodes a hop's own checks already named (its record's errors and notes): the fp16 range check's, as
    ``{"node", "op", "tensor", "note"}`` (the note's line up to its colon-separated explanation)."""
    out = []
    for line in [*(hop.get("errors") or ()), *(hop.get("notes") or ())]:
        found = RANGE_CHECK.search(str(line))
        if found and not any(s["tensor"] == found["tensor"] for s in out):
            out.append({**found.groupdict(), "note": found.group(0)})
    return out


def attach(hop: "Hop", mode: str, make: Callable[[], dict], progress=None) -> None:
    """Set ``hop.localization`` when ``wanted``: ``make()``'s block, or one saying why it could not run (a hop
    the backend cannot run here, a native crash, a bug of ours: the verdict stands either way)."""
    from onnxbridge.errors import HopSkipped

    from onnxbridge.localize.bisect import suspecting

    if not wanted(mode, hop):
        return
    step = progress.step(f"Localizing the divergence of {hop.src} -> {hop.dst}") if progress else None
    try:
        with suspecting(suspects_of({"errors": hop.errors, "notes": hop.notes})):
            if step is not None:
                with step:
                    hop.localization = make()
            else:
                hop.localization = make()
        _agree(hop)
    except HopSkipped as exc:
        hop.localization = {"skipped": exc.one_line(), "method": "none"}
    except Exception as exc:  # noqa: BLE001 - localization explains a verdict; its failure must not change it
        text = " ".join(str(exc).split())[:300]
        hop.localization = {"skipped": f"localization could not run: {type(exc).__name__}: {text}", "method": "none"}


def _agree(hop: "Hop") -> None:
    """A passed hop names no first divergent node: a checkpoint out of tolerance whose difference never reaches
    the outputs (hidden again downstream, or within the rule that judged the outputs) is said in ``method``."""
    loc = hop.localization or {}
    first = loc.get("first_divergent")
    if not hop.passed or not first:
        return
    loc["first_divergent"] = None
    loc["method"] = (f"{loc.get('method') or ''}; '{first['output']}' (node '{first['node']}') is out of its "
                     "elementwise tolerance, but the hop's outputs pass: no first divergent node for a passed hop")


def source_to_onnx(src: "SourceModel", onnx_path: Path, samples: "Sequence[Sample]", tol: "Tolerance",
                   mapped_on: Path | None = None) -> dict:
    """Source framework -> ONNX: the frontend's probe (``SourceModel.probe``) against prefix models of the ONNX
    file. ``mapped_on``: the exporter's model, before the opset adapters renamed tensors (the frontend maps its
    names onto that one)."""
    from onnxbridge.localize.bisect import localize
    from onnxbridge.localize.onnx_probe import OnnxProbe, emulation_probe, match_tensors
    from onnxbridge.onnxio import load_onnx

    exported = load_onnx(mapped_on or onnx_path)
    sides = src.probe(exported)
    if sides is None:
        return {"skipped": f"the {src.frontend} frontend records nothing that maps {src.kind} intermediates onto "
                           "the ONNX graph (its outputs are all there is to compare)",
                "method": "none"}
    rename = match_tensors(exported, load_onnx(onnx_path)) if mapped_on is not None else None
    candidate = OnnxProbe(onnx_path, rename=rename)
    # an ONNX source's prefix models have an fp16 emulation; a framework's hooks have none (elementwise there)
    emulation = emulation_probe(sides.probe, tol) if isinstance(sides.probe, OnnxProbe) else None
    try:
        return localize(sides.probe, candidate, sides.checkpoints, samples, tol, method=sides.method,
                        emulation=emulation)
    finally:
        _close(sides.probe)
        _close(emulation)
        candidate.close()


def onnx_to_onnx(reference: Path, candidate: Path, samples: "Sequence[Sample]", tol: "Tolerance") -> dict:
    """Two ONNX models (the adapters' hop): tensors matched by name, else by graph position."""
    from onnxbridge.localize.onnx_probe import localize_onnx_pair

    return localize_onnx_pair(reference, candidate, samples, tol)


def onnx_to_backend(backend: str, onnx_path: Path, artifact: Path, samples: "Sequence[Sample]",
                    tol: "Tolerance") -> dict:
    """ONNX -> a backend's artifact: prefix models of the ONNX file against the backend's own probe (``probe`` of
    its module: MIL vars, IR outputs, simulator prefixes), which raises HopSkipped where it cannot run here."""
    from onnxbridge.localize.bisect import localize
    from onnxbridge.localize.onnx_probe import OnnxProbe, emulation_probe, onnx_checkpoints
    from onnxbridge.plugins import BACKENDS

    module = BACKENDS.module(backend)
    if not hasattr(module, "probe"):
        return {"skipped": f"the {backend} backend offers no probe of its intermediates", "method": "none"}
    reference = OnnxProbe(onnx_path)
    emulation = emulation_probe(reference, tol)
    try:
        sides = module.probe(Path(artifact), Path(onnx_path), onnx_checkpoints(reference.model))
        try:
            return localize(reference, sides.probe, sides.checkpoints, samples, tol, method=sides.method,
                            emulation=emulation)
        finally:
            _close(sides.probe)
    finally:
        reference.close()
        _close(emulation)


def _close(probe: Any) -> None:
    close = getattr(probe, "close", None)
    if close is not None:
        close()
