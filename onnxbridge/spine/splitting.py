"""``--split-tail`` in a conversion: where the backend's own check says to cut (``find_cut``), and the two hops that
check what was built (``split_hops``): the backend's artifact against the head it was built from, and the artifact
feeding onnxruntime on the tail, as one pipeline, against the source framework."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxbridge.errors import BadInputError, UnsupportedError
from onnxbridge.records import Hop, HopKind
from onnxbridge.specs import InputSpec, Sample, TensorSpec

from onnxbridge.spine.artifacts import backend_libraries, hop_name, shown_name

MAX_CHECKS = 16  # the backend's check on the head, at most this many times (each adds nodes to the tail)


def refuse_split(to: str, backend: Any) -> None:
    """``--split-tail`` where there is no backend to cut for: the artifact is the ONNX model onnxruntime runs whole."""
    if getattr(backend, "ONNX_ARTIFACT", False):
        raise BadInputError(f"--split-tail cuts off the part of the model a backend cannot take, for onnxruntime to "
                            f"run beside it; --to {to} writes the whole model for onnxruntime: name a backend with "
                            "--to (or leave --split-tail out)")


def check_context(backend: Any, context: Any, model_path: Path) -> Any:
    """The build's ``context`` as the backend's check should see it: a backend whose artifacts have static shapes
    (``KEEPS_DYNAMIC = False``) builds an input with dynamic dims at the sample's shape when ``--input-shape`` does not
    fix it, so its check gets that shape too."""
    from dataclasses import replace

    from onnxbridge.onnxio import load_onnx

    if getattr(backend, "KEEPS_DYNAMIC", True):
        return context
    graph = load_onnx(model_path).graph
    inits = {t.name for t in graph.initializer}
    fixed = context.inputs.fixed()
    added = [TensorSpec(i.name, tuple(context.sample_shapes[i.name]), None) for i in graph.input
             if i.name not in inits and i.name not in fixed and i.name in context.sample_shapes
             and any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)]
    return replace(context, inputs=InputSpec((*context.inputs.shapes, *added), context.inputs.dynamic))


def find_cut(to: str, context: Any, whole: Path, head: Path, tail: Path) -> dict | None:
    """Cut the ONNX model at ``whole`` where backend ``to`` stops taking it: its ``check`` (what ``onnxbridge check
    --targets`` runs) names the nodes it refuses; they and everything downstream go to the tail, and the head is
    checked again (a cut can leave the backend something new to refuse, e.g. a shape that only folded before) until
    the backend takes it whole. Writes the head to ``head`` and the tail to ``tail``; returns the cut's facts
    (``onnxbridge.split.Cut.facts``, with ``checks``: how many times the check ran), or None when the backend takes
    the whole model. UnsupportedError (one line) when a blocker names no node a cut can move."""
    from onnxbridge.onnxio import load_onnx
    from onnxbridge.plugins import BACKENDS
    from onnxbridge.split import refused_nodes
    from onnxbridge.worker import call

    module, library = BACKENDS.plugin(to).module, backend_libraries(to)
    skeleton = load_onnx(whole)  # names only: the weights stay on disk
    refused: dict[str, str] = {}
    facts, path = None, whole
    for checks in range(1, MAX_CHECKS + 1):
        found = call(f"{module}:check", (path, context), step=f"checking {shown_name(path)} for {to}",
                     library=library)
        if not found:
            return None if facts is None else {**facts, "checks": checks}
        named, unnamed = refused_nodes(found, skeleton)
        new = {k: v for k, v in named.items() if k not in refused}
        if not new:
            raise UnsupportedError(f"--split-tail: {to} refuses what no cut before a node removes: "
                                   f"{' '.join((unnamed or found)[0].split())[:400]}")
        refused.update(new)
        facts = call("onnxbridge.split:cut_file", (str(whole), str(head), str(tail), refused),
                     step=f"cutting {shown_name(whole)} before the nodes {to} refuses")
        path = head
    raise UnsupportedError(f"--split-tail: {to} still refuses part of the head after {MAX_CHECKS} cuts: "
                           f"{' '.join(found[0].split())[:400]}")


def split_hops(src: Any, to: str, artifact: Path, built_runner: Any, head: Path, tail: Path, outputs: list[str],
               samples: list[Sample], tol: Any, source: Any, latency_runs: int, precision: str) -> list[Hop]:
    """The hops of a split conversion after the first: the backend's artifact against onnxruntime on the head it was
    built from (``onnx:head -> BACKEND``, kind ``backend``), and the artifact feeding onnxruntime on the tail against
    the source framework's outputs (``FRONTEND -> BACKEND+onnxruntime``, kind ``pipeline``): the whole model as it
    is deployed, judged by what its head computes (fp16 against an emulation of the same pipeline: the head in fp16,
    the tail as it runs). One runner of the artifact serves both, run once per sample (``split.Reused``); where it
    cannot run here both are skipped."""
    from onnxbridge import runtime
    from onnxbridge.errors import ArtifactMismatch, HopSkipped
    from onnxbridge.spine.hops import _open_backend_runner, fp16_emulation
    from onnxbridge.split import Pipeline, Reused
    from onnxbridge.validation import failed_hop, skipped_hop, validate_hop

    name = hop_name(to)
    joined = f"{name}+onnxruntime"
    try:
        candidate = Reused(_open_backend_runner(to, built_runner, artifact, head))
    except HopSkipped as exc:
        return [skipped_hop(HopKind.BACKEND, "onnx:head", name, samples, tol, exc.one_line()),
                skipped_hop(HopKind.PIPELINE, src.frontend, joined, samples, tol, exc.one_line())]
    except ArtifactMismatch as exc:
        return [failed_hop(HopKind.BACKEND, "onnx:head", name, samples, tol, exc.one_line()),
                failed_hop(HopKind.PIPELINE, src.frontend, joined, samples, tol, exc.one_line())]
    reference = runtime.open(head, what=f"the onnxruntime session of the head {shown_name(head)}")
    emulated = fp16_emulation(head)
    first = validate_hop(HopKind.BACKEND, "onnx:head", name, reference, candidate, samples, reference.output_names,
                         tol, latency_runs, emulation=emulated, computes=precision)
    del reference
    ending = runtime.open(tail, what=f"the onnxruntime session of the tail {shown_name(tail)}")
    pipeline = Pipeline.of_files(candidate, ending, head, tail, outputs, joined)

    def emulation():
        head_emulation = emulated()
        return None if head_emulation is None else \
            Pipeline.of_files(head_emulation, ending, head, tail, outputs, f"{joined} (fp16 emulation of the head)")

    second = validate_hop(HopKind.PIPELINE, src.frontend, joined, source, pipeline, samples, outputs, tol,
                          latency_runs, emulation=emulation, computes=precision)
    second.notes += pipeline.casts
    return [first, second]


def split_report(to: str, facts: dict | None, tail_out: Path, tail_bytes: int, checks: int = 1) -> dict:
    """The report's ``split``: where the model was cut and why, what each side holds and what runs it; with no cut,
    that the backend took the whole model (no tail written)."""
    if facts is None:
        return {"backend": to, "tail": None, "at": None, "checks": checks,
                "runs": f"{to} takes the whole model: nothing to split, no tail written"}
    shown = {k: v for k, v in facts.items() if k != "tail_files"}
    return {"backend": to, "tail": str(tail_out), "tail_bytes": tail_bytes, **shown,
            "runs": f"the {to} artifact runs the head on the model's inputs; onnxruntime runs {tail_out.name} on "
                    f"the {len(facts['tensors'])} tensor(s) at the cut" +
                    (f" and the input(s) {', '.join(facts['tail_inputs'])}" if facts["tail_inputs"] else "")}


def split_note(to: str, facts: dict) -> str:
    """One line for the report's notes: where the cut is and why."""
    at = facts["at"]
    counted = sorted(facts["tail_ops"].items(), key=lambda x: -x[1])
    ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in counted[:6]) + \
        (f" and {len(counted) - 6} more op types" if len(counted) > 6 else "")
    return (f"--split-tail: cut before node '{at['node']}' ({at['op']}), the first {to} refuses ({at['reason']}); "
            f"the tail holds {facts['tail_nodes']} node(s) ({ops}) and takes {len(facts['tensors'])} tensor(s) "
            "from the head")
