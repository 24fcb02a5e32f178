"""scikit-learn frontend: live estimators and pipelines (with sample X), ``.skops`` files, and pickles
(``.joblib``, ``.pkl``, ``.pickle``) only with trust. Converted with skl2onnx (LightGBM and XGBoost
through onnxmltools' converters)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnxbridge.frontends.sklearn.files import ESTIMATOR_PACKAGES, SUFFIXES
from onnxbridge.registry import Plugin
from onnxbridge.specs import DynamicAxis, TensorSpec

PLUGIN = Plugin("sklearn", "onnxbridge.frontends.sklearn", requires=("scikit-learn", "skl2onnx"), extra="sklearn",
                priority=40,
                description="scikit-learn estimators and pipelines; .joblib/.pkl with --trust, .skops")

NAME = "sklearn"


def accepts(source: Any) -> bool:
    if isinstance(source, (str, Path)):
        return Path(source).suffix.lower() in SUFFIXES
    return any(c.__module__.split(".")[0] in ESTIMATOR_PACKAGES for c in type(source).__mro__)


def load(source: Any, *, sample_inputs: Any = None, input_shapes: Sequence[TensorSpec] = (),
         dynamic: Sequence[DynamicAxis] = (), input_names: Sequence[str] | None = None,
         trust: bool = False, seed: int = 0):
    from onnxbridge.frontends.sklearn.model import SklearnModel

    return SklearnModel.create(source, sample_inputs=sample_inputs, input_shapes=input_shapes, dynamic=dynamic,
                               input_names=input_names, trust=trust, seed=seed)
