"""The validation samples: the user's inputs or the source's sample and random batches like it, and the one
that exercises every dynamic axis at a second size."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence


from onnxbridge.errors import BadInputError, listing
from onnxbridge.specs import DynamicAxis, Sample, TensorSpec, load_npz, reseed, vary_dynamic


if TYPE_CHECKING:
    from onnxbridge.records import Hop
    from onnxbridge.plugins import SourceModel


def validation_samples(src: "SourceModel", inputs: Any, onnx_inputs: Sequence[TensorSpec], count: int = 1,
                       seed: int = 0, *, source: Any = None, model_path: Path | None = None,
                       dynamic: dict | None = None) -> list[Sample]:
    """The validation samples: user inputs (or the source's sample and ``count - 1`` more random batches
    like it), then the first with every symbolic axis of the ONNX model at a second size (``_exercise``), to catch
    sizes baked in at export; ``dynamic`` receives the hop's ``dynamic_axes`` record."""
    import numpy as np

    from onnxbridge.runtime import match_feeds

    names = [s.name for s in src.input_specs]
    if inputs is not None:
        arrays = {k: np.asarray(v) for k, v in inputs.items()} if isinstance(inputs, Mapping) else load_npz(inputs)
        _check_input_keys(arrays, names)
        first = Sample(match_feeds(names, arrays), origin=f"user inputs{f' ({inputs})' if isinstance(inputs, (str, Path)) else ''}")
    else:
        first = src.sample
    samples = [first]
    if inputs is None:
        samples += [reseed(first, seed + i) for i in range(1, count)]
    dyn = [DynamicAxis(s.name, i, d if isinstance(d, str) else None)
           for s in onnx_inputs for i, d in enumerate(s.shape) if not isinstance(d, int)]
    if dyn:
        grown, record = _exercise(src, first, dyn, source, model_path)
        if grown is not None:
            samples.append(grown)
        if dynamic is not None:
            dynamic.update(record)
    ranged = [d for d in src.dynamic if d.min is not None]
    for end in ("min", "max"):  # the requested range's ends, when given (x:0:batch:1..16)
        at_end = vary_dynamic(first, ranged, lambda d, n: getattr(d, end), f"dynamic axes at their {end}")
        if at_end is not None:
            samples.append(at_end)
    return samples


def _exercise(src: "SourceModel", first: Sample, dyn: Sequence[DynamicAxis], source: Any,
              model_path: Path | None) -> tuple[Sample | None, dict]:
    """The sample at a second size for the dynamic axes ``dyn`` (``specs.grow``: one that changes every shape shape
    inference derives from them), the first of up to ``GROWTH_TRIES`` larger candidates, then the smaller ones, that
    ``source`` (SourceOutputs; None: not tried) runs; and the hop's ``dynamic_axes`` record: the axes, the sizes
    used, whether they were exercised and why."""
    from onnxbridge.errors import first_line
    from onnxbridge.specs import GROWTH_TRIES, grow

    growth = grow(first, dyn, model_path)
    record = {"axes": [f"{d.name}:{d.axis}" for d in dyn], "sizes": [first.shapes()], "exercised": False,
              "reason": growth.reason}
    refused, why = [], None
    for sample in [*growth.candidates[:GROWTH_TRIES], *growth.smaller]:  # smaller: where no larger size runs
        error = source.fails(sample) if source is not None else None
        if error is None:
            record.update(sizes=[first.shapes(), sample.shapes()], exercised=True)
            if refused:
                record["reason"] += f"; {src.framework} does not run at {', '.join(refused)} ({why})"
            return sample, record
        refused.append("; ".join(f"{k} {'x'.join(map(str, v))}" for k, v in sample.shapes().items()))
        why = why or f"{type(error).__name__}: {first_line(error, 160)}"
    if refused:
        record["reason"] = f"{src.framework} does not run at {', '.join(refused)} ({why}); {growth.reason}"
    return None, record


def unexercised(hop: "Hop", record: dict) -> None:
    """A hop that compared only at the first size when it has dynamic axes is not passed: skipped, saying why."""
    hop.dynamic_axes = record
    if record and not record["exercised"] and hop.passed:
        hop.skip(f"dynamic axes {', '.join(record['axes'])} not exercised at a second size: {record['reason']}")


def _check_input_keys(arrays: dict, names: Sequence[str]) -> None:
    """``--inputs`` arrays must be named after the model's inputs (or be np.savez's positional arr_0, arr_1, ...)."""
    positional = [f"arr_{i}" for i in range(len(names))]
    unknown = [k for k in arrays if k not in names]
    if unknown and sorted(arrays) != sorted(positional):
        raise BadInputError(f"--inputs holds array(s) {listing(unknown)} that name no input; the "
                            f"model's inputs are {listing(names)}")


def check_dynamic(src: "SourceModel", onnx_inputs: Sequence[TensorSpec]) -> list[str]:
    """Requested dynamic axes that the exported model still fixes."""
    by_name = {s.name: s for s in onnx_inputs}
    problems = []
    for d in src.dynamic:
        spec = by_name.get(d.name)
        if spec is not None and spec.shape and isinstance(spec.shape[d.axis], int):
            problems.append(f"requested dynamic axis {d.name}:{d.axis} is fixed to {spec.shape[d.axis]} "
                            "in the exported model")
    return problems


def used_by(hop: "Hop", samples: list[Sample]) -> list[Sample]:
    """The samples a hop compared on (a runner with static shapes takes only some)."""
    shapes = hop.sample_shapes or []
    return [s for s in samples if s.shapes() in shapes] or list(samples)
