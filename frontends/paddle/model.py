"""A Paddle source as a SourceModel: export through a jit.save'd inference model and paddle2onnx (in a
child process), reference runs in Paddle (the live layer in eval mode, or a Paddle inference predictor)."""
from __future__ import annotations

import contextlib
import inspect
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnxbridge.errors import BadInputError, ExportError
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.frontends.paddle.convert import MAX_OPSET, paddle2onnx_opset, paddle_message, to_onnx
from onnxbridge.frontends.paddle.files import inference_files
from onnxbridge.frontends.paddle.unsafe_ops import check_program
from onnxbridge.specs import DynamicAxis, Sample, TensorSpec, apply_overrides, as_arrays, random_sample

if TYPE_CHECKING:
    import onnx

    from onnxbridge.localize.probe import Sides


def import_paddle():
    """``paddle``, refused where it would crash (after tensorflow), with glog lines below ERROR off and its
    errors without their Python stack (unless the caller set these flags)."""
    from onnxbridge.isolation import require_importable

    require_importable("paddle")
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("FLAGS_call_stack_level", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "No ccache found" and friends
        import paddle
    return paddle


def _dtype(dtype: Any) -> str:
    text = str(dtype).replace("paddle.", "").replace("PaddleDType.", "").lower()
    return {"fp32": "float32", "fp16": "float16", "fp64": "float64"}.get(text, text)


def _spec(name: str, shape: Sequence, dtype: Any) -> TensorSpec:
    return TensorSpec(name, tuple(None if d is None or d < 0 else int(d) for d in shape), _dtype(dtype))


@contextlib.contextmanager
def eval_mode(layer) -> Iterator[None]:
    """Run in eval mode; every sublayer's training flag is put back afterwards."""
    flags = [(sub, sub.training) for sub in layer.sublayers(include_self=True)]
    layer.eval()
    try:
        yield
    finally:
        for sub, training in flags:
            sub.training = training


def _flatten(out: Any) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for k in out for t in _flatten(out[k])]
    return [out]


class PaddleModel(SourceModel):
    frontend = "paddle"
    framework = "paddlepaddle"
    converter = "paddle2onnx"

    def __init__(self, source: Any, *, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
                 dynamic: Sequence[DynamicAxis], input_names: Sequence[str] | None, seed: int, trust: bool = False):
        paddle = import_paddle()
        self.layer = self.predictor = None
        if isinstance(source, (str, Path)):
            if input_names:
                raise BadInputError("the input names of a saved Paddle model are fixed; --input-name does not apply")
            self.program, self.params = inference_files(Path(source))
            if not trust:
                check_program(self.program)
            self.kind = "Paddle inference model (.json PIR)" if self.program.suffix == ".json" \
                else "Paddle inference model (.pdmodel)"
            self.description = f"Paddle model {self.program.name}"
            specs, arrays = self._file_specs(paddle), None
            self.predictor = self._predictor(paddle)
            self.dynamic = list(dynamic)
            can_open = False
        else:
            if not isinstance(source, paddle.nn.Layer):
                raise BadInputError(f"a {type(source).__name__} is not a paddle.nn.Layer")
            self.layer, self.kind = source, "paddle.nn.Layer"
            self.description = f"Paddle {type(source).__name__}"
            specs, arrays = self._layer_specs(paddle, sample_inputs, input_shapes, input_names)
            self.dynamic = list(dynamic)
            can_open = True
        self.input_specs = apply_overrides(specs, input_shapes, dynamic, can_open=can_open)
        if self.layer is None and sample_inputs is not None:
            arrays = as_arrays({k: _numpy(v) for k, v in sample_inputs.items()} if isinstance(sample_inputs, Mapping)
                               else [_numpy(v) for v in _listed(sample_inputs)], [s.name for s in specs])
        self.sample = random_sample(self.input_specs, seed, fill=2) if arrays is None else \
            Sample({s.name: arrays[s.name].astype(s.dtype) for s in self.input_specs}, origin="sample inputs")
        self.fetch_names: list[str] = []  # paddle2onnx's output names, in ONNX order

    # loading ---------------------------------------------------------------------------------
    def _file_specs(self, paddle) -> list[TensorSpec]:
        prefix = str(self.program.with_suffix(""))
        try:
            if self.program.suffix == ".json":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    loaded = paddle.jit.load(prefix)
                return [_spec(s.name, s.shape, s.dtype) for s in loaded._input_spec()]
            paddle.enable_static()
            try:
                with paddle.pir_utils.OldIrGuard():
                    exe = paddle.static.Executor(paddle.CPUPlace())
                    program, feeds, _ = paddle.static.load_inference_model(prefix, exe)
                    block = program.global_block()
                    return [_spec(n, block.var(n).shape, block.var(n).dtype) for n in feeds]
            finally:
                paddle.disable_static()
        except Exception as exc:
            raise BadInputError(f"cannot load Paddle model '{self.program.name}': {paddle_message(exc)}") from None

    def _predictor(self, paddle):
        config = paddle.inference.Config(str(self.program), str(self.params))
        config.disable_gpu()
        config.switch_ir_optim(False)  # the program as saved: no fusions that change numerics
        config.disable_glog_info()
        try:
            return paddle.inference.create_predictor(config)
        except Exception as exc:
            raise BadInputError(f"Paddle cannot run '{self.program.name}': {paddle_message(exc)}") from None

    def _layer_specs(self, paddle, sample: Any, input_shapes: Sequence[TensorSpec], input_names: Sequence[str] | None
                     ) -> tuple[list[TensorSpec], dict[str, np.ndarray] | None]:
        """Input specs named after forward's parameters, and the sample arrays (None for InputSpecs)."""
        if sample is None:
            if not input_shapes:
                raise BadInputError("a live Paddle layer needs sample inputs or InputSpecs (or --input-shape)")
            return [TensorSpec(s.name, s.shape, s.dtype or "float32") for s in input_shapes], None
        keyed = isinstance(sample, Mapping)
        names = _arg_names(self.layer, len(sample) if keyed else len(_listed(sample)))
        if keyed and sorted(sample) != sorted(names):  # forward gets them in order, by position
            raise BadInputError(f"sample inputs {', '.join(map(repr, sample))} are not forward's first "
                                f"{len(names)} parameter(s) ({', '.join(names)})")
        items = [sample[n] for n in names] if keyed else _listed(sample)
        if input_names:
            if len(input_names) != len(items):
                raise BadInputError(f"{len(input_names)} input names for {len(items)} inputs")
            names = list(input_names)
        if all(isinstance(s, paddle.static.InputSpec) for s in items):
            # a spec's own name, unless the inputs were named by key or --input-name
            names = [n if input_names or keyed or not s.name else s.name for n, s in zip(names, items)]
            return [_spec(n, s.shape, s.dtype) for n, s in zip(names, items)], None
        if any(isinstance(s, paddle.static.InputSpec) for s in items):
            raise BadInputError("give sample inputs either as InputSpecs or as arrays/tensors, not a mix")
        arrays = as_arrays([_numpy(v) for v in items], names)
        return [_spec(n, a.shape, a.dtype) for n, a in arrays.items()], arrays

    # export ----------------------------------------------------------------------------------
    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        import onnx

        from onnxbridge.adapters import default_opset
        from onnxbridge.builder import rename_values
        program, params = self._inference_files(workdir / "paddle")
        save = workdir / "paddle2onnx.onnx"
        converter = to_onnx(str(program), str(params), str(save), paddle2onnx_opset(opset), str(workdir))
        try:
            model = onnx.load(str(save))
        except Exception as exc:
            raise ExportError(f"paddle2onnx wrote an unreadable model: {' '.join(str(exc).split())[:200]}") from None
        if not model.graph.output or not model.graph.node:  # PaddlePaddle/Paddle#69128: "success", no model
            raise ExportError("paddle2onnx reported success but wrote an empty model")
        notes = []
        got = default_opset(model)
        if opset is not None and got != opset:
            why = f"it emits up to {MAX_OPSET}" if opset > MAX_OPSET else "the lowest its operators allow"
            notes.append(f"paddle2onnx exported at opset {got} ({why}); adapted to {opset}")
        self.fetch_names = [o.name for o in model.graph.output]
        names = list(output_names) if output_names else \
            (["output"] if len(self.fetch_names) == 1 else [f"output_{i}" for i in range(len(self.fetch_names))])
        if len(names) != len(self.fetch_names):
            raise BadInputError(f"{len(names)} output names for {len(self.fetch_names)} outputs")
        rename_values(model.graph, dict(zip(self.fetch_names, names)))
        label_dims(model.graph, self.dynamic)
        return Exported(model, None, converter, notes)

    def _inference_files(self, folder: Path) -> tuple[Path, Path]:
        """The program and weights to convert: the layer saved with jit.save, or links to the user's files
        (paddle2onnx writes translated programs beside what it reads)."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.layer is None:
            program, params = folder / f"model{self.program.suffix}", folder / "model.pdiparams"
            os.symlink(self.program.resolve(), program)
            os.symlink(self.params.resolve(), params)
            return program, params
        paddle = import_paddle()
        specs = [paddle.static.InputSpec(list(s.shape), s.dtype, name=s.name) for s in self.input_specs]
        try:
            with eval_mode(self.layer), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                paddle.jit.save(self.layer, str(folder / "model"), input_spec=specs)
        except Exception as exc:
            raise ExportError(f"paddle.jit.save failed: {paddle_message(f'{type(exc).__name__}: {exc}')}") from None
        program = next((folder / f"model{s}" for s in (".json", ".pdmodel") if (folder / f"model{s}").exists()), None)
        if program is None:
            raise ExportError("paddle.jit.save wrote no program file")
        return program, folder / "model.pdiparams"

    def probe(self, model: "onnx.ModelProto") -> "Sides | None":
        """Paddle op results matched to ``model``'s tensors through paddle2onnx's names
        (``frontends/paddle/probe.py``); None for an old-IR program."""
        from onnxbridge.frontends.paddle.probe import paddle_sides

        return paddle_sides(self, model)

    # reference -------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        if self.layer is not None:
            paddle = import_paddle()
            tensors = [paddle.to_tensor(np.ascontiguousarray(feeds[s.name])) for s in self.input_specs]
            with eval_mode(self.layer), paddle.no_grad():
                return [np.asarray(t.numpy()) for t in _flatten(self.layer(*tensors))]
        from onnxbridge.quiet import native_output_silenced

        p = self.predictor
        for s in self.input_specs:
            a = np.ascontiguousarray(feeds[s.name])
            handle = p.get_input_handle(s.name)
            handle.reshape(list(a.shape))
            handle.copy_from_cpu(a)
        with native_output_silenced():  # it prints oneDNN debug lines to stdout
            p.run()
        names = p.get_output_names()
        if sorted(self.fetch_names) == sorted(names):
            names = self.fetch_names
        return [p.get_output_handle(n).copy_to_cpu() for n in names]


def _numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def _listed(sample: Any) -> list:
    return list(sample) if isinstance(sample, (list, tuple)) else [sample]


def _arg_names(layer, count: int) -> list[str]:
    """forward's positional parameter names for ``count`` inputs (``input_<i>`` past a ``*args``)."""
    params = inspect.signature(layer.forward).parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:count]
    if len(names) < count and any(p.kind == p.VAR_POSITIONAL for p in params):
        names += [f"input_{i}" for i in range(len(names), count)]
    if len(names) < count:
        raise BadInputError(f"{count} sample inputs for forward({', '.join(names)}) of {type(layer).__name__}")
    return names


def label_dims(graph, dynamic: Sequence[DynamicAxis]) -> None:
    """Name the symbolic input axes (``--dynamic`` labels, else ``<input>_dim<axis>``) in place of
    paddle2onnx's unrelated ``DynamicDimension.N``; outputs' such axes are left for shape inference."""
    labels = {(d.name, d.axis): d.dim_label for d in dynamic}
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims):
            if not dim.HasField("dim_value"):
                dim.dim_param = labels.get((value.name, axis)) or labels.get((value.name, axis - len(dims))) \
                    or f"{value.name}_dim{axis}"
    for value in [*graph.output, *graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param.startswith("DynamicDimension."):
                dim.Clear()
