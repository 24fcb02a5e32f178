"""Calibration data for int8 backends: the user's arrays split into feeds, and a reader for onnxruntime's quantizer."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from onnxbridge.errors import BadInputError, listing

if TYPE_CHECKING:
    import numpy as np


def batches(calibration: Mapping[str, "np.ndarray"], inputs: Mapping[str, Sequence[int | None]]) \
        -> list[dict[str, "np.ndarray"]]:
    """Feeds from ``--calibration`` arrays, one per input name (``inputs``: name -> dims, None where dynamic).

    An array one rank above its input holds one batch per index of axis 0; an array of the input's rank is one
    batch, or several when the input fixes axis 0 and the array's axis 0 is a multiple of it. Every batch must fit
    the input's fixed dims, and every input must give the same number of batches."""
    import numpy as np

    missing = [n for n in inputs if n not in calibration]
    if missing:
        raise BadInputError(f"--calibration has no array for input(s) {listing(missing)} (it holds "
                            f"{listing(calibration)})", hint="name the arrays after the model's inputs")
    per_input = {}
    for name, dims in inputs.items():
        dims = list(dims)
        arr = np.asarray(calibration[name])
        first = dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else None
        if arr.ndim == len(dims) + 1:
            items = list(arr)
        elif arr.ndim == len(dims) and first and arr.shape[0] != first and arr.shape[0] % first == 0:
            items = [arr[i:i + first] for i in range(0, arr.shape[0], first)]
        elif arr.ndim == len(dims):
            items = [arr]
        else:
            raise BadInputError(f"--calibration '{name}' has shape {list(arr.shape)}; the input has rank {len(dims)} "
                                f"(give one batch of rank {len(dims)}, or batches along a leading axis)")
        for item in items:
            for axis, (want, got) in enumerate(zip(dims, item.shape)):
                if isinstance(want, int) and want > 0 and want != got:
                    raise BadInputError(f"--calibration '{name}' has size {got} at axis {axis}; the model fixes "
                                        f"{want} (input shape {dims})")
        per_input[name] = items
    counts = {len(v) for v in per_input.values()}
    if len(counts) != 1:
        raise BadInputError("--calibration arrays hold different numbers of batches: "
                            + ", ".join(f"{k} {len(v)}" for k, v in per_input.items()))
    return [{k: np.ascontiguousarray(v[i]) for k, v in per_input.items()} for i in range(counts.pop())]


def reader(feeds: Sequence[Mapping[str, "np.ndarray"]]):
    """An ``onnxruntime.quantization.CalibrationDataReader`` over ``feeds``."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    return Reader()
