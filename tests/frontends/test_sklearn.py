"""scikit-learn frontend: estimators and pipelines converted with skl2onnx, run in onnxruntime, compared
with predict / predict_proba (labels exactly, probabilities and values within tolerance)."""
from __future__ import annotations

import hashlib
import json
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tests.helpers.extras import require

require("sklearn")
require("skl2onnx")

import onnx

import onnxbridge
from onnxbridge.errors import BadInputError, UnsupportedError
from tests.conftest import ROOT, assert_one_line_error, check_report
from tests.frontends.sklearn_models import BUILDERS, CLASSIFIERS, FEATURES, data, mixed_pipeline

OPSETS = (13, 15, 17, 21, None)
DEFAULT_OPSET = 22  # the newest opset skl2onnx 1.20 is tested at and onnx 1.17 knows
ML_FOR = {13: 2, 15: 2, 17: 3, 21: 5, None: 5}  # ai.onnx.ml paired with the main opset by onnx releases


@pytest.fixture(scope="module")
def built():
    """Every test model, fitted once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # SVC(probability=True) is deprecated in 1.9
        return {name: build() for name, build in BUILDERS.items()}


@pytest.fixture(scope="module")
def pickled(tmp_path_factory, built):
    """A pickled HistGradientBoostingClassifier and its sample, as .joblib, .pkl and .pickle files."""
    import joblib

    folder = tmp_path_factory.mktemp("sklearn_files")
    est, _ = built["hgb_clf"]
    paths = {".joblib": folder / "model.joblib", ".pkl": folder / "model.pkl", ".pickle": folder / "model.pickle"}
    joblib.dump(est, paths[".joblib"])
    for suffix in (".pkl", ".pickle"):
        paths[suffix].write_bytes(pickle.dumps(est))
    return paths


def _outputs(rep: dict) -> dict[str, dict]:
    return {o["name"]: o for o in rep["hops"][0]["outputs"]}


def _ml_opset(model: onnx.ModelProto) -> int | None:
    return next((i.version for i in model.opset_import if i.domain == "ai.onnx.ml"), None)


def assert_passed(rep: dict, opset: int | None, classifier: bool) -> None:
    check_report(rep)
    assert rep["status"] == "passed", json.dumps(rep["hops"], indent=1)[:3000]
    assert rep["artifact"]["opset"] == (opset or DEFAULT_OPSET)
    assert rep["hops"][0]["samples"] == 2  # the sample, and the batch grown by one
    outs = _outputs(rep)
    if classifier:
        assert list(outs) == ["label", "probabilities"]
        assert outs["label"]["kind"] == "exact" and outs["label"]["mismatch_fraction"] == 0.0
        assert outs["probabilities"]["kind"] == "numeric" and outs["probabilities"]["max_abs"] <= 1e-4
    else:
        assert list(outs) == ["variable"] and outs["variable"]["max_abs"] <= 1e-4


# Python API ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", OPSETS, ids=lambda o: f"opset{o or 'default'}")
@pytest.mark.parametrize("name", list(BUILDERS))
def test_estimator_converts_and_matches(built, name, opset, tmp_path):
    est, x = built[name]
    out = tmp_path / "model.onnx"
    result = onnxbridge.convert(est, x, opset=opset, output=out)
    assert_passed(result.report, opset, name in CLASSIFIERS)
    model = onnx.load(str(out))
    assert "ZipMap" not in {n.op_type for n in model.graph.node}  # plain tensors, not a list of maps
    ml = _ml_opset(model)
    if any(n.op_type.startswith("TreeEnsemble") for n in model.graph.node):
        assert ml == min(ML_FOR[opset], 4)  # TreeEnsemble{Classifier,Regressor} are deprecated in ai.onnx.ml 5
    elif ml is not None:
        assert ml == ML_FOR[opset]
    assert [d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim[:1]] == \
        ["batch"] * len(model.graph.input)


def test_hist_gradient_boosting_beats_plain_skl2onnx(built, tmp_path):
    """skl2onnx 1.20 writes HistGradientBoosting's nodes_missing_value_tracks_true as Python bools mixed
    with uint8; protobuf >= 5 refuses bools in an int list, so plain skl2onnx fails (at every opset)."""
    from skl2onnx import to_onnx

    est, x = built["hgb_clf"]
    with pytest.raises(Exception) as info:
        to_onnx(est, x[:1].astype(np.float32), target_opset=17, options={"zipmap": False})
    assert "got a boolean" in str(info.value.__cause__ or info.value)
    xn = x.copy()
    xn[::5, 1] = np.nan  # missing values take the learned branch in both
    result = onnxbridge.convert(est, xn, opset=17, output=tmp_path / "hgb.onnx")
    assert_passed(result.report, 17, classifier=True)


def test_labels_keep_sklearn_dtypes(built):
    by_name = {}
    for name in ("logreg_int", "logreg_str"):
        est, x = built[name]
        by_name[name] = onnxbridge.convert(est, x, opset=17).model
    label = {n: m.graph.output[0].type.tensor_type.elem_type for n, m in by_name.items()}
    assert label == {"logreg_int": onnx.TensorProto.INT64, "logreg_str": onnx.TensorProto.STRING}


def test_float64_input_is_compared_on_float32_values(built):
    """ONNX takes float32: the sample is rounded once and sklearn is given exactly those values."""
    from onnxbridge.frontends.sklearn import load

    est, x = built["knn_clf"]
    src = load(est, sample_inputs=x)
    assert src.input_specs[0].dtype == "float32" and src.input_specs[0].shape == ("batch", FEATURES)
    fed = src.sample.feeds["X"]
    assert fed.dtype == np.float32
    np.testing.assert_array_equal(src.run(src.sample.feeds)[0], est.predict(fed.astype(np.float64)))


def test_dataframe_gives_one_typed_input_per_column(built):
    est, df = built["mixed_pipeline"]
    result = onnxbridge.convert(est, df, opset=15)
    assert_passed(result.report, 15, classifier=True)
    inputs = {i.name: i.type.tensor_type.elem_type for i in result.model.graph.input}
    assert inputs == {"height": onnx.TensorProto.FLOAT, "age": onnx.TensorProto.INT64,
                      "city": onnx.TensorProto.STRING, "plan": onnx.TensorProto.STRING}


def test_column_mapping_and_output_names(built):
    est, df = built["mixed_pipeline"]
    columns = {c: df[c].to_numpy() for c in df.columns}
    result = onnxbridge.convert(est, columns, opset=17, output_names=["cls", "proba"])
    assert result.report["status"] == "passed"
    assert [o.name for o in result.model.graph.output] == ["cls", "proba"]


def test_input_name(built):
    est, x = built["scaler_logreg"]
    result = onnxbridge.convert(est, x, opset=17, input_names=["features"])
    assert result.report["status"] == "passed"
    assert [i.name for i in result.model.graph.input] == ["features"]


def test_lightgbm_through_onnxmltools():
    lightgbm = require("lightgbm")
    require("onnxmltools")
    x, _, names, _ = data()
    est = lightgbm.LGBMClassifier(n_estimators=10, verbose=-1).fit(x, names)
    assert_passed(onnxbridge.convert(est, x, opset=17).report, 17, classifier=True)


def test_estimator_is_left_unchanged(built):
    est, x = built["rf_clf"]
    before = pickle.dumps(est)
    onnxbridge.convert(est, x, opset=17)
    assert pickle.dumps(est) == before


def test_unfitted_and_bad_samples_are_refused(built):
    from sklearn.linear_model import LogisticRegression

    est, x = built["logreg_int"]
    with pytest.raises(BadInputError, match="not fitted"):
        onnxbridge.convert(LogisticRegression(), x)
    with pytest.raises(BadInputError, match="2-D"):
        onnxbridge.convert(est, x[:, 0])
    with pytest.raises(BadInputError, match="fails on its sample"):
        onnxbridge.convert(est, x[:, :2])
    with pytest.raises(BadInputError, match="batch axis"):
        onnxbridge.convert(est, x, dynamic=["X:1"])


def test_booster_without_onnxmltools_names_the_package(built):
    try:
        import onnxmltools  # noqa: F401
        pytest.skip("onnxmltools is installed")
    except ImportError:
        pass
    from sklearn.linear_model import LogisticRegression

    lgbm = type("LGBMClassifier", (LogisticRegression,), {"__module__": "lightgbm.sklearn"})
    x, y, _, _ = data()
    with pytest.raises(UnsupportedError, match="onnxmltools") as info:
        onnxbridge.convert(lgbm().fit(x, y), x)
    assert "pip install onnxmltools" in info.value.one_line()


# CLI ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".joblib", ".pkl", ".pickle"])
def test_pickle_needs_trust(cli, pickled, suffix, tmp_path):
    path = pickled[suffix]
    digest, mtime = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    result = cli("convert", path, "-o", tmp_path / "m.onnx", "--opset", "17")
    assert_one_line_error(result, 2, "pickle", "arbitrary code", "--trust")
    assert not (tmp_path / "m.onnx").exists()
    report = tmp_path / "r.json"
    result = cli("convert", path, "-o", tmp_path / "m.onnx", "--opset", "17", "--trust", "--report", report)
    assert result.exit_code == 0, result.output
    assert_passed(check_report(report), 17, classifier=True)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest and path.stat().st_mtime_ns == mtime


def test_cli_validate_against_converted(cli, pickled, tmp_path):
    out, report = tmp_path / "m.onnx", tmp_path / "r.json"
    assert cli("convert", pickled[".joblib"], "-o", out, "--trust", "--opset", "17").exit_code == 0
    result = cli("validate", pickled[".joblib"], out, "--trust", "--report", report)
    assert result.exit_code == 0, result.output
    rep = check_report(report)
    assert rep["status"] == "passed" and _outputs(rep)["label"]["mismatch_fraction"] == 0.0


@pytest.mark.parametrize("opset", OPSETS, ids=lambda o: f"opset{o or 'default'}")
def test_cli_opsets_from_joblib(cli, pickled, opset, tmp_path):
    report = tmp_path / "r.json"
    args = ["--opset", str(opset)] if opset else []
    result = cli("convert", pickled[".joblib"], "-o", tmp_path / "m.onnx", "--trust", "--report", report, *args)
    assert result.exit_code == 0, result.output
    rep = check_report(report)
    assert_passed(rep, opset, classifier=True)
    assert rep["inputs"]["origin"].startswith("random(seed=0)")  # from n_features_in_
    assert rep["source"]["inputs"] == [{"name": "X", "shape": ["batch", FEATURES], "dtype": "float32"}]


def test_cli_input_shape_and_npz_inputs(cli, pickled, built, tmp_path):
    report = tmp_path / "r.json"
    result = cli("convert", pickled[".pkl"], "-o", tmp_path / "m.onnx", "--trust", "--opset", "15",
                 "--input-shape", f"X:7,{FEATURES}", "--report", report)
    assert result.exit_code == 0, result.output
    assert check_report(report)["inputs"]["samples"][0] == {"X": [7, FEATURES]}
    _, x = built["hgb_clf"]
    np.savez(tmp_path / "x.npz", X=x[:9].astype(np.float32))
    result = cli("convert", pickled[".pkl"], "-o", tmp_path / "m.onnx", "--trust", "--inputs", tmp_path / "x.npz",
                 "--report", report)
    assert result.exit_code == 0, result.output
    assert check_report(report)["status"] == "passed"
    result = cli("convert", pickled[".pkl"], "-o", tmp_path / "m.onnx", "--trust", "--input-shape", "X:7,3")
    assert_one_line_error(result, 2, "takes 5 features")


def test_cli_dataframe_pipeline_from_file(cli, tmp_path):
    """A pipeline fit on a DataFrame: one input per column; string columns sampled from its categories."""
    import joblib

    est, _ = mixed_pipeline()
    path = tmp_path / "pipe.joblib"
    joblib.dump(est, path)
    report = tmp_path / "r.json"
    result = cli("convert", path, "-o", tmp_path / "m.onnx", "--trust", "--opset", "17", "--report", report)
    assert result.exit_code == 0, result.output
    rep = check_report(report)
    assert_passed(rep, 17, classifier=True)
    assert {i["name"]: i["dtype"] for i in rep["source"]["inputs"]} == {
        "height": "float32", "age": "float32", "city": "str", "plan": "str"}


def test_cli_trusted_pickle_of_something_else(cli, tmp_path):
    path = tmp_path / "weights.pkl"
    path.write_bytes(pickle.dumps({"coef": [1.0, 2.0]}))
    result = cli("convert", path, "-o", tmp_path / "m.onnx", "--trust")
    assert_one_line_error(result, 2, "builtins.dict", "not a scikit-learn estimator")


def test_cli_skops_without_skops(cli, tmp_path):
    try:
        import skops  # noqa: F401
        pytest.skip("skops is installed")
    except ImportError:
        pass
    path = tmp_path / "model.skops"
    path.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    result = cli("convert", path, "-o", tmp_path / "m.onnx")
    assert_one_line_error(result, 3, "skops", "pip install skops")


def test_doctor_lists_sklearn(cli):
    result = cli("doctor", "--json")
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.stdout)["plugins"] if r["kind"] == "frontend" and r["name"] == "sklearn")
    assert row["available"] is True
    assert row["versions"]["scikit-learn"] and row["versions"]["skl2onnx"]


def test_frontend_module_does_not_import_sklearn():
    code = ("import sys, onnxbridge.frontends.sklearn as f; from pathlib import Path; "
            "assert f.accepts(Path('m.joblib')) and not f.accepts(Path('m.onnx')); "
            "assert 'sklearn' not in sys.modules and 'skl2onnx' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
