"""Gradient-boosting estimators (XGBoost, LightGBM, CatBoost) inside skl2onnx, and the float32 threshold effect.

skl2onnx converts them through converters registered on demand: onnxmltools' for XGBoost and LightGBM, and for
CatBoost a converter that embeds the tree node CatBoost's own ONNX exporter writes (``save_model(format="onnx")``),
so a CatBoost model converts bare and inside a Pipeline alike.

ONNX TreeEnsemble compares features with thresholds in float32. The source compares in float64 (LightGBM,
scikit-learn trees' thresholds) or in float32 after float64 preprocessing (XGBoost, CatBoost in a Pipeline), so a
feature within float32 rounding of a threshold can take the other branch in ONNX and change a label.
``threshold_note`` measures that on the sample rows and says so in the report.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from onnxbridge.errors import UnsupportedError

PACKAGES = ("lightgbm", "xgboost", "catboost")
_NEEDS = {"lightgbm": "onnxmltools", "xgboost": "onnxmltools", "catboost": "catboost"}
_registered: set[str] = set()


def packages(estimator: Any) -> set[str]:
    """Which of LightGBM / XGBoost / CatBoost the estimator (or any step inside it) comes from."""
    found = set()
    parts = [estimator]
    if hasattr(estimator, "get_params") and type(estimator).__module__.split(".")[0] != "catboost":
        parts += list(estimator.get_params(deep=True).values())
    for part in parts:
        root = type(part).__module__.split(".")[0]
        if root in PACKAGES:
            found.add(root)
    return found


def register(estimator: Any) -> None:
    """Make skl2onnx know the boosting estimators used in ``estimator`` (XGBoost, LightGBM need onnxmltools)."""
    for package in sorted(packages(estimator) - _registered):
        needs = _NEEDS[package]
        try:
            __import__(needs)
        except ImportError:
            raise UnsupportedError(f"converting {package} estimators needs {needs}, which is not installed",
                                   hint=f"pip install {needs}") from None
        _REGISTER[package]()
        _registered.add(package)


def parse_booster(scope: Any, model: Any, inputs: list, custom_parsers: Any = None) -> list:
    """skl2onnx parser for a booster: one feature matrix, so the columns of a DataFrame (one ONNX input each) are
    concatenated first, as scikit-learn's own converters do; onnxmltools' converters take a single input."""
    from skl2onnx._parse import _parse_sklearn_simple_model
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    if len(inputs) > 1:
        text = [i.onnx_name for i in inputs if isinstance(i.type, StringTensorType)]
        if text:
            raise UnsupportedError(f"{type(model).__name__} takes numeric features; the inputs {', '.join(text)} "
                                   "hold text", hint="encode text columns in a pipeline step before the booster")
        widths = [i.type.shape[1] if len(i.type.shape) > 1 else 1 for i in inputs]
        concat = scope.declare_local_operator("SklearnConcat")
        concat.inputs = list(inputs)
        width = sum(widths) if all(isinstance(w, int) for w in widths) else None
        features = scope.declare_local_variable("features", FloatTensorType([None, width]))
        concat.outputs.append(features)
        inputs = [features]
    return _parse_sklearn_simple_model(scope, model, inputs, custom_parsers=custom_parsers)


def _classifier_options() -> dict:
    return {"nocl": [True, False], "zipmap": [True, False, "columns"]}


def _lightgbm() -> None:
    from lightgbm import LGBMClassifier, LGBMRegressor
    from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (calculate_linear_classifier_output_shapes,
                                                  calculate_linear_regressor_output_shapes)

    update_registered_converter(LGBMClassifier, "LightGbmLGBMClassifier", calculate_linear_classifier_output_shapes,
                                convert_lightgbm, options=_classifier_options(), parser=parse_booster)
    update_registered_converter(LGBMRegressor, "LightGbmLGBMRegressor", calculate_linear_regressor_output_shapes,
                                convert_lightgbm, options={"split": None}, parser=parse_booster)


def convert_xgboost(scope: Any, operator: Any, container: Any) -> None:
    """onnxmltools' XGBoost converter, given a copy without feature names where the model was fitted on a
    DataFrame (it reads only 'f<i>' names); the user's model stays untouched."""
    import copy

    from onnxmltools.convert.xgboost.operator_converters.XGBoost import convert_xgboost as convert

    est = operator.raw_operator
    if est.get_booster().feature_names:
        unnamed = copy.deepcopy(est)
        unnamed.get_booster().feature_names = None
        operator.raw_operator = unnamed
    try:
        convert(scope, operator, container)
    finally:
        operator.raw_operator = est


def _xgboost() -> None:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (calculate_linear_classifier_output_shapes,
                                                  calculate_linear_regressor_output_shapes)
    from xgboost import XGBClassifier, XGBRegressor

    update_registered_converter(XGBClassifier, "XGBoostXGBClassifier", calculate_linear_classifier_output_shapes,
                                convert_xgboost, options=_classifier_options(), parser=parse_booster)
    update_registered_converter(XGBRegressor, "XGBoostXGBRegressor", calculate_linear_regressor_output_shapes,
                                convert_xgboost, parser=parse_booster)


def _catboost() -> None:
    from catboost import CatBoostClassifier, CatBoostRegressor
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (calculate_linear_classifier_output_shapes,
                                                  calculate_linear_regressor_output_shapes)

    from skl2onnx._supported_operators import sklearn_classifier_list

    if CatBoostClassifier not in sklearn_classifier_list:  # no ClassifierMixin: tell skl2onnx it gives labels too
        sklearn_classifier_list.append(CatBoostClassifier)
    update_registered_converter(CatBoostClassifier, "CatBoostCatBoostClassifier",
                                calculate_linear_classifier_output_shapes, convert_catboost,
                                options=_classifier_options(), parser=parse_booster)
    update_registered_converter(CatBoostRegressor, "CatBoostCatBoostRegressor",
                                calculate_linear_regressor_output_shapes, convert_catboost, parser=parse_booster)


def convert_catboost(scope: Any, operator: Any, container: Any) -> None:
    """skl2onnx converter: the TreeEnsemble node CatBoost's own ONNX exporter writes, wired to the operator's
    input and outputs (its ZipMap left out: labels and probabilities come out as tensors, as for the other
    boosters)."""
    from catboost.utils import convert_to_onnx_object
    from onnx.helper import get_attribute_value

    est = operator.raw_operator
    try:
        onx = convert_to_onnx_object(est)
    except Exception as exc:  # e.g. categorical or text features, which CatBoost's ONNX export refuses
        raise UnsupportedError(f"CatBoost cannot export this {type(est).__name__} to ONNX: "
                               f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}",
                               hint="CatBoost's ONNX export takes numeric features only") from None
    trees = [n for n in onx.graph.node if n.op_type.startswith("TreeEnsemble")]
    if len(trees) != 1 or onx.graph.initializer:
        raise UnsupportedError(f"CatBoost wrote an ONNX graph of {[n.op_type for n in onx.graph.node]}; only a "
                               "single TreeEnsemble node can be embedded")
    node = trees[0]
    versions = {d.domain: d.version for d in onx.opset_import}
    outputs = [o.full_name for o in operator.outputs][:len(node.output)]
    container.add_node(node.op_type, [operator.inputs[0].full_name], outputs, op_domain=node.domain,
                       op_version=versions.get(node.domain), name=scope.get_unique_operator_name(node.op_type),
                       **{a.name: get_attribute_value(a) for a in node.attribute})


_REGISTER = {"lightgbm": _lightgbm, "xgboost": _xgboost, "catboost": _catboost}


# The float64-vs-float32 threshold effect ---------------------------------------------------------------------
ULPS = 2  # margin on the float32 error of preprocessing when estimated by running it on float32 data


def split_thresholds(est: Any) -> dict[int, np.ndarray] | None:
    """feature index -> the thresholds the tree model ``est`` splits that feature at, as the source stores them
    (float64 where it keeps float64); None where ``est`` is not a tree model this knows."""
    root = type(est).__module__.split(".")[0]
    pairs: list[tuple[int, float]] = []
    try:
        if root == "lightgbm":
            stack = [t["tree_structure"] for t in est.booster_.dump_model()["tree_info"]]
            while stack:
                node = stack.pop()
                if "split_feature" in node:
                    if node.get("decision_type", "<=") in ("<=", "<"):
                        pairs.append((int(node["split_feature"]), float(node["threshold"])))
                    stack += [node["left_child"], node["right_child"]]
        elif root == "xgboost":
            booster = est.get_booster()
            names = {n: i for i, n in enumerate(booster.feature_names or [])}
            frame = booster.trees_to_dataframe()
            frame = frame[frame["Feature"] != "Leaf"]
            for feature, split in zip(frame["Feature"], frame["Split"]):
                index = names.get(feature, int(feature[1:]) if str(feature)[1:].isdigit() else None)
                if index is not None and np.isfinite(split):
                    pairs.append((index, float(np.float32(split))))  # float32 inside XGBoost, dumped as text
        elif root == "catboost":  # borders are float32 inside CatBoost
            pairs = [(int(f), float(np.float32(b))) for f, borders in est.get_borders().items() for b in borders]
        else:
            for tree in _sklearn_trees(est):
                keep = tree.feature >= 0
                pairs += zip(tree.feature[keep].tolist(), tree.threshold[keep].tolist())
    except Exception:  # noqa: BLE001 - an account of the model's splits is a bonus, never a failure
        return None
    if not pairs:
        return None
    out: dict[int, list[float]] = {}
    for f, t in pairs:
        out.setdefault(f, []).append(t)
    return {f: np.unique(np.asarray(ts, dtype=np.float64)) for f, ts in out.items()}


def _sklearn_trees(est: Any) -> list[Any]:
    if hasattr(est, "tree_"):
        return [est.tree_]
    found = []
    parts = getattr(est, "estimators_", None)
    if parts is None:
        return []
    for part in (np.ravel(parts) if isinstance(parts, np.ndarray) else parts):
        if hasattr(part, "tree_"):
            found.append(part.tree_)
    return found


def near_threshold(z: np.ndarray, error: np.ndarray, thresholds: dict[int, np.ndarray]) -> np.ndarray:
    """Rows of ``z`` (the features the trees see) within float32 rounding of a threshold on one of them: no
    farther from the nearest threshold ``t`` than ``|t - float32(t)|`` (what storing it in float32 moves it) plus
    ``error`` (what computing the feature in float32 moves it). A row exactly on a threshold that
    float32 holds exactly is not near: both sides compare it alike."""
    near = np.zeros(len(z), dtype=bool)
    for f, t in thresholds.items():
        if f >= z.shape[1]:
            continue
        col = z[:, f]
        i = np.clip(np.searchsorted(t, col), 1, max(len(t) - 1, 1))
        lo, hi = t[np.minimum(i - 1, len(t) - 1)], t[np.minimum(i, len(t) - 1)]
        nearest = np.where(np.abs(col - lo) <= np.abs(col - hi), lo, hi)
        bound = np.abs(nearest - nearest.astype(np.float32).astype(np.float64)) + error[:, f]
        near |= (bound > 0) & (np.abs(col - nearest) <= bound)
    return near


def _tree_inputs(estimator: Any, x: Any) -> tuple[Any, np.ndarray, np.ndarray] | None:
    """(final tree model, the features it sees for ``x`` as the source computes them, how far computing them in
    float32 moves them); None where there is no preprocessing to run or it fails."""
    final, z, error = estimator, x, None
    if hasattr(estimator, "steps") and len(estimator.steps) > 1:
        final, pre = estimator.steps[-1][1], estimator[:-1]
        try:
            z = pre.transform(x)
        except Exception:  # noqa: BLE001
            return None
        try:
            x32 = x.astype(np.float32) if hasattr(x, "astype") else x
            z32 = np.asarray(pre.transform(x32), dtype=np.float64)
            error = np.abs(np.asarray(z, dtype=np.float64) - z32)
        except Exception:  # noqa: BLE001
            error = None
    elif hasattr(estimator, "steps"):
        final = estimator.steps[-1][1]
    z = np.asarray(z.toarray() if hasattr(z, "toarray") else z, dtype=np.float64)
    if z.ndim != 2:
        return None
    if error is None or error.shape != z.shape:
        error = np.zeros_like(z)
    return final, z, np.nan_to_num(error)


def differing_rows(reference: list[np.ndarray], got: list[np.ndarray], atol: float,
                   rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows whose label differs, rows where any ONNX output differs from the source's: a label, or a value
    beyond atol + rtol*|ref|)."""
    n = len(reference[0])
    labels, any_ = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for r, g in zip(reference, got):
        r, g = np.asarray(r).reshape(n, -1), np.asarray(g).reshape(n, -1)
        if r.shape != g.shape:
            continue
        if r.dtype.kind in "fc" and g.dtype.kind in "fc":
            any_ |= np.any(np.abs(r - g) > atol + rtol * np.abs(r), axis=1)
        else:
            labels |= np.any(r.astype(str) != g.astype(str), axis=1)
    return labels, any_ | labels


def threshold_note(estimator: Any, x: Any, reference: list[np.ndarray], got: list[np.ndarray] | None,
                   atol: float, rtol: float, onnx_features: np.ndarray | None = None) -> str | None:
    """What the float32 threshold effect does on the sample rows ``x``: how many rows differ between the source
    (``reference``) and ONNX (``got``), and how many of them sit within float32 rounding of a split threshold.
    ``onnx_features``: the features ONNX's TreeEnsemble got for ``x``; how far they are from the source's is the
    float32 error of the preprocessing (without them it is estimated by running it on float32 data, ``ULPS``
    times). None for models without tree splits, or when no row is near a threshold and none differs."""
    found = _tree_inputs(estimator, x)
    if found is None:
        return None
    final, z, error = found
    error = ULPS * error
    if onnx_features is not None and np.shape(onnx_features) == z.shape:
        error = np.nan_to_num(np.abs(np.asarray(onnx_features, dtype=np.float64) - z))
    thresholds = split_thresholds(final)
    if thresholds is None:
        return None
    near = near_threshold(z, error, thresholds)
    n = len(z)
    labels = differ = np.zeros(n, dtype=bool)
    if got is not None and len(reference[0]) == n:
        labels, differ = differing_rows(reference, got, atol, rtol)
    what = type(final).__name__
    if differ.any():
        both = int((differ & near).sum())
        note = (f"float32 thresholds: {int(differ.sum())} of {n} sample rows differ between {what} and ONNX "
                f"({int(labels.sum())} in their label); {both} of them have a feature within float32 rounding of a split threshold "
                f"({int(near.sum())} rows in all do). ONNX TreeEnsemble compares features with thresholds in "
                f"float32 while {what} compares in {_source_precision(final, estimator)}, so such a row can take "
                "the other branch: the float64-vs-float32 threshold effect, not a conversion error")
        if both < differ.sum():
            note += f"; {int(differ.sum()) - both} differing row(s) are not near a threshold: look there first"
        return note
    if near.any():
        return (f"float32 thresholds: {int(near.sum())} of {n} sample rows have a feature within float32 rounding "
                f"of a split threshold of {what}; they agree here, but ONNX TreeEnsemble compares in float32, so "
                "rows like them can take the other branch (and change a label) on other data")
    return None


def _source_precision(final: Any, estimator: Any) -> str:
    root = type(final).__module__.split(".")[0]
    pre = " after float64 preprocessing" if hasattr(estimator, "steps") and len(estimator.steps) > 1 else ""
    if root in ("xgboost", "catboost"):
        return f"float32{pre}"
    return "float64 (float32 features, float64 thresholds)" if not pre else f"float64{pre}"
