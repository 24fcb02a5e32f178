"""Small fitted scikit-learn models for the sklearn frontend tests: builder name -> (estimator, sample X)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ROWS, FEATURES = 120, 5


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """float64 X, binary int labels, 3-class string labels, a regression target."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, FEATURES))
    binary = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32)
    names = np.array(["bird", "cat", "dog"])[np.digitize(x[:, 2] - x[:, 3], [-0.6, 0.6])]
    target = x @ rng.standard_normal(FEATURES) + 0.1 * rng.standard_normal(ROWS)
    return x, binary, names, target


def frame(seed: int = 0):
    """A mixed-type DataFrame (float, int, two string columns) and binary labels."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "height": rng.normal(170, 10, ROWS),
        "age": rng.integers(18, 80, ROWS),
        "city": rng.choice(["paris", "rome", "oslo"], ROWS),
        "plan": rng.choice(["free", "pro"], ROWS),
    })
    y = ((df["height"] > 170) ^ (df["city"] == "rome")).astype(int).to_numpy()
    return df, y


def mixed_pipeline():
    """ColumnTransformer(StandardScaler on numbers, OneHotEncoder on strings) + LogisticRegression, on a DataFrame."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    df, y = frame()
    pre = ColumnTransformer([("num", StandardScaler(), ["height", "age"]),
                             ("cat", OneHotEncoder(handle_unknown="ignore"), ["city", "plan"])])
    return Pipeline([("pre", pre), ("clf", LogisticRegression())]).fit(df, y), df


def _fit(make: Callable[[], Any], target: str) -> Callable[[], tuple[Any, np.ndarray]]:
    def build():
        x, binary, names, reg = data()
        y = {"binary": binary, "names": names, "reg": reg}[target]
        return make().fit(x, y), x
    return build


def _builders() -> dict[str, Callable[[], tuple[Any, Any]]]:
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,
                                  HistGradientBoostingClassifier, HistGradientBoostingRegressor,
                                  RandomForestClassifier, RandomForestRegressor)
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    return {
        "logreg_int": _fit(lambda: LogisticRegression(), "binary"),
        "logreg_str": _fit(lambda: LogisticRegression(), "names"),
        "svc_proba": _fit(lambda: SVC(probability=True, random_state=0), "names"),
        "rf_clf": _fit(lambda: RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0), "binary"),
        "rf_reg": _fit(lambda: RandomForestRegressor(n_estimators=8, max_depth=5, random_state=0), "reg"),
        "gb_clf": _fit(lambda: GradientBoostingClassifier(n_estimators=10, random_state=0), "names"),
        "gb_reg": _fit(lambda: GradientBoostingRegressor(n_estimators=10, random_state=0), "reg"),
        "hgb_clf": _fit(lambda: HistGradientBoostingClassifier(max_iter=10, random_state=0), "binary"),
        "hgb_clf_str": _fit(lambda: HistGradientBoostingClassifier(max_iter=10, random_state=0), "names"),
        "hgb_reg": _fit(lambda: HistGradientBoostingRegressor(max_iter=10, random_state=0), "reg"),
        "knn_clf": _fit(lambda: KNeighborsClassifier(n_neighbors=3), "names"),
        "knn_reg": _fit(lambda: KNeighborsRegressor(n_neighbors=3), "reg"),
        "scaler_logreg": _fit(lambda: make_pipeline(StandardScaler(), LogisticRegression()), "names"),
        "mixed_pipeline": mixed_pipeline,
    }


BUILDERS = _builders()
CLASSIFIERS = {k for k in BUILDERS if not k.endswith("_reg")}
