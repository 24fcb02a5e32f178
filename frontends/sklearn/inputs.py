"""ONNX inputs of an estimator and the data behind them.

A 2-D array becomes one input ``X`` of shape (batch, n_features); a DataFrame one (batch, 1) input
per column, typed by the column (float32, int64, bool or string). Floats are float32 in ONNX, and the
reference run gets exactly those rounded values back, so a label that differs is a real difference.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onnxbridge.errors import BadInputError
from onnxbridge.specs import Sample, TensorSpec

BATCH = "batch"
RANDOM_ROWS = 16


@dataclass
class Inputs:
    """The ONNX inputs, a sample for them, and how to rebuild what the estimator takes from feeds."""

    specs: list[TensorSpec]
    sample: Sample
    columns: list[tuple[str, Any]] | None = None  # (name, pandas dtype) when the estimator takes a DataFrame

    def initial_types(self) -> list[tuple[str, Any]]:
        """skl2onnx's ``initial_types``: every input with a free batch axis."""
        from skl2onnx.common.data_types import BooleanTensorType, FloatTensorType, Int64TensorType, StringTensorType

        kinds = {"float32": FloatTensorType, "int64": Int64TensorType, "bool": BooleanTensorType,
                 "str": StringTensorType}
        return [(s.name, kinds[s.dtype]([None, *s.shape[1:]])) for s in self.specs]

    def reference(self, feeds: Mapping[str, np.ndarray]) -> Any:
        """The array or DataFrame the estimator gets for ``feeds`` (floats widened, values unchanged)."""
        if self.columns is None:
            return _widen(feeds[self.specs[0].name])
        import pandas as pd

        data = {}
        for name, dtype in self.columns:
            col = np.asarray(feeds[name]).reshape(-1)
            data[name] = pd.Series(col.astype(object) if col.dtype.kind in "OUS" else _widen(col)).astype(dtype)
        return pd.DataFrame(data)


def _widen(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def onnx_dtype(values: np.ndarray, what: str) -> str:
    """The ONNX element type for an array's (or column's) values."""
    kind = values.dtype.kind
    if kind == "f":
        return "float32"
    if kind in "iu":
        return "int64"
    if kind == "b":
        return "bool"
    if kind in "US":
        return "str"
    if kind == "O" and all(isinstance(v, str) for v in values.ravel()):
        return "str"
    raise BadInputError(f"{what} holds {values.dtype} values that are not all strings; ONNX inputs are "
                        "float, integer, bool or string")


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "str":
        return np.asarray(values).astype(str).astype(object)
    return np.asarray(values).astype(dtype)


def from_array(x: Any, name: str, origin: str) -> Inputs:
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise BadInputError(f"sample X must be 2-D (n_samples, n_features), got shape {list(arr.shape)}")
    if arr.shape[0] == 0:
        raise BadInputError("sample X has no rows")
    dtype = onnx_dtype(arr, "sample X")
    feeds = {name: cast(arr, dtype)}
    return Inputs([TensorSpec(name, (BATCH, arr.shape[1]), dtype)], Sample(feeds, origin=origin))


def from_frame(df: Any, origin: str, names: Sequence[str] | None = None) -> Inputs:
    """One (batch, 1) input per column, named after it (ColumnTransformer matches columns by name)."""
    if names:
        raise BadInputError("a DataFrame's inputs are named after its columns; --input-name does not apply")
    if len(df) == 0:
        raise BadInputError("the sample DataFrame has no rows")
    specs, feeds, columns = [], {}, []
    for col in df.columns:
        if not isinstance(col, str):
            raise BadInputError(f"DataFrame column {col!r} needs a string name to become an ONNX input")
        series = df[col]
        values = series.astype(object).to_numpy() if series.dtype.kind not in "fiub" else series.to_numpy()
        dtype = onnx_dtype(values, f"column '{col}'")
        specs.append(TensorSpec(col, (BATCH, 1), dtype))
        feeds[col] = cast(values, dtype).reshape(-1, 1)
        columns.append((col, series.dtype))
    return Inputs(specs, Sample(feeds, origin=origin), columns)


def from_sample(sample: Any, estimator: Any, input_names: Sequence[str] | None) -> Inputs:
    """Inputs from what the user passed as sample X: an array, a DataFrame, or name -> array."""
    if type(sample).__name__ == "DataFrame" and type(sample).__module__.startswith("pandas"):
        return from_frame(sample, "sample DataFrame", input_names)
    if isinstance(sample, Mapping):
        names = getattr(estimator, "feature_names_in_", None)
        if len(sample) == 1 and names is None:
            (key, value), = sample.items()
            return from_array(value, input_names[0] if input_names else key, "sample inputs")
        import pandas as pd

        try:
            frame = pd.DataFrame({k: np.asarray(v).reshape(-1) for k, v in sample.items()})
        except ValueError as exc:
            raise BadInputError(f"sample columns do not fit together: {exc}") from None
        if names is not None:
            missing = [n for n in names if n not in frame.columns]
            if missing:
                raise BadInputError(f"sample inputs lack column(s) {', '.join(map(repr, missing))} "
                                    "the estimator was fit with")
            frame = frame[list(names)]
        return from_frame(frame, "sample inputs", input_names)
    return from_array(sample, input_names[0] if input_names else "X", "sample X")


def derived(estimator: Any, shapes: Sequence[TensorSpec], input_names: Sequence[str] | None,
            seed: int, what: str) -> Inputs:
    """Inputs for an estimator given without sample X: from n_features_in_ (or --input-shape), seeded
    random floats; a categorical column is filled from the categories its encoder was fit with."""
    n = getattr(estimator, "n_features_in_", None)
    names = getattr(estimator, "feature_names_in_", None)
    rng = np.random.default_rng(seed)
    if names is not None:
        if shapes:
            raise BadInputError(f"{what} was fit on a DataFrame (one input per column); --input-shape does "
                                "not apply: give sample inputs in Python, or --inputs for validation")
        import pandas as pd

        cats = categories(estimator)
        data = {}
        for i, col in enumerate(names):
            found = cats.get(i, cats.get(str(col)))
            data[str(col)] = (rng.choice(found, RANDOM_ROWS) if found is not None
                              else rng.standard_normal(RANDOM_ROWS).astype(np.float32))
        return from_frame(pd.DataFrame(data), f"random(seed={seed}), categories from the fitted encoders")
    if n is None and not shapes:
        raise BadInputError(f"{what} does not record its number of features (n_features_in_): pass sample X "
                            "in Python or --input-shape X:ROWS,FEATURES")
    if len(shapes) > 1:
        raise BadInputError(f"{what} takes one input X; got {len(shapes)} --input-shape values")
    name = input_names[0] if input_names else (shapes[0].name if shapes else "X")
    rows, features = RANDOM_ROWS, n
    dtype = "float32"
    if shapes:
        spec = shapes[0]
        if len(spec.shape) != 2:
            raise BadInputError(f"--input-shape {spec.name}: scikit-learn takes 2-D input (ROWS,FEATURES)")
        rows, features = spec.shape
        dtype = spec.dtype or dtype
        if n is not None and features != n:
            raise BadInputError(f"--input-shape {spec.name}: {what} takes {n} features, not {features}")
    cats = categories(estimator)
    if cats:
        raise BadInputError(f"{what} encodes categorical columns that random numbers cannot feed: pass sample X "
                            "in Python (onnxbridge.convert(model, X))")
    from onnxbridge.specs import random_array

    x = random_array((rows, features), dtype, rng)
    return from_array(x, name, f"random(seed={seed})")


def categories(estimator: Any) -> dict[int | str, np.ndarray]:
    """Input column (position or name) -> the categories the encoder reading it was fit with.

    Looks at the first step of a pipeline: an encoder, or a ColumnTransformer whose branches start
    (after imputers) with an encoder.
    """
    est = _first_step(estimator)
    if type(est).__name__ == "ColumnTransformer" and hasattr(est, "transformers_"):
        found: dict[int | str, np.ndarray] = {}
        names = list(getattr(est, "feature_names_in_", []))
        for _name, trans, columns in est.transformers_:
            enc = _encoder(trans)
            if enc is None:
                continue
            cols = [columns] if isinstance(columns, (str, int)) else list(np.asarray(columns).ravel())
            if cols and isinstance(cols[0], (bool, np.bool_)):
                cols = [i for i, keep in enumerate(cols) if keep]
            for k, col in enumerate(cols):
                if k < len(enc.categories_):
                    key = str(col) if isinstance(col, str) else (names[col] if names else int(col))
                    found[key] = _usable(enc.categories_[k])
        return found
    enc = _encoder(est)
    return {i: _usable(c) for i, c in enumerate(enc.categories_)} if enc is not None else {}


def _first_step(est: Any) -> Any:
    while hasattr(est, "steps"):
        est = est.steps[0][1]
    return est


def _encoder(est: Any) -> Any:
    """The fitted encoder a branch starts with (imputers skipped), or None."""
    while True:
        if hasattr(est, "steps"):
            for _, step in est.steps:
                if type(step).__name__ not in ("SimpleImputer", "MissingIndicator"):
                    est = step
                    break
            else:
                return None
            continue
        return est if hasattr(est, "categories_") else None


def _usable(cats: np.ndarray) -> np.ndarray:
    """Categories without missing-value markers (what random rows may be drawn from)."""
    values = [c for c in np.asarray(cats).tolist() if c is not None and not (isinstance(c, float) and np.isnan(c))]
    return np.asarray(values, dtype=object if values and isinstance(values[0], str) else None)
