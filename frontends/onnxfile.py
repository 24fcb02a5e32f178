"""ONNX frontend: an existing ONNX model as the source (re-target its opset, validate against it)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from onnxbridge.errors import BadInputError
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.registry import Plugin
from onnxbridge.specs import DynamicAxis, TensorSpec, random_sample

if TYPE_CHECKING:
    import onnx

    from onnxbridge.localize.probe import Sides

PLUGIN = Plugin("onnx", "onnxbridge.frontends.onnxfile", requires=("onnx", "onnxruntime"), priority=50,
                description="an existing ONNX model (re-target opset, validate against it)")

NAME = "onnx"


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        return Path(source).suffix.lower() == ".onnx"
    return type(source).__name__ == "ModelProto" and type(source).__module__.startswith("onnx")


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0) -> "OnnxModel":
    if input_names:
        raise BadInputError("input names of an ONNX source are fixed; rename them in the source model")
    return OnnxModel(source, sample_inputs, input_shapes, seed, dynamic)


class OnnxModel(SourceModel):
    frontend = "onnx"
    framework = "onnxruntime"
    runs_in = "the worker process"

    def __init__(self, source: Any, sample_inputs: Any, input_shapes: Sequence[TensorSpec], seed: int,
                 dynamic: Sequence[DynamicAxis] = ()):
        import onnx

        from onnxbridge import runtime
        from onnxbridge.onnxio import load_onnx

        if isinstance(source, (str, Path)):
            self.path: Path | None = Path(source)
            self.proto = load_onnx(self.path)
            self.description = f"ONNX file {self.path.name}"
        else:
            self.path, self.proto = None, onnx.ModelProto()
            self.proto.CopyFrom(source)  # never modify the caller's model
            self.description = f"ONNX model {self.proto.graph.name or '(unnamed)'}"
        self.kind = "ONNX"
        self.session = runtime.open(self.path or self.proto, what=f"the onnxruntime session of the source "
                                    f"{self.path.name if self.path else 'model'}")
        specs = self.session.input_specs
        self._open(dynamic, specs)
        opening = {(o.name, o.axis) for o in self.opened}
        names = [s.name for s in specs]
        by_name = {s.name: s for s in input_shapes}
        unknown = [n for n in by_name if n not in names]
        if unknown:
            raise BadInputError(f"--input-shape names unknown input {', '.join(map(repr, unknown))}; "
                                f"the model takes {', '.join(map(repr, names))}")
        for s in input_shapes:
            model_spec = next(m for m in specs if m.name == s.name)
            if len(s.shape) != len(model_spec.shape) or any(
                    isinstance(d, int) and d != g and (s.name, i) not in opening
                    for i, (d, g) in enumerate(zip(model_spec.shape, s.shape))):
                raise BadInputError(f"--input-shape {s.name}:{','.join(map(str, s.shape))} does not fit the "
                                    f"model's input shape {list(model_spec.shape)}")
        self.input_specs = [TensorSpec(s.name, by_name[s.name].shape if s.name in by_name else s.shape,
                                       s.dtype) for s in specs]
        if sample_inputs is not None:
            from onnxbridge.specs import Sample

            self.sample = Sample(_named_arrays(sample_inputs, [s.name for s in self.input_specs]),
                                 origin="sample inputs")
        else:
            self.sample = random_sample(self.input_specs, seed=seed)

    def _open(self, dynamic: Sequence[DynamicAxis], specs: Sequence[TensorSpec]) -> None:
        """``--dynamic``: the exported model gets the requested axes symbolic (``onnx_dynamic.open_axes``), and the
        source runs at other sizes of them slice by slice; ``dynamic`` lists the requested axes, then the axes the
        model already leaves open."""
        from onnxbridge.frontends import onnx_dynamic

        outputs = [o.name for o in self.proto.graph.output]
        named = [d.name for d in dynamic if d.name in outputs and d.name not in {s.name for s in specs}]
        if named:
            raise BadInputError(f"--dynamic names output(s) {', '.join(map(repr, dict.fromkeys(named)))} of an ONNX "
                                "source; open its input axes and the outputs follow (their shapes are inferred)")
        requested, self.opened = onnx_dynamic.resolve(self.proto, dynamic)
        self.open_notes: list[str] = []
        self.open_warnings: list[str] = []
        self.opened_proto = None
        if self.opened:
            self.opened_proto, self.open_notes, follows = onnx_dynamic.open_axes(self.proto, self.opened)
            outputs = onnx_dynamic.output_axes(self.opened_proto, self.opened, follows)
            self.run_sliced = onnx_dynamic.SlicedRunner(self.session, self.opened, list(outputs.items()))
            axes = ", ".join(f"{o.name}:{o.axis} (was {o.size}, now {o.label!r})" for o in self.opened)
            self.open_notes.append(
                f"--dynamic opened {axes} of the static source; its references at other sizes come from running it "
                "slice by slice along the axis, which holds for a batch axis (items independent)")
            lost = [name for name, axes in outputs.items() if not axes]
            if lost:
                self.open_warnings.append(
                    f"output(s) {', '.join(map(repr, lost))} do not follow the opened axis, so the static source gives "
                    "no reference at other sizes: the model is validated only at its old size")
        seen = {(d.name, d.axis) for d in requested}
        self.dynamic = [*requested, *(DynamicAxis(s.name, i, d if isinstance(d, str) else None)
                                      for s in specs for i, d in enumerate(s.shape)
                                      if not isinstance(d, int) and (s.name, i) not in seen)]

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        import onnx

        if output_names:
            raise BadInputError("output names of an ONNX source are fixed")
        model = onnx.ModelProto()
        model.CopyFrom(self.opened_proto if self.opened_proto is not None else self.proto)
        how = "onnx (copied, axes opened)" if self.opened_proto is not None else "onnx (copied)"
        return Exported(model, self.path.parent if self.path else None, how, notes=list(self.open_notes),
                        warnings=list(self.open_warnings))

    def run(self, feeds: Mapping[str, Any]) -> list:
        return self.run_sliced(feeds) if self.opened else self.session(feeds)

    def probe(self, model: "onnx.ModelProto") -> "Sides":
        """The source ONNX model run as prefix models, its tensors matched to ``model``'s (by name, else by graph
        position: ``match_tensors``); ``source`` names the source model's node."""
        from onnxbridge.localize.onnx_probe import OnnxProbe, made_by, match_tensors, onnx_checkpoints
        from onnxbridge.localize.probe import Checkpoint, Sides

        source = OnnxProbe(self.path or self.proto)
        mapping = match_tensors(model, source.model)
        source.rename = mapping
        makers = made_by(source.model)
        every = onnx_checkpoints(model)
        checkpoints = [Checkpoint(c.tensor, c.node, c.op, c.inputs, makers.get(mapping[c.tensor]))
                       for c in every if c.tensor in mapping]
        by_name = sum(1 for c in checkpoints if mapping[c.tensor] == c.tensor)
        return Sides(source, checkpoints, f"the source ONNX model run as prefix models; {len(checkpoints)} of "
                     f"{len(every)} tensors matched ({by_name} by name, {len(checkpoints) - by_name} by graph "
                     "position); source: the source model's node")


def _named_arrays(given: Any, names: Sequence[str]) -> dict:
    """Sample inputs for an ONNX model as given: a name -> array mapping, or arrays in input order."""
    import numpy as np

    items = list(given.items()) if isinstance(given, Mapping) else \
        list(zip(names, given)) if isinstance(given, (list, tuple)) and len(given) == len(names) else None
    if items is None:
        raise BadInputError(f"sample inputs for an ONNX model are a name -> array mapping or {len(names)} array(s) in "
                            f"input order ({', '.join(map(repr, names))}), not {type(given).__name__}"
                            + (f" of {len(given)}" if isinstance(given, (list, tuple)) else ""))
    arrays = {}
    for name, value in items:
        try:
            arrays[str(name)] = np.asarray(value)
        except Exception:  # noqa: BLE001 - whatever numpy cannot take
            raise BadInputError(f"sample input '{name}' is not an array ({type(value).__name__})") from None
        if arrays[str(name)].dtype == object:
            raise BadInputError(f"sample input '{name}' is not a numeric array ({type(value).__name__})")
    return arrays
