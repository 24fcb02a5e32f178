"""Upper bounds of MIL sizes known only at run time (backends/coreml/bounds.py), on a small program of the ops a
detector's post-processing lowers to: each bound holds for every run and is as tight as the ops allow."""
from __future__ import annotations

import numpy as np

from tests.helpers.extras import require

require("coremltools")


def test_bounds_follow_the_ops_that_made_a_size():
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, get_new_symbol

    from onnxbridge.backends.coreml.bounds import upper_bound, value_bound, value_floor

    with Function({"s": mb.placeholder(shape=(12,)), "f": mb.placeholder(shape=(get_new_symbol(), 4))}) as func:
        s, f = func.inputs["s"], func.inputs["f"]
        picked = mb.squeeze(x=mb.non_zero(x=mb.greater(x=s, y=np.float32(0.5))), axes=[1])  # at most 12
        rows = mb.gather(x=mb.tile(x=mb.expand_dims(x=s, axes=[1]), reps=[1, 4]), indices=picked, axis=0)
        joined = mb.concat(values=[rows, rows], axis=0)  # at most 24
        k = mb.maximum(x=mb.minimum(x=mb.reshape(x=mb.slice_by_index(x=mb.shape(x=joined), begin=[0], end=[1]),
                                                  shape=[1]), y=np.int32(5)), y=np.int32(0))
        first = mb.slice_by_index(x=joined, begin=[0, 0], end=mb.concat(values=[k, np.int32([0])], axis=0),
                                  end_mask=[False, True])  # at most 5
        zeros = mb.fill(shape=mb.shape(x=first), value=np.float32(0))  # as first
        both = mb.add(x=zeros, y=first)
        flat = mb.reshape(x=both, shape=[-1])  # at most 5 * 4
        free = mb.add(x=f, y=np.float32(1))  # an input's flexible size: no bound
        found = {"picked": upper_bound(picked, 0), "joined": upper_bound(joined, 0), "k": value_bound(k, 0),
                 "k_floor": value_floor(k, 0), "first": upper_bound(first, 0), "zeros": upper_bound(zeros, 0),
                 "both": upper_bound(both, 0), "flat": upper_bound(flat, 0), "free": upper_bound(free, 0),
                 "static": upper_bound(first, 1)}
    assert found == {"picked": 12, "joined": 24, "k": 5, "k_floor": 0, "first": 5, "zeros": 5, "both": 5,
                     "flat": 20, "free": None, "static": 4}
