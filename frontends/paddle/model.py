"""A Paddle source as a SourceModel: export through a jit.save'd inference model and paddle2onnx (in a
child process), reference runs in Paddle (the live layer in eval mode, or a Paddle inference predictor)."""
from __future__ import annotations

import contextlib
import inspect
import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from onnxbridge.frontends.base import Exported, SourceModel
from onnxbridge.frontends.paddle.convert import paddle2onnx_opset
from onnxbridge.frontends.paddle.files import inference_files

from onnxbridge.errors import BadInputError, ExportError
from onnxbridge.specs import DynamicAxis, Sample, TensorSpec, apply_overrides, as_arrays, random_sample


def import_paddle():
    """``paddle``, refused where it would crash (after tensorflow), with glog INFO lines off."""
    from onnxbridge.isolation import require_importable

    require_importable("paddle")
    os.environ.setdefault("GLOG_minloglevel", "2")
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
                 dynamic: Sequence[DynamicAxis], input_names: Sequence[str] | None, seed: int):
        paddle = import_paddle()
        self.layer = self.predictor = None
        if isinstance(source, (str, Path)):
            if input_names:
                raise BadInputError("the input names of a saved Paddle model are fixed; --input-name does not apply")
            self.program, self.params = inference_files(Path(source))
            self.kind = "Paddle inference model (.json PIR)" if self.program.suffix == ".json" \
                else "Paddle inference model (.pdmodel)"
            self.description = f"Paddle model {self.program.name}"
            specs = self._file_specs(paddle)
            self.predictor = self._predictor(paddle)
            self.dynamic = list(dynamic)
            can_open = False
        else:
            if not isinstance(source, paddle.nn.Layer):
                raise BadInputError(f"a {type(source).__name__} is not a paddle.nn.Layer")
            self.layer, self.kind = source, "paddle.nn.Layer"
            self.description = f"Paddle {type(source).__name__}"
            specs = self._layer_specs(paddle, sample_inputs, input_shapes, input_names)
            self.dynamic = list(dynamic)
            can_open = True
        self.input_specs = apply_overrides(specs, input_shapes, dynamic, can_open=can_open)
        self.sample = self._sample(sample_inputs, seed)
        self.output_names: list[str] = []

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
            raise BadInputError(f"cannot load Paddle model '{self.program.name}': "
                                f"{' '.join(str(exc).split())[:300]}") from None

    def _predictor(self, paddle):
        config = paddle.inference.Config(str(self.program), str(self.params))
        config.disable_gpu()
        config.switch_ir_optim(False)  # the program as saved: no fusions that change numerics
        config.disable_glog_info()
        try:
            return paddle.inference.create_predictor(config)
        except Exception as exc:
            raise BadInputError(f"Paddle cannot run '{self.program.name}': {' '.join(str(exc).split())[:300]}") \
                from None

    def _layer_specs(self, paddle, sample: Any, input_shapes: Sequence[TensorSpec],
                     input_names: Sequence[str] | None) -> list[TensorSpec]:
        params = [n for n, p in inspect.signature(self.layer.forward).parameters.items()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if sample is None:
            if not input_shapes:
                raise BadInputError("a live Paddle layer needs sample inputs or InputSpecs (or --input-shape)")
            return [TensorSpec(s.name, s.shape, s.dtype or "float32") for s in input_shapes]
        items = list(sample) if isinstance(sample, (list, tuple)) else [sample]
        if all(isinstance(s, paddle.static.InputSpec) for s in items):
            names = list(input_names or [])
            return [_spec(names[i] if i < len(names) else (s.name or params[i]), s.shape, s.dtype)
                    for i, s in enumerate(items)]
        names = list(input_names) if input_names else (list(sample) if isinstance(sample, Mapping)
                                                       else params[:len(items)])
        arrays = as_arrays({k: _numpy(v) for k, v in sample.items()} if isinstance(sample, Mapping)
                           else [_numpy(v) for v in items], names)
        return [_spec(n, a.shape, a.dtype) for n, a in arrays.items()]

    def _sample(self, sample: Any, seed: int) -> Sample:
        items = list(sample) if isinstance(sample, (list, tuple)) else [sample]
        if sample is None or (self.layer is not None and type(items[0]).__name__ == "InputSpec"):
            return random_sample(self.input_specs, seed, fill=2)
        names = [s.name for s in self.input_specs]
        arrays = as_arrays({k: _numpy(v) for k, v in sample.items()} if isinstance(sample, Mapping)
                           else [_numpy(v) for v in items], names)
        return Sample({s.name: arrays[s.name].astype(s.dtype) for s in self.input_specs}, origin="sample inputs")

    # export ----------------------------------------------------------------------------------
    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None,
               exporter: str = "auto") -> Exported:
        import onnx
        import paddle2onnx

        from onnxbridge.builder import rename_values
        from onnxbridge.isolation import call_isolated

        notes: list[str] = []
        program, params = self._inference_files(workdir / "paddle")
        save = workdir / "paddle2onnx.onnx"
        call_isolated("onnxbridge.frontends.paddle.convert:to_onnx",
                      {"program": str(program), "params": str(params), "save_file": str(save),
                       "opset": paddle2onnx_opset(opset, notes), "scratch": str(workdir)}, what="paddle2onnx")
        try:
            model = onnx.load(str(save))
        except Exception as exc:
            raise ExportError(f"paddle2onnx wrote an unreadable model: {' '.join(str(exc).split())[:200]}") from None
        if not model.graph.output or not model.graph.node:
            raise ExportError("paddle2onnx reported success but wrote an empty model")
        got = [o.name for o in model.graph.output]
        names = list(output_names) if output_names else \
            (["output"] if len(got) == 1 else [f"output_{i}" for i in range(len(got))])
        if len(names) != len(got):
            raise BadInputError(f"{len(names)} output names for {len(got)} outputs")
        rename_values(model.graph, dict(zip(got, names)))
        self.output_names = names
        return Exported(model, None, f"paddle2onnx {paddle2onnx.__version__}", notes)

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
            raise ExportError(f"paddle.jit.save failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") \
                from None
        program = next((folder / f"model{s}" for s in (".json", ".pdmodel") if (folder / f"model{s}").exists()), None)
        if program is None:
            raise ExportError("paddle.jit.save wrote no program file")
        return program, folder / "model.pdiparams"

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
        return [p.get_output_handle(n).copy_to_cpu() for n in p.get_output_names()]


def _numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)
