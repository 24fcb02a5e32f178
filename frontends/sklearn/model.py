"""A loaded scikit-learn estimator: ONNX export with skl2onnx and reference runs with predict & co."""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnxbridge.errors import BadInputError, ExportError, UnsupportedError, first_line
from onnxbridge.plugins import Exported, SourceModel
from onnxbridge.quiet import quiet
from onnxbridge.frontends.sklearn import boosters, files, fixes, inputs, opsets
from onnxbridge.specs import DynamicAxis, TensorSpec

_TOO_LOW = re.compile(r"requires at least opset (\d+)")


# Reference outputs, shaped as skl2onnx lays them out ------------------------------------------
def _labels(y: Any) -> np.ndarray:
    """Class labels with the ONNX label dtype: integers (and integral floats) as int64, text as str."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:  # CatBoost's multiclass predict: one column of labels
        y = y.reshape(-1)
    if y.dtype.kind in "iub" or (y.dtype.kind == "f" and np.all(np.mod(y, 1) == 0)):
        return y.astype(np.int64)
    if y.dtype.kind in "OUS":
        return y.astype(str).astype(object)
    return y


def _scores(s: Any) -> np.ndarray:
    """Class scores; a binary decision function d becomes the two columns (-d, d) skl2onnx outputs."""
    s = np.asarray(s)
    return np.stack([-s, s], axis=1) if s.ndim == 1 else s


def _column(v: Any) -> np.ndarray:
    v = _dense(v)
    return v.reshape(-1, 1) if v.ndim == 1 else v


def _dense(v: Any) -> np.ndarray:
    return np.asarray(v.toarray() if hasattr(v, "toarray") else v)


def reference_outputs(est: Any) -> list[tuple[str, Callable[[Any], np.ndarray]]]:
    """(method, shaper) per ONNX output of skl2onnx's conversion of ``est``, in output order."""
    from sklearn.base import is_classifier, is_outlier_detector, is_regressor

    if is_outlier_detector(est):
        return [("predict", lambda v: _column(_labels(v))), ("decision_function", _column)]
    if is_classifier(est):
        return [("predict", _labels),
                ("predict_proba", _dense) if hasattr(est, "predict_proba") else ("decision_function", _scores)]
    if is_regressor(est):
        return [("predict", _column)]
    if hasattr(est, "predict") and hasattr(est, "transform"):  # clusterers: labels and distances
        return [("predict", _labels), ("transform", _dense)]
    if hasattr(est, "transform"):
        return [("transform", _dense)]
    if hasattr(est, "predict"):
        return [("predict", _column)]
    raise UnsupportedError(f"{type(est).__name__} has neither predict nor transform")


def describe(est: Any) -> str:
    if hasattr(est, "steps"):
        return f"{type(est).__name__}({', '.join(type(s).__name__ for _, s in est.steps)})"
    return type(est).__name__


class SklearnModel(SourceModel):
    frontend = "sklearn"
    framework = "scikit-learn"
    converter = "skl2onnx"

    def __init__(self, estimator: Any, layout: inputs.Inputs, *, kind: str, description: str):
        self.estimator, self.layout = estimator, layout
        self.kind, self.description = kind, description
        self.input_specs = layout.specs
        self.sample = layout.sample
        self.dynamic = [DynamicAxis(s.name, 0, inputs.BATCH) for s in layout.specs]
        self.outputs = reference_outputs(estimator)
        self._reference0: list[np.ndarray] | None = None

    @classmethod
    def create(cls, source: Any, *, sample_inputs: Any, input_shapes: Sequence[TensorSpec],
               dynamic: Sequence[DynamicAxis], input_names: Sequence[str] | None, trust: bool,
               seed: int) -> SklearnModel:
        if isinstance(source, (str, Path)):
            est, kind = files.load(Path(source), trust)
            description = f"{describe(est)} from {Path(source).name}"
        elif files.is_estimator(source):
            est, kind, description = source, "estimator", describe(source)
        else:
            raise BadInputError(f"the sklearn frontend cannot use a {type(source).__name__}")
        _check_fitted(est, description)
        if input_names and len(input_names) != 1:
            raise BadInputError(f"{len(input_names)} input names given; a scikit-learn array input is one "
                                "tensor X (a DataFrame's inputs are named after its columns)")
        if sample_inputs is not None:
            if input_shapes:
                raise BadInputError("--input-shape applies only when no sample X is given")
            layout = inputs.from_sample(sample_inputs, est, input_names)
        else:
            layout = inputs.derived(est, input_shapes, input_names, seed, description)
        names = [s.name for s in layout.specs]
        for d in dynamic:
            if d.name not in names:
                raise BadInputError(f"--dynamic names unknown input '{d.name}'; the model takes "
                                    f"{', '.join(map(repr, names))}")
            if d.axis not in (0, -2):
                raise BadInputError(f"--dynamic {d.name}:{d.axis}: only the batch axis (0) of a scikit-learn "
                                    "input can vary, and it always does")
        model = cls(est, layout, kind=kind, description=description)
        try:
            model._reference0 = model._predict(layout.sample.feeds)
        except Exception as exc:
            raise BadInputError(f"{description} fails on its sample inputs {layout.sample.shapes()}: "
                                f"{type(exc).__name__}: {first_line(exc)}") from None
        return model

    # running ---------------------------------------------------------------------------------
    def _predict(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        x = self.layout.reference(feeds)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [shape(getattr(self.estimator, method)(x)) for method, shape in self.outputs]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """A fresh prediction on ``feeds`` (never a cached answer: validation times these calls)."""
        return self._predict(feeds)

    # export ----------------------------------------------------------------------------------
    def export(self, workdir: Path, *, opset: int | None, output_names: Sequence[str] | None = None) -> Exported:
        import skl2onnx

        if output_names and len(output_names) != len(self.outputs):
            raise BadInputError(f"{len(output_names)} output names given; the model has {len(self.outputs)} "
                                f"outputs ({', '.join(m for m, _ in self.outputs)})")
        boosters.register(self.estimator)
        newest = opsets.newest_main()
        main = min(opset, newest) if opset is not None else newest
        notes: list[str] = []
        if main != (opset or main):
            notes.append(f"skl2onnx {skl2onnx.__version__} converts up to opset {newest}; exported at {main}")
        caught: list[str] = []
        model, main = self._convert(main, notes, caught)
        _, note = opsets.declare(model, main)
        if note:
            notes.append(note)
        if opset is None:
            model = _at_default(model, main, notes)
        _name_batch(model)
        note = self._threshold_note(model)
        if note:
            notes.append(note)
        if output_names:
            _rename_outputs(model, list(output_names))
        return Exported(model, None, f"skl2onnx {skl2onnx.__version__}", notes, caught)

    def _threshold_note(self, model: Any) -> str | None:
        """For tree models: how the float32 thresholds of ONNX TreeEnsemble act on the sample rows."""
        if self._reference0 is None or not any(n.op_type.startswith("TreeEnsemble") for n in model.graph.node):
            return None
        from onnxbridge.compare import TOLERANCES

        feeds = self.layout.sample.feeds
        got, features = None, None
        try:
            import onnx

            from onnxbridge import runtime

            probe = onnx.ModelProto()
            probe.CopyFrom(model)
            trees = [n for n in probe.graph.node if n.op_type.startswith("TreeEnsemble")]
            if len(trees) == 1:  # the features the trees see, to measure their float32 error
                probe.graph.output.append(onnx.helper.make_tensor_value_info(trees[0].input[0], 1, None))
            # in the worker, as every onnxruntime session is: a crash there only loses this note
            session = runtime.open(probe, what="the onnxruntime session of the tree-threshold check")
            got = session({s.name: feeds[s.name] for s in session.input_specs})
            if len(trees) == 1:
                got, features = got[:-1], got[-1]
        except Exception:  # noqa: BLE001 - validation reports a model that does not run
            pass
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return boosters.threshold_note(self.estimator, self.layout.reference(feeds), self._reference0, got,
                                           *TOLERANCES["fp32"], onnx_features=features)

    def _convert(self, main: int, notes: list[str], caught: list[str]):
        """skl2onnx at ``main`` (or the lowest opset it can write this model at), labels and
        probabilities as plain tensors; returns (model, the main opset it was written at)."""
        from skl2onnx import convert_sklearn

        options = {id(self.estimator): {"zipmap": False}}
        while True:
            target = {"": main, opsets.ML: min(opsets.paired_ml(main), opsets.SKL2ONNX_MAX_ML)}
            try:
                with fixes.patched(), quiet(caught, ("skl2onnx",)):
                    try:
                        model = convert_sklearn(self.estimator, initial_types=self.layout.initial_types(),
                                                target_opset=target, options=options)
                    except NameError as exc:  # no zipmap option: the converter outputs plain tensors anyway
                        if "zipmap" not in str(exc):
                            raise
                        options = None
                        continue
                return model, main
            except (UnsupportedError, BadInputError):
                raise
            except Exception as exc:
                needed = _TOO_LOW.search(str(exc))
                if needed and int(needed[1]) > main:
                    notes.append(f"skl2onnx needs opset {needed[1]} for this model; exported there")
                    main = int(needed[1])
                    continue
                raise _export_error(self.description, exc) from None


def _at_default(model: Any, main: int, notes: list[str]) -> Any:
    """skl2onnx declares the lowest opset its nodes need: move the model to the default ``main``."""
    from onnxbridge.adapters import adapt, default_opset

    have = default_opset(model)
    if have == main:
        return model
    try:
        model = adapt(model, main)
    except UnsupportedError as exc:
        notes.append(f"kept opset {have} (skl2onnx's choice): the default opset {main} needs {exc}")
        return model
    notes.append(f"skl2onnx wrote opset {have}; adapted to the default opset {main}")
    return model


def _export_error(what: str, exc: Exception) -> Exception:
    text = first_line(exc)
    if "shape calculator" in text or "No proper converter" in text or type(exc).__name__ == "MissingShapeCalculator":
        return UnsupportedError(f"skl2onnx has no converter for a part of {what}: {text}",
                                hint="register one with skl2onnx.update_registered_converter")
    return ExportError(f"skl2onnx cannot convert {what}: {type(exc).__name__}: {text}")


def _check_fitted(est: Any, what: str) -> None:
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(est)
    except NotFittedError:
        raise BadInputError(f"{what} is not fitted; call fit() before converting it") from None
    except TypeError as exc:
        raise BadInputError(f"{what} is not a scikit-learn estimator: {first_line(exc)}") from None


def _name_batch(model: Any) -> None:
    """Label the free first axis of every graph input and output 'batch'."""
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_param = inputs.BATCH


def _rename_outputs(model: Any, names: list[str]) -> None:
    graph = model.graph
    mapping = {o.name: n for o, n in zip(graph.output, names)}
    taken = {v for node in graph.node for v in (*node.input, *node.output)} | {i.name for i in graph.input}
    clash = [n for n in names if n in taken and n not in mapping]
    if clash or len(set(names)) != len(names):
        raise BadInputError(f"output names {names} repeat or clash with names inside the model")
    for node in graph.node:
        node.input[:] = [mapping.get(i, i) for i in node.input]
        node.output[:] = [mapping.get(o, o) for o in node.output]
    for out in graph.output:
        out.name = mapping[out.name]
