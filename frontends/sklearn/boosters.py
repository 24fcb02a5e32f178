"""LightGBM and XGBoost estimators: skl2onnx converts them with onnxmltools' converters, registered on demand."""
from __future__ import annotations

from typing import Any

from onnxbridge.errors import UnsupportedError

PACKAGES = ("lightgbm", "xgboost")
_registered: set[str] = set()


def packages(estimator: Any) -> set[str]:
    """Which of LightGBM / XGBoost the estimator (or any step inside it) comes from."""
    found = set()
    parts = [estimator]
    if hasattr(estimator, "get_params"):
        parts += list(estimator.get_params(deep=True).values())
    for part in parts:
        root = type(part).__module__.split(".")[0]
        if root in PACKAGES:
            found.add(root)
    return found


def register(estimator: Any) -> None:
    """Make skl2onnx know the LightGBM / XGBoost estimators used in ``estimator`` (needs onnxmltools)."""
    for package in sorted(packages(estimator) - _registered):
        try:
            import onnxmltools  # noqa: F401
        except ImportError:
            raise UnsupportedError(f"converting {package} estimators needs onnxmltools, which is not installed",
                                   hint="pip install onnxmltools") from None
        _REGISTER[package]()
        _registered.add(package)


def _classifier_options() -> dict:
    return {"nocl": [True, False], "zipmap": [True, False, "columns"]}


def _lightgbm() -> None:
    from lightgbm import LGBMClassifier, LGBMRegressor
    from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (calculate_linear_classifier_output_shapes,
                                                  calculate_linear_regressor_output_shapes)

    update_registered_converter(LGBMClassifier, "LightGbmLGBMClassifier", calculate_linear_classifier_output_shapes,
                                convert_lightgbm, options=_classifier_options())
    update_registered_converter(LGBMRegressor, "LightGbmLGBMRegressor", calculate_linear_regressor_output_shapes,
                                convert_lightgbm, options={"split": None})


def _xgboost() -> None:
    from onnxmltools.convert.xgboost.operator_converters.XGBoost import convert_xgboost
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (calculate_linear_classifier_output_shapes,
                                                  calculate_linear_regressor_output_shapes)
    from xgboost import XGBClassifier, XGBRegressor

    update_registered_converter(XGBClassifier, "XGBoostXGBClassifier", calculate_linear_classifier_output_shapes,
                                convert_xgboost, options=_classifier_options())
    update_registered_converter(XGBRegressor, "XGBoostXGBRegressor", calculate_linear_regressor_output_shapes,
                                convert_xgboost)


_REGISTER = {"lightgbm": _lightgbm, "xgboost": _xgboost}
