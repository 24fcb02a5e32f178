"""Input signatures for TF sources: shapes fixed or opened by the user, NCHW layout, sample inputs."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxbridge.errors import BadInputError
from onnxbridge.specs import DynamicAxis, Sample, TensorSpec, as_arrays, check_names, random_sample


def choose_signature(available: Sequence[str], requested: str | None, where: str) -> str:
    """``requested``, else serving_default, else the only one; a missing name lists what there is."""
    if requested is None:
        requested = "serving_default" if "serving_default" in available or len(available) != 1 else available[0]
    if requested not in available:
        raise BadInputError(f"{where} has no signature '{requested}'; it has: {', '.join(sorted(available))} "
                            "(choose one with --signature)")
    return requested


def to_nchw(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (0, a.ndim - 1, *range(1, a.ndim - 1)))


def to_nhwc(a: np.ndarray) -> np.ndarray:
    return np.transpose(a, (0, *range(2, a.ndim), 1))


def nchw_spec(spec: TensorSpec) -> TensorSpec:
    s = spec.shape
    return TensorSpec(spec.name, (s[0], s[-1], *s[1:-1]), spec.dtype)


def nchw_dynamic(dynamic: Sequence[DynamicAxis], specs: Sequence[TensorSpec], nchw: Sequence[str]) -> list[DynamicAxis]:
    """``--dynamic`` axes (given in TF layout) as axes of the ONNX inputs."""
    ranks = {s.name: len(s.shape) for s in specs}
    out = []
    for d in dynamic:
        axis = d.axis % ranks[d.name]
        if d.name in nchw and axis:
            axis = 1 if axis == ranks[d.name] - 1 else axis + 1
        out.append(dataclasses.replace(d, axis=axis))
    return out


def check_nchw(names: Sequence[str], specs: Sequence[TensorSpec]) -> None:
    check_names("--inputs-as-nchw", names, [s.name for s in specs])
    for s in specs:
        if s.name in names and len(s.shape) < 3:
            raise BadInputError(f"--inputs-as-nchw {s.name}: the input has rank {len(s.shape)}; NCHW needs 3 or more")


def sample_for(specs: Sequence[TensorSpec], sample_inputs: Any, nchw: Sequence[str], seed: int) -> Sample:
    """The first validation sample in ONNX layout: the user's arrays (given in TF layout) or seeded random."""
    if sample_inputs is None:
        onnx_specs = [nchw_spec(s) if s.name in nchw else s for s in specs]
        return random_sample(onnx_specs, seed, fill=2)
    arrays = as_arrays(sample_inputs, [s.name for s in specs])
    feeds = {}
    for s in specs:
        a = arrays[s.name]
        if s.dtype and a.dtype != np.dtype(s.dtype):
            a = a.astype(s.dtype)
        feeds[s.name] = to_nchw(a) if s.name in nchw else a
    return Sample(feeds, origin="sample inputs")


def output_names(paths: Sequence[str], preferred: Sequence[str] | None = None) -> list[str]:
    """ONNX output names: ``preferred`` (e.g. Keras output names) when they fit, else the structure's
    paths (dict keys), else output / output_0, output_1, ...; made unique and safe."""
    if preferred and len(preferred) == len(paths):
        raw = list(preferred)
    elif len(paths) == 1 and not paths[0]:
        raw = ["output"]
    else:
        raw = [p if p and not p.isdigit() else f"output_{i}" for i, p in enumerate(paths)]
    out: list[str] = []
    for name in raw:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "output"
        while name in out:
            name += "_"
        out.append(name)
    return out
