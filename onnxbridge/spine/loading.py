"""The source model: resolved and loaded by its frontend, every name the user gave checked against it, and
let go once nothing runs it again."""
from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any, Sequence


from onnxbridge.errors import BadInputError
from onnxbridge.registry import dist_version
from onnxbridge.specs import InputSpec, TensorSpec

from onnxbridge.spine.preflight import refuse_foreign

if TYPE_CHECKING:
    import onnx

    from onnxbridge.plugins import SourceModel


def load_source(source: Any, *, sample_inputs: Any = None, from_: str | None = None,
                input_shapes: Sequence[str | TensorSpec] = (), dynamic: Any = None,
                input_names: Sequence[str] | None = None, trust: bool = False, seed: int = 0,
                command: str = "convert", **options: Any) -> "SourceModel":
    """Resolve a path, live object or ``module:factory`` and load it with its frontend.

    ``options`` are frontend-specific (e.g. ``signature`` for TensorFlow); ``None`` values are
    dropped, and an option the chosen frontend does not take (or takes for other commands than ``command``) is
    refused.
    """
    from onnxbridge.plugins import FRONTENDS
    from onnxbridge.sources import call_factory, is_factory, pick_frontend

    if is_factory(source) and from_ != "onnx":
        source, factory_sample = call_factory(source)
        sample_inputs = factory_sample if sample_inputs is None else sample_inputs
    spec = InputSpec.parse(input_shapes, dynamic)  # parsed values pass through unchanged
    name = pick_frontend(source, from_)
    frontend = FRONTENDS.load(name)
    options = {k: v for k, v in options.items() if v is not None and v != () and v != []}
    refuse_foreign(FRONTENDS, name, options, f"{name} sources", "--from", command)
    return frontend.load(source, sample_inputs=sample_inputs, input_shapes=list(spec.shapes),
                         dynamic=list(spec.dynamic), input_names=input_names, trust=trust, seed=seed, **options)


def let_go(src: "SourceModel") -> None:
    """``src.release()``, then a full garbage collection where the frontend lets anything go (weights held in
    reference cycles). Frontends that keep their model skip it: with torch or TF imported a collection takes
    0.3 s or more, which every small conversion paid."""
    from onnxbridge.plugins import SourceModel

    src.release()
    if type(src).release is not SourceModel.release:
        gc.collect()


def check_loaded_names(src: "SourceModel", input_names, spec: InputSpec) -> None:
    """Every input name the user gave must be one the loaded model has (a frontend that ignored one is caught)."""
    from onnxbridge.specs import check_names

    names = [s.name for s in src.input_specs]
    if input_names and list(input_names) != names:
        raise BadInputError(f"--input-name {', '.join(input_names)} was not applied: the model's inputs are "
                            f"{', '.join(map(repr, names))}")
    check_names("--input-shape", [s.name for s in spec.shapes], names)


def check_exported_names(src: "SourceModel", model: "onnx.ModelProto", output_names, tol) -> None:
    """--dynamic, --output-name and per-output --atol/--rtol names against the exported model."""
    inits = {t.name for t in model.graph.initializer}
    onnx_inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    known = list(dict.fromkeys([*(s.name for s in src.input_specs), *onnx_inputs, *outputs]))
    unknown = [d.name for d in src.dynamic if d.name not in known]
    if unknown:
        raise BadInputError(f"--dynamic names {', '.join(map(repr, dict.fromkeys(unknown)))}, which the model does "
                            f"not have; its inputs are {', '.join(map(repr, onnx_inputs))} and its outputs "
                            f"{', '.join(map(repr, outputs))}")
    if output_names and list(output_names) != outputs:
        raise BadInputError(f"--output-name gives {len(output_names)} name(s) ({', '.join(output_names)}) and they "
                            f"were not applied: the exported model has {len(outputs)} output(s), "
                            f"{', '.join(map(repr, outputs))}")
    wrong = [n for n, _, _ in tol.per_output if n not in outputs]
    if wrong:
        raise BadInputError(f"--atol/--rtol name output(s) {', '.join(map(repr, wrong))} the model does not have; "
                            f"its outputs are {', '.join(map(repr, outputs))}")


def source_ran(src: "SourceModel") -> str:
    """What runs the source model for the references, in words."""
    version = dist_version(src.framework)
    return f"{src.framework}{' ' + version if version else ''} ({src.kind}), in {src.runs_in}"
