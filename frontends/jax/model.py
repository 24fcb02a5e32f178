"""A loaded JAX source: sample inputs, the jax2onnx export (at an opset it emits well) and reference runs in JAX."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from onnxbridge.frontends.jax import exporter as j2o
from onnxbridge.frontends.jax.sources import Callee, eval_mode, resolve

from onnxbridge.errors import BadInputError, OnnxBridgeError, first_line
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.specs import DynamicAxis, Sample, TensorSpec, random_array

DEFAULT_OPSET = 23  # jax2onnx's default, and what it is tested at
MIN_OPSET = 13  # below it jax2onnx writes later opsets' attributes (ArgMax select_last_index at 11)


def jax2onnx_opset(opset: int | None, notes: list[str]) -> int:
    """The opset to ask jax2onnx for: the requested one from ``MIN_OPSET`` up, else ``MIN_OPSET`` (the builder's
    adapters take it down); its default when none is asked."""
    if opset is None:
        return DEFAULT_OPSET
    if opset < MIN_OPSET:
        notes.append(f"jax2onnx exported at opset {MIN_OPSET} (below it, it writes attributes of later opsets); "
                     f"onnxbridge's adapters take it to {opset}")
        return MIN_OPSET
    return opset


class JaxModel(SourceModel):
    frontend = "jax"
    framework = "jax"
    converter = "jax2onnx"

    def __init__(self, callee: Callee, names: list[str], arrays: list[np.ndarray], dynamic: Sequence[DynamicAxis],
                 notes: list[str]):
        self.callee = callee
        self.kind, self.description = callee.kind, callee.description
        self.names = names
        self.input_specs = [TensorSpec(n, tuple(a.shape), a.dtype.name) for n, a in zip(names, arrays)]
        self.sample = Sample(dict(zip(names, arrays)), origin="sample inputs")
        for d in dynamic:
            if d.name not in names:
                raise BadInputError(f"--dynamic {d.name}:{d.axis}: the model's inputs are "
                                    f"{', '.join(map(repr, names))}")
            rank = self.sample.feeds[d.name].ndim
            if not -rank <= d.axis < rank:
                raise BadInputError(f"--dynamic {d.name}:{d.axis}: input '{d.name}' has rank {rank}")
        self.dynamic = list(dynamic)
        self.load_notes = notes
        self._leaves = 0  # how many arrays it returns
        self._tree: Any = None
        self._compiled: Any = None

    # construction ---------------------------------------------------------------------------
    @classmethod
    def create(cls, source: Any, *, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
               dynamic: Sequence[DynamicAxis], input_names: Sequence[str] | None, seed: int) -> "JaxModel":
        callee = resolve(source)
        if input_names:  # --input-shape names the inputs as --input-name renames them
            renamed = dict(zip(input_names, callee.params))
            input_shapes = [TensorSpec(renamed.get(s.name, s.name), s.shape, s.dtype) for s in input_shapes]
        names, arrays = _sample(callee, sample_inputs, input_shapes, seed)
        notes = _canonical_dtypes(names, arrays)
        if input_names:
            if len(input_names) != len(arrays):
                raise BadInputError(f"{len(input_names)} input names given for {len(arrays)} array inputs "
                                    f"({', '.join(names)})")
            names = list(input_names)
        model = cls(callee, names, arrays, dynamic, notes)
        try:
            out = model._abstract(arrays)
        except OnnxBridgeError:
            raise
        except Exception as exc:  # noqa: BLE001 - the source failing on its own sample
            raise BadInputError(f"{callee.description} fails on inputs {model.sample.shapes()}: "
                                f"{type(exc).__name__}: {first_line(exc)}") from None
        model._tree = out
        model._leaves = len(jax.tree_util.tree_leaves(out))
        if not model._leaves:
            raise BadInputError(f"{callee.description} returns no arrays")
        return model

    # running ---------------------------------------------------------------------------------
    def _abstract(self, arrays: Sequence[np.ndarray]) -> Any:
        """The output tree as shapes and dtypes (``jax.eval_shape``): the source traced on the sample's shapes,
        neither compiled nor run, so loading does nothing validation alone needs."""
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
        with eval_mode(self.callee.module):
            if self.callee.module is not None:
                from flax import nnx

                return nnx.eval_shape(lambda module, *args: module(*args), self.callee.module, *specs)
            return jax.eval_shape(self.callee.fn, *specs)

    def _call(self, arrays: Sequence[np.ndarray]) -> Any:
        if self._compiled is None:
            self._compiled = compiled(self.callee)
        with eval_mode(self.callee.module):
            return self._compiled(*(jnp.asarray(a) for a in arrays))

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """A fresh call in JAX on ``feeds`` (never a cached answer: validation times these calls)."""
        missing = [n for n in self.names if n not in feeds]
        if missing:
            raise BadInputError(f"no value for input {', '.join(map(repr, missing))}; given {list(feeds)}")
        out = self._call([np.asarray(feeds[n]) for n in self.names])
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]

    # export ----------------------------------------------------------------------------------
    def default_output_names(self) -> list[str]:
        """``output`` for one array; a dict's keys (``a.b`` when nested) when they are distinct from the inputs;
        else ``output_0``, ``output_1``, ..."""
        leaves = jax.tree_util.tree_flatten_with_path(self._tree)[0]
        if len(leaves) == 1 and not leaves[0][0]:
            return ["output"]
        keyed = [".".join(str(getattr(k, "key", "")) for k in path) for path, _ in leaves]
        if all(path and all(isinstance(k, jax.tree_util.DictKey) for k in path) for path, _ in leaves) and \
                len(set(keyed)) == len(keyed) and not set(keyed) & set(self.names) and all(keyed):
            return keyed
        return [f"output_{i}" for i in range(len(leaves))]

    def export_specs(self) -> list[Any]:
        """One ``jax.ShapeDtypeStruct`` per input; a dynamic axis is its label (jax2onnx's symbolic dimension)."""
        specs = []
        for name in self.names:
            arr = self.sample.feeds[name]
            dims: list[Any] = list(arr.shape)
            for d in self.dynamic:
                if d.name == name:
                    dims[d.axis % arr.ndim] = d.dim_label
            specs.append(jax.ShapeDtypeStruct(tuple(dims), arr.dtype))
        return specs

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        """jax2onnx at ``jax2onnx_opset``; when that export fails the ONNX checker below jax2onnx's default opset,
        the export at the default instead (the builder's adapters then take it to ``opset``)."""
        outputs = list(output_names) if output_names else self.default_output_names()
        if len(outputs) != self._leaves:
            raise BadInputError(f"{len(outputs)} output names for {self._leaves} outputs")
        notes, caught = list(self.load_notes), []
        use = jax2onnx_opset(opset, notes)
        proto = self._to_onnx(use, outputs, notes, caught)
        problem = j2o.checker_problem(proto)
        if problem is not None and use != DEFAULT_OPSET:
            notes.append(f"jax2onnx's opset-{use} export fails the ONNX checker ({problem}); exported at opset "
                         f"{DEFAULT_OPSET} instead, for onnxbridge's adapters to take to {opset}")
            proto = self._to_onnx(DEFAULT_OPSET, outputs, notes, caught)
        return Exported(proto, None, f"jax2onnx {j2o.version()}", notes, caught)

    def _to_onnx(self, opset: int, outputs: list[str], notes: list[str], caught: list[str]) -> Any:
        double = any(a.dtype == np.float64 for a in self.sample.feeds.values())
        name = re.sub(r"\W+", "_", self.description).strip("_")[:64] or "jax_model"
        with eval_mode(self.callee.module) as changed:
            proto = j2o.to_onnx(self.callee.fn, self.export_specs(), opset=opset, input_names=self.names,
                                output_names=outputs, double=double, model_name=name, caught=caught,
                                dynamic=[f"{d.name}:{d.axis}" for d in self.dynamic])
        note = f"exported in eval mode ({', '.join(changed)} set True, as nnx.Module.eval() does)"
        if changed and note not in notes:
            notes.append(note)
        return proto


def compiled(callee: Callee) -> Any:
    """What reference runs call: the source under jit (nnx.jit for an nnx.Module), as JAX runs it in production
    and so each validation run does not dispatch op by op."""
    if callee.module is not None:
        from flax import nnx

        call = nnx.jit(lambda module, *args: module(*args))
        return lambda *args: call(callee.module, *args)
    if callee.kind == "jitted function":
        return callee.fn
    fn = callee.fn
    return jax.jit(lambda *args: fn(*args))  # a bound linen module cannot be jit's (hashed) function itself


def _canonical_dtypes(names: Sequence[str], arrays: list[np.ndarray]) -> list[str]:
    """Cast each sample array to the dtype JAX computes it in (float64 -> float32 while jax_enable_x64 is off);
    one note per cast."""
    notes = []
    for i, (name, arr) in enumerate(zip(names, arrays)):
        want = np.dtype(jax.dtypes.canonicalize_dtype(arr.dtype))
        if want != arr.dtype:
            arrays[i] = arr.astype(want)
            notes.append(f"sample input '{name}' is {arr.dtype.name}; JAX computes it in {want.name} "
                         "(jax_enable_x64 is off), and so does the ONNX model")
    return notes


def _as_array(value: Any, what: str) -> np.ndarray:
    if isinstance(value, (bool, int, float)) or not (hasattr(value, "shape") and hasattr(value, "dtype")):
        raise BadInputError(f"{what} is a {type(value).__name__}, not an array: the model's inputs must be "
                            "arrays", hint="bind other arguments with functools.partial or a lambda")
    return np.asarray(value)


def _sample(callee: Callee, sample_inputs: Any, shapes: Sequence[TensorSpec],
            seed: int) -> tuple[list[str], list[np.ndarray]]:
    """(input names, arrays) from the sample inputs (an array, a tuple in parameter order, or parameter name ->
    array) and ``--input-shape`` specs (seeded random arrays)."""
    params = callee.params
    rng = np.random.default_rng(seed)
    by_name = {s.name: s for s in shapes}
    if sample_inputs is None:
        if not shapes:
            needed = callee.required or params or ["x"]
            raise BadInputError(f"{callee.description} has no sample inputs: pass them (Python API) or "
                                f"--input-shape for {', '.join(needed)} (e.g. --input-shape {needed[0]}:1,8)")
        unknown = [n for n in by_name if n not in params]
        if unknown or not params:
            raise BadInputError(f"--input-shape names unknown input {', '.join(map(repr, unknown or by_name))}; "
                                f"the model takes {', '.join(map(repr, params)) or 'no named inputs'}")
        order = params[:max(params.index(n) for n in by_name) + 1]
        missing = [n for n in order if n not in by_name] + [n for n in callee.required if n not in order]
        if missing:
            raise BadInputError(f"--input-shape missing for input {', '.join(map(repr, missing))}")
        return order, [random_array(by_name[n].shape, by_name[n].dtype or "float32", rng) for n in order]
    if isinstance(sample_inputs, Mapping):
        unknown = [k for k in sample_inputs if k not in params]
        if unknown:
            raise BadInputError(f"sample inputs name unknown parameter {', '.join(map(repr, unknown))}; the model "
                                f"takes {', '.join(map(repr, params)) or 'positional arguments only'}")
        order = params[:max(params.index(k) for k in sample_inputs) + 1] if sample_inputs else []
        gaps = [n for n in order if n not in sample_inputs]
        if gaps:
            raise BadInputError(f"sample inputs skip parameter {', '.join(map(repr, gaps))}: the inputs are "
                                "positional, so give every parameter before the last one given")
        values = [sample_inputs[n] for n in order]
    else:
        values = list(sample_inputs) if isinstance(sample_inputs, (list, tuple)) else [sample_inputs]
    names = [params[i] if i < len(params) else f"input_{i}" for i in range(len(values))]
    arrays = [_as_array(v, f"sample input '{n}'") for n, v in zip(names, values)]
    unknown = [n for n in by_name if n not in names]
    if unknown:
        raise BadInputError(f"--input-shape names unknown input {', '.join(map(repr, unknown))}; the model takes "
                            f"{', '.join(map(repr, names))}")
    for i, n in enumerate(names):
        if n in by_name:
            spec = by_name[n]
            arrays[i] = random_array(spec.shape, spec.dtype or arrays[i].dtype.name, rng)
    return names, arrays
