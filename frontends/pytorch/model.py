"""A loaded PyTorch source: sample inputs, ONNX export (dynamo or TorchScript) and reference runs."""
from __future__ import annotations

import contextlib
import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import torch

from onnxbridge.errors import BadInputError, ExportError, OnnxBridgeError, first_line
from onnxbridge.frontends.pytorch import archives, script_hints, unsafe_ops
from onnxbridge.inplace import load_in_place
from onnxbridge.optimize import forget_rewriter_matches
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.quiet import native_output_silenced, quiet
from onnxbridge.specs import DynamicAxis, Sample, TensorSpec, random_array, vary_dynamic

if TYPE_CHECKING:
    import onnx

    from onnxbridge.localize.probe import Sides

TORCH_LOGGERS = ("torch.onnx", "torch.export", "torch._export", "onnxscript")

EXPORTERS = ("auto", "dynamo", "torchscript")
DYNAMO_OPSET = 18  # the lowest opset the dynamo exporter writes natively
_TORCH_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.float64: "float64",
                 torch.bfloat16: "bfloat16", torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16",
                 torch.int32: "int32", torch.int64: "int64", torch.bool: "bool"}


def to_numpy(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            import ml_dtypes

            return t.float().numpy().astype(ml_dtypes.bfloat16)
        return t.resolve_conj().resolve_neg().numpy()
    return np.asarray(t)


def to_torch(a: np.ndarray) -> torch.Tensor:
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))


@contextlib.contextmanager
def eval_mode(module: Any, *, grad: bool = False):
    """Eval mode (and no_grad unless ``grad``); every submodule's own training flag is restored after.

    Exports keep grad mode on: under no_grad, nn.TransformerEncoderLayer takes a fused fast path
    (aten::_transformer_encoder_layer_fwd) that the TorchScript exporter cannot translate.
    """
    states = []
    if isinstance(module, torch.nn.Module):
        with contextlib.suppress(Exception):
            states = [(m, m.training) for m in module.modules()]
            for m, _ in states:
                m.training = False
    try:
        with contextlib.nullcontext() if grad else torch.no_grad():
            yield
    finally:
        for m, flag in states:
            m.training = flag


def _param_names(module: Any) -> list[str]:
    if isinstance(module, torch.jit.ScriptModule):
        return [a.name for a in module.forward.schema.arguments[1:]]
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _required_names(module: Any) -> list[str]:
    if isinstance(module, torch.jit.ScriptModule):
        return [a.name for a in module.forward.schema.arguments[1:] if a.default_value is None]
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]


class TorchModel(SourceModel):
    frontend = "torch"
    framework = "torch"
    declares_shapes = False  # a module takes what it is given: its input specs are the sample's shapes
    exporter = "auto"  # the frontend's ``exporter`` option (``load`` sets it)

    def __init__(self, module: Any, *, kind: str, description: str, args: tuple, kwargs: dict,
                 names: list[str], dynamic: Sequence[DynamicAxis], program: Any = None):
        self.module, self.program = module, program
        self.kind, self.description = kind, description
        self.args, self.kwargs = args, kwargs
        # (slot, name): slot is an int for a positional argument, a str for a keyword argument
        self.slots: list[tuple[int | str, str]] = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                self.slots.append((i, names[i] if i < len(names) else f"input_{i}"))
            elif isinstance(a, (list, tuple, dict)):
                raise BadInputError("nested sample inputs (lists/dicts of tensors) are not supported; "
                                    "pass tensors as separate arguments")
        self.slots += [(k, k) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        self.input_specs = [TensorSpec(n, tuple(self._value(s).shape), _TORCH_DTYPES.get(self._value(s).dtype,
                            str(self._value(s).dtype))) for s, n in self.slots]
        self.sample = Sample({n: to_numpy(self._value(s)) for s, n in self.slots}, origin="sample inputs")
        names_known = [n for _, n in self.slots]
        for d in dynamic:
            if d.name in names_known:
                rank = len(self.sample.feeds[d.name].shape)
                if not -rank <= d.axis < rank:
                    raise BadInputError(f"--dynamic {d.name}:{d.axis}: input '{d.name}' has rank {rank}")
        self.dynamic = list(dynamic)

    # construction ---------------------------------------------------------------------------
    @classmethod
    def create(cls, source: Any, *, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
               dynamic: Sequence[DynamicAxis], input_names: Sequence[str] | None, trust: bool,
               seed: int) -> "TorchModel":
        program = None
        if isinstance(source, (str, Path)):
            loaded, kind_label, description = _load_file(Path(source), trust)
            if kind_label == "torch.export .pt2":
                program = loaded
            else:
                module = loaded
        elif isinstance(source, torch.export.ExportedProgram):
            program, kind_label = source, "torch.export ExportedProgram"
            description = f"ExportedProgram ({len(program.graph.nodes)} FX nodes)"
        elif isinstance(source, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
            module, kind_label, description = source, "TorchScript", f"TorchScript {type(source).__name__}"
        elif isinstance(source, torch.nn.Module):
            module, kind_label, description = source, "nn.Module", f"nn.Module {type(source).__name__}"
        else:
            raise BadInputError(f"torch frontend cannot use a {type(source).__name__}")

        if program is not None:
            module = program.module()
            names = list(program.graph_signature.user_inputs)
            if sample_inputs is None and program.example_inputs is not None:
                args, kwargs = program.example_inputs
                sample_inputs = (tuple(args), dict(kwargs))
            if dynamic:
                raise BadInputError("an ExportedProgram carries its own dynamic shapes; re-export it with "
                                    "torch.export(dynamic_shapes=...) to change them")
            args, kwargs = sample_inputs if sample_inputs is not None else ((), {})
        else:
            names = _param_names(module)
            args, kwargs = _split_sample(sample_inputs)
        args, kwargs = _apply_shapes(module, names, args, kwargs, input_shapes, seed,
                                     needs_sample=sample_inputs is None, source=description)
        if input_names:
            tensor_count = sum(isinstance(a, torch.Tensor) for a in args) + sum(
                isinstance(v, torch.Tensor) for v in kwargs.values())
            if len(input_names) != tensor_count:
                raise BadInputError(f"{len(input_names)} input names given for {tensor_count} tensor inputs")
            names = list(input_names)
        # no forward here: a conversion without validation runs the module only inside the exporter
        return cls(module, kind=kind_label, description=description, args=tuple(args), kwargs=dict(kwargs),
                   names=names, dynamic=dynamic, program=program)

    # running ---------------------------------------------------------------------------------
    def _value(self, slot: int | str) -> Any:
        return self.args[slot] if isinstance(slot, int) else self.kwargs[slot]

    def _forward(self, args: tuple, kwargs: dict) -> list[np.ndarray]:
        if self.module is None:
            raise RuntimeError("the torch model was released (its weights freed) and cannot run again")
        with eval_mode(self.module):
            out = self.module(*args, **kwargs)
        leaves = torch.utils._pytree.tree_leaves(out)
        return [to_numpy(x) for x in leaves if isinstance(x, (torch.Tensor, int, float, bool))]

    def bind(self, tensors: Mapping[str, torch.Tensor]) -> tuple[tuple, dict]:
        """The sample's args and kwargs with each tensor input replaced by ``tensors[name]``."""
        args, kwargs = list(self.args), dict(self.kwargs)
        for slot, name in self.slots:
            if name not in tensors:
                raise BadInputError(f"no value for input '{name}'; given {list(tensors)}")
            if isinstance(slot, int):
                args[slot] = tensors[name]
            else:
                kwargs[slot] = tensors[name]
        return tuple(args), kwargs

    def _with_feeds(self, feeds: Mapping[str, np.ndarray]) -> tuple[tuple, dict]:
        return self.bind({n: to_torch(v) for n, v in feeds.items()})

    def probe(self, model: "onnx.ModelProto") -> "Sides | None":
        """Module outputs (forward hooks) matched to ``model``'s tensors: see ``frontends/pytorch/probe.py``."""
        from onnxbridge.frontends.pytorch.probe import torch_sides

        return torch_sides(self, model)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """A fresh forward on ``feeds`` (never a cached answer: validation times these calls)."""
        return self._forward(*self._with_feeds(feeds))

    def release(self) -> None:
        """Let go of the module and program, so their weights can be freed once nothing else holds them (a live
        module the caller passed stays theirs, untouched); ``run`` and ``export`` fail after this. The exporter's
        traces hold the parameters in reference cycles: they go when the spine collects garbage next."""
        self.module = self.program = None

    def _fails_on_sample(self) -> str | None:
        """Why the module cannot run on its sample inputs (one line), or None when it runs."""
        try:
            self._forward(self.args, self.kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's forward is the answer
            return script_hints.interpreter_error(exc)
        return None

    # export ----------------------------------------------------------------------------------
    def _tensors_only(self) -> bool:
        """True when every forward parameter is given, as a tensor (what the tracer handles as is)."""
        if self.kwargs or any(not isinstance(a, torch.Tensor) for a in self.args):
            return False
        if isinstance(self.module, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
            return True
        return len(_param_names(self.module)) <= len(self.args)

    def check_exporter(self, exporter: str) -> str:
        """``exporter`` (the frontend's ``--exporter``), refused where it cannot export this model."""
        if exporter not in EXPORTERS:
            raise BadInputError(f"unknown exporter '{exporter}'; known: {', '.join(EXPORTERS)}")
        if self.program is not None and exporter == "torchscript":
            raise BadInputError("an ExportedProgram can only be exported with the dynamo exporter")
        if self._scripted() and exporter == "dynamo":
            raise BadInputError("a TorchScript module can only be exported with the torchscript exporter")
        return exporter

    def _scripted(self) -> bool:
        return isinstance(self.module, (torch.jit.ScriptModule, torch.jit.ScriptFunction))

    def exporter_order(self, opset: int | None) -> list[str]:
        """The exporters to try, in order: the chosen one, or under ``auto`` the one likely to validate first."""
        exporter = self.check_exporter(self.exporter)
        scripted = self._scripted()
        if exporter != "auto":
            return [exporter]
        if self.program is not None:
            return ["dynamo"]
        if scripted:
            return ["torchscript"]
        # Below 18 the TorchScript exporter emits the opset natively; dynamo emits 18 and converts down.
        return ["torchscript", "dynamo"] if opset is not None and opset < 18 else ["dynamo", "torchscript"]

    def _dynamic_axes(self, output_names: Sequence[str] | None) -> dict[str, dict[int, str]]:
        output_names = output_names or ()
        axes: dict[str, dict[int, str]] = {}
        for d in self.dynamic:
            if d.name in self.sample.feeds:
                axes.setdefault(d.name, {})[d.axis % self.sample.feeds[d.name].ndim] = d.dim_label
            elif d.name in output_names:
                axes.setdefault(d.name, {})[d.axis] = d.dim_label
        return axes

    def _export_args(self, notes: list[str]) -> tuple[tuple, dict]:
        """Sample args for dynamo: a dynamic axis of size 1 is grown to 2, or torch.export specialises it."""
        feeds = dict(self.sample.feeds)
        for d in self.dynamic:
            arr = feeds.get(d.name)
            if arr is not None and arr.ndim and arr.shape[d.axis] == 1:
                feeds[d.name] = np.repeat(arr, 2, axis=d.axis)
                notes.append(f"dynamic axis {d.name}:{d.axis} has size 1 in the sample; exported with size 2 "
                             "so torch.export does not bake it in")
        return self._with_feeds(feeds)

    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        """The first exporter in ``exporter_order`` that works. Under ``auto``, a TorchScript export with dynamic
        axes must also run at grown sizes (``check_export``); when it does not and the dynamo exporter is still
        untried, the dynamo export replaces it if that one passes the same check."""
        import onnx

        outputs = list(output_names) if output_names else None
        if outputs is None and any(d.name not in self.sample.feeds for d in self.dynamic):
            # a --dynamic axis names an output by its default name: the exporter needs the names up front
            outputs = _default_output_names(len(self._forward(self.args, self.kwargs)))
        input_names = [n for _, n in self.slots]
        notes: list[str] = []
        caught: list[str] = []
        failures: list[str] = []
        order = self.exporter_order(opset)
        for i, name in enumerate(order):
            path = workdir / f"{name}.onnx"
            try:
                self._export_quietly(name, path, opset, input_names, outputs, notes, caught)
            except Exception as exc:
                failures.append(f"{name} exporter: {first_line(exc)}")
                continue
            if failures:
                notes.append(f"fell back to the {name} exporter after: {failures[0]}")
            if self.exporter == "auto" and name == "torchscript" and "dynamo" in order[i + 1:] and self.dynamic:
                name, path = self._second_opinion(workdir, path, opset, input_names, outputs, notes, caught)
            # a TorchScript export holds its weights inline: they stay in its file, read in place (not parsed)
            model = load_in_place(path) if name == "torchscript" else onnx.load(str(path), load_external_data=False)
            if outputs is None:
                _name_outputs(model)
            return Exported(model, workdir, f"torch.onnx.export ({name})", notes, caught)
        problem = self._fails_on_sample()  # the module itself, not the exporters, may be what fails
        if problem is not None:
            ints = script_hints.integer_hint(self.module, {k: (tuple(v.shape), str(v.dtype))
                                                           for k, v in self.sample.feeds.items()})
            raise BadInputError(f"the model fails on inputs {self.sample.shapes()}: {problem}", hint=ints)
        raise ExportError("torch export failed: " + "; ".join(failures))

    def _export_quietly(self, name: str, path: Path, opset: int | None, input_names: list[str],
                        output_names: list[str], notes: list[str], caught: list[str]) -> None:
        with quiet(caught, TORCH_LOGGERS), eval_mode(self.module, grad=True):
            self._export_with(name, path, opset, input_names, output_names, notes)

    def _second_opinion(self, workdir: Path, path: Path, opset: int | None, input_names: list[str],
                        output_names: list[str], notes: list[str], caught: list[str]) -> tuple[str, Path]:
        """(exporter, path) to keep after a TorchScript export with dynamic axes: that one when it passes
        ``check_export``, else the dynamo export when that one passes (``auto`` means the one that validates)."""
        problem = self.check_export(path, "torchscript")
        if problem is None:
            return "torchscript", path
        alt, alt_notes, alt_caught = workdir / "dynamo.onnx", [], []
        try:
            self._export_quietly("dynamo", alt, opset, input_names, output_names, alt_notes, alt_caught)
        except Exception as exc:
            notes.append(f"the torchscript export fails {problem}; the dynamo exporter, tried instead, failed: "
                         f"{first_line(exc)}; kept the torchscript export")
            return "torchscript", path
        alt_problem = self.check_export(alt, "dynamo", opset)
        if alt_problem is not None:
            notes.append(f"the torchscript export fails {problem}; the dynamo export, tried instead, fails "
                         f"{alt_problem}; kept the torchscript export")
            return "torchscript", path
        notes += alt_notes
        caught += alt_caught
        notes.append(f"exporter auto: the torchscript export fails {problem}; the dynamo export passes at the "
                     "same sizes and is used instead")
        return "dynamo", alt

    def check_samples(self) -> list[Sample]:
        """The sample, then every requested dynamic axis grown by one, then at its range's ends (when given)."""
        samples = [self.sample]
        grown = vary_dynamic(self.sample, self.dynamic)
        if grown is not None:
            samples.append(grown)
        ranged = [d for d in self.dynamic if d.min is not None]
        for end in ("min", "max"):
            at_end = vary_dynamic(self.sample, ranged, lambda d, n, end=end: getattr(d, end),
                                  f"dynamic axes at their {end}")
            if at_end is not None:
                samples.append(at_end)
        return samples

    def check_export(self, path: Path, exporter: str, opset: int | None = None) -> str | None:
        """Why the exported model at ``path`` disagrees with the module (onnxruntime, in the worker, on
        ``check_samples``; fp32 tolerances), or None when it agrees. With ``opset``, a model our adapters cannot
        move there fails too. Sizes the module itself rejects are skipped."""
        from onnxbridge import adapters, runtime
        from onnxbridge.validation import Tolerance

        if opset is not None:
            with contextlib.suppress(OnnxBridgeError):
                blockers = adapters.check(path, opset)
                if blockers:
                    return f"to adapt to opset {opset}: {blockers[0]}"
        tol = Tolerance.for_precision("fp32")
        try:
            runner = runtime.open(path, what=f"the onnxruntime session of the {exporter} export")
        except Exception as exc:
            return f"to load in onnxruntime: {first_line(exc)}"
        for sample in self.check_samples():
            try:
                want = self.run(sample.feeds)
            except Exception:
                continue
            try:
                got = runner(sample.feeds)
            except Exception as exc:
                return f"at input shapes {sample.shapes()}: {first_line(exc)}"
            for i, (w, g) in enumerate(zip(want, got)):
                w, g = np.asarray(w), np.asarray(g)
                if w.shape != g.shape:
                    return f"at input shapes {sample.shapes()}: output {i} has shape {list(g.shape)}, torch's " \
                           f"{list(w.shape)}"
                if w.dtype.kind in "fc" and not np.allclose(g.astype(np.float64), w.astype(np.float64),
                                                            atol=tol.atol, rtol=tol.rtol, equal_nan=True):
                    return f"at input shapes {sample.shapes()}: output {i} differs from torch's"
                if w.dtype.kind not in "fc" and not np.array_equal(g, w):
                    return f"at input shapes {sample.shapes()}: output {i} differs from torch's"
        return None

    def _dynamic_shapes(self, target: Any, notes: list[str]) -> Any:
        """``dynamic_shapes`` for torch.export when a ``--dynamic`` axis has a range (``x:0:batch:1..16``): one
        torch.export.Dim per label, with the range's bounds (unranged axes: Dim.DYNAMIC); None when no axis has
        a range (``dynamic_axes`` then says it) or the inputs cannot be named for torch.export."""
        if not any(d.min is not None for d in self.dynamic):
            return None
        names = _param_names(target)
        dims: dict[str, Any] = {}
        shapes: dict[str, dict[int, Any]] = {}
        ranges = []
        for d in self.dynamic:
            slot = next((s for s, n in self.slots if n == d.name), None)
            if slot is None:
                continue
            key = slot if isinstance(slot, str) else (names[slot] if slot < len(names) else None)
            if key is None:
                return None
            axis = d.axis % self.sample.feeds[d.name].ndim
            if d.dim_label not in dims:
                if d.min is None or d.max is None or d.max < 2:
                    dims[d.dim_label] = torch.export.Dim.DYNAMIC
                else:
                    dims[d.dim_label] = torch.export.Dim(_dim_name(d.dim_label), min=d.min, max=d.max)
                    ranges.append(f"{d.dim_label} {d.min}..{d.max}")
            shapes.setdefault(key, {})[axis] = dims[d.dim_label]
        if ranges:
            notes.append(f"dynamic range{'s' if len(ranges) > 1 else ''} given to torch.export: {', '.join(ranges)}")
        return shapes

    def _export_with(self, exporter: str, path: Path, opset: int | None, input_names: list[str],
                     output_names: list[str] | None, notes: list[str]) -> None:
        common = dict(input_names=input_names, output_names=output_names, opset_version=opset)
        if exporter == "dynamo":
            target = self.program if self.program is not None else self.module
            args, kwargs = self._export_args(notes) if self.dynamic else (self.args, self.kwargs)
            if opset is not None and opset < DYNAMO_OPSET:
                # Below 18 torch converts its own opset-18 graph down and keeps opset-18 attributes (Split's
                # num_outputs) that the checker rejects; our adapters move it instead (builder.finalize).
                common["opset_version"] = DYNAMO_OPSET
                notes.append(f"dynamo exporter run at opset {DYNAMO_OPSET}, not {opset}: below {DYNAMO_OPSET} it "
                             f"writes opset-{DYNAMO_OPSET} attributes; onnxbridge's adapters take it to {opset}")
            shapes = self._dynamic_shapes(target, notes) if self.program is None else None
            dyn = {k: v for k, v in self._dynamic_axes(output_names).items() if k in input_names}
            dynamic = {"dynamic_shapes": shapes} if shapes is not None else {"dynamic_axes": dyn or None}
            try:
                torch.onnx.export(target, args, str(path), kwargs=kwargs or None, dynamo=True, external_data=True,
                                  verbose=False, **dynamic, **common)
            finally:
                forget_rewriter_matches()  # else they keep the exported graph, and the weights, alive
            if opset is not None and opset < 14 and _drop_runtime_allowzero(path):
                notes.append("Reshape allowzero=1 dropped where the shape is computed at run time (from sizes "
                             "torch.export keeps nonzero), so the adapters can move it below opset 14")
        else:
            from onnxbridge.frontends.pytorch.symbolics import extra_symbolics

            target, args = self.module, self.args + ((self.kwargs,) if self.kwargs else ())
            if not self._tensors_only():
                # The tracer turns Python scalars and unfilled defaults into graph inputs: bind them.
                target, args = _TensorsOnly(self), tuple(self._value(s) for s, _ in self.slots)
            with native_output_silenced(), extra_symbolics(opset):
                torch.onnx.export(target, args, str(path), dynamo=False, do_constant_folding=True,
                                  dynamic_axes=self._dynamic_axes(output_names) or None, **common)


def _default_output_names(count: int) -> list[str]:
    """What the outputs are called when no --output-name is given: ``output``, or ``output_0``, ``output_1``, ..."""
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]


def _name_outputs(model: "onnx.ModelProto") -> None:
    """Give ``model``'s graph outputs their default names (``_default_output_names``), as the exporter would have
    had it known their count: each output's value is renamed wherever it is used (subgraphs too), a value already
    holding a wanted name is renamed out of the way, and an output that is also a graph input, an initializer or
    an earlier output gets an Identity instead. A wanted name held by a graph input or initializer is not taken."""
    import onnx

    from onnxbridge.modelwalk import graphs

    graph = model.graph
    wanted = _default_output_names(len(graph.output))
    if [o.name for o in graph.output] == wanted:
        return
    fixed = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    taken = set(fixed) | {o for g in graphs(graph) for n in g.node for o in n.output} | \
        {i.name for g in graphs(graph) for i in g.input}
    renames: dict[str, str] = {}
    identities: list[tuple[str, str]] = []
    renamed_outputs = {o.name for o, w in zip(graph.output, wanted) if o.name != w}
    seen: set[str] = set()
    for out, want in zip(graph.output, wanted):
        name = out.name
        if name == want or want in fixed:
            seen.add(name)
            continue
        if want in taken and want not in renamed_outputs:  # an inner value has the name: move it aside
            fresh = next(f"{want}__{k}" for k in range(1, len(taken) + 2) if f"{want}__{k}" not in taken)
            renames[want] = fresh
            taken.add(fresh)
        if name in fixed or name in seen:
            identities.append((name, want))
        else:
            renames[name] = want
        seen.add(name)
        out.name = want
    for g in graphs(graph):
        for node in g.node:
            node.input[:] = [renames.get(v, v) for v in node.input]
            node.output[:] = [renames.get(v, v) for v in node.output]
        for info in g.value_info:
            info.name = renames.get(info.name, info.name)
        if g is not graph:
            for o in g.output:
                o.name = renames.get(o.name, o.name)
    graph.node.extend(onnx.helper.make_node("Identity", [renames.get(src, src)], [dst], name=f"{dst}_Identity")
                      for src, dst in identities)


def _drop_runtime_allowzero(path: Path) -> int:
    """Drop ``allowzero=1`` from Reshapes (in the file at ``path``) whose shape is not a constant; their count.

    torch's ``view`` lowers to Reshape(allowzero=1) because a 0 in a torch shape is an empty dimension; a shape
    computed at run time comes from the dynamic sizes, which torch.export never lets be 0, so the flag changes
    nothing there and opsets below 14 cannot express it. Constant shapes are left for the adapters to judge.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    dropped = 0
    for node in model.graph.node:  # torch's graph: Reshapes sit in the main graph (functions are inlined)
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or node.input[1] in constants:
            continue
        for attr in list(node.attribute):
            if attr.name == "allowzero" and attr.i:
                node.attribute.remove(attr)
                dropped += 1
    if dropped:
        onnx.save(model, str(path))
    return dropped


def _dim_name(label: str) -> str:
    """A torch.export.Dim name (an identifier) for a dynamic axis label."""
    name = re.sub(r"\W", "_", label)
    return name if name[:1].isalpha() or name[:1] == "_" else f"d_{name}"


class _TensorsOnly(torch.nn.Module):
    """The source module with its non-tensor arguments bound: forward takes the tensor inputs only."""

    def __init__(self, source: TorchModel):
        super().__init__()
        self.inner = source.module
        self._source = source

    def forward(self, *tensors):
        args, kwargs = self._source.bind(dict(zip((n for _, n in self._source.slots), tensors)))
        return self.inner(*args, **kwargs)


def _load_file(path: Path, trust: bool) -> tuple[Any, str, str]:
    """(ExportedProgram or module, kind label, description) for a torch file; pickles need ``trust``, and so
    do programs that call file, network or custom operators (``unsafe_ops``)."""
    kind = archives.kind(path)
    if kind == "pt2":
        pickled = archives.pt2_pickled_entries(path)
        if pickled:
            archives.require_trust(path, f"holds pickled objects ({pickled[0]})", trust)
        program = _call(lambda: torch.export.load(str(path)), f"cannot load '{path}'")
        if not trust:
            unsafe_ops.check_program(path, program)
        return program, "torch.export .pt2", f"torch.export archive {path.name}"
    if kind == "torchscript":
        load = (lambda: torch.jit.load(str(path), map_location="cpu")) if trust else \
            (lambda: unsafe_ops.load_torchscript(path))
        return _call(load, f"cannot load '{path}'"), "TorchScript", f"TorchScript archive {path.name}"
    archives.require_trust(path, "is a pickle written by torch.save", trust)
    from onnxbridge.sources import importable_beside, missing_module_hint

    with importable_beside(path):  # a class defined in a .py beside the pickle
        obj = _call(lambda: torch.load(path, map_location="cpu", weights_only=False), f"cannot unpickle '{path}'",
                    hint=lambda exc: missing_module_hint(exc, path))
    if isinstance(obj, Mapping):
        raise BadInputError(f"'{path}' holds a state_dict, not a model: use a factory "
                            "(module.py:function) that builds the model and loads it")
    if not isinstance(obj, torch.nn.Module):
        raise BadInputError(f"'{path}' holds a {type(obj).__name__}, not a torch.nn.Module")
    return obj, "pickled nn.Module", f"pickled {type(obj).__name__} from {path.name}"


def _call(fn, what: str, hint=None):
    try:
        return fn()
    except OnnxBridgeError:
        raise
    except Exception as exc:
        raise BadInputError(f"{what}: {first_line(exc)}", hint=hint(exc) if hint else None) from None


def _split_sample(sample: Any) -> tuple[tuple, dict]:
    if sample is None:
        return (), {}
    if isinstance(sample, (torch.Tensor, np.ndarray)):
        sample = (sample,)
    if isinstance(sample, Mapping):
        return (), {k: to_torch(v) if isinstance(v, np.ndarray) else v for k, v in sample.items()}
    if isinstance(sample, (tuple, list)):
        return tuple(to_torch(v) if isinstance(v, np.ndarray) else v for v in sample), {}
    raise BadInputError(f"sample inputs must be a tensor, a tuple of tensors or a dict, not {type(sample).__name__}")


def _apply_shapes(module: Any, names: list[str], args: tuple, kwargs: dict, shapes: Sequence[TensorSpec],
                  seed: int, *, needs_sample: bool, source: str) -> tuple[tuple, dict]:
    """Replace or create inputs from --input-shape specs (seeded random values)."""
    rng = np.random.default_rng(seed)
    args, kwargs = list(args), dict(kwargs)
    by_name = {s.name: s for s in shapes}
    if needs_sample and not shapes:
        required = _required_names(module) or names
        guesses = script_hints.guess_inputs(module)  # rank and dtype from the program's first ops, where it says
        example = " ".join(f"--input-shape {guesses[n].flag() if n in guesses else f'{n}:1,3,224,224'}"
                           for n in required) or "--input-shape x:1,3,224,224"
        raise BadInputError(f"{source} has no sample inputs: pass them (Python API) or --input-shape for "
                            f"{', '.join(required) or 'its inputs'} (e.g. {example})")
    known = names or [f"input_{i}" for i in range(len(args))]
    unknown = [n for n in by_name if n not in known and n not in kwargs]
    if unknown:
        raise BadInputError(f"--input-shape names unknown input {', '.join(map(repr, unknown))}; "
                            f"the model takes {', '.join(map(repr, known)) or 'no named inputs'}")
    if needs_sample:
        required = _required_names(module) or names
        missing = [n for n in required if n not in by_name]
        if missing:
            raise BadInputError(f"--input-shape missing for input {', '.join(map(repr, missing))}")
        order = [n for n in known if n in by_name]
        args = [None] * len(order)
        for i, n in enumerate(order):
            spec = by_name[n]
            args[i] = to_torch(random_array(spec.shape, spec.dtype or "float32", rng))
        return tuple(args), kwargs
    for n, spec in by_name.items():
        if n in kwargs:
            old = kwargs[n]
            kwargs[n] = to_torch(random_array(spec.shape, spec.dtype or _TORCH_DTYPES.get(old.dtype, "float32"), rng))
        else:
            i = known.index(n)
            if len(args) <= i:
                raise BadInputError(f"--input-shape {n}: the sample inputs do not include '{n}'")
            old = args[i]
            dtype = spec.dtype or (_TORCH_DTYPES.get(old.dtype, "float32") if isinstance(old, torch.Tensor) else "float32")
            args[i] = to_torch(random_array(spec.shape, dtype, rng))
    return tuple(args), kwargs
