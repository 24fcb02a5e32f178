"""Convert a few scikit-learn estimators and pipelines with the Python API and print what the reports say.

    python examples/convert_sklearn.py [OUT_DIR]

Each model is converted at opset 15, 17 and the default, written atomically, and validated against
scikit-learn: labels must be equal, probabilities and predicted values within 1e-4.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import onnxbridge


def models() -> dict:
    """name -> (fitted estimator, sample X)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 6))
    species = np.array(["setosa", "versicolor", "virginica"])[np.digitize(x[:, 0] + x[:, 1], [-0.7, 0.7])]
    df = pd.DataFrame({"income": rng.normal(50, 15, 200), "rooms": rng.integers(1, 6, 200),
                       "city": rng.choice(["lyon", "nice", "lille"], 200)})
    bought = ((df["income"] > 50) | (df["city"] == "nice")).astype(int)
    prep = ColumnTransformer([("num", StandardScaler(), ["income", "rooms"]), ("cat", OneHotEncoder(), ["city"])])
    return {
        "hist_gradient_boosting": (HistGradientBoostingClassifier(max_iter=20).fit(x, species), x),
        "random_forest_regressor": (RandomForestRegressor(n_estimators=20, max_depth=6).fit(x, x @ np.arange(6)), x),
        "scaler_logistic": (make_pipeline(StandardScaler(), LogisticRegression()).fit(x, species), x),
        "column_transformer": (make_pipeline(prep, LogisticRegression()).fit(df, bought), df),
    }


def main(out_dir: str = "out/examples") -> int:
    out = Path(out_dir)
    failed = 0
    for name, (model, sample) in models().items():
        for opset in (15, 17, None):
            path = out / f"{name}_opset{opset or 'default'}.onnx"
            result = onnxbridge.convert(model, sample, output=path, opset=opset, report=path.with_suffix(".json"))
            rep = result.report
            worst = max((o.get("max_abs", 0.0) for h in rep["hops"] for o in h["outputs"]), default=0.0)
            print(f"{name:24s} opset {rep['artifact']['opset']:>2}  {rep['status']:7s} max abs diff {worst:.2e}  "
                  f"{rep['timings']['total_s']:.2f}s  -> {path}")
            failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
