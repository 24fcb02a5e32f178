"""Optimization profiles: min/opt/max shapes for every input with a dynamic axis.

``--shapes NAME:MIN/OPT/MAX`` (each ``1x3x224x224``) sets an input's profile. Otherwise, per dynamic axis: min is
1 (or ``--dynamic``'s MIN), opt the validation sample's size, and max the sample's size widened to what validation
will feed (the sample grown by one, and ``--dynamic``'s MAX), so the TensorRT hop can run every validation sample.
"""
from __future__ import annotations

import re
from typing import Sequence

from onnxbridge.errors import BadInputError

Shape = tuple[int, ...]
MAX_DIM = 2**31 - 1  # a profile dimension TensorRT can take (its Dims are int64, its volumes must fit)
_SHAPES = re.compile(r"^(?P<name>[^:]+):(?P<min>[\dx]*)/(?P<opt>[\dx]*)/(?P<max>[\dx]*)$")


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[Shape, Shape, Shape]]:
    """``["x:1x3x8x8/4x3x8x8/8x3x8x8", ...]`` -> {name: (min, opt, max)}; BadInputError on anything malformed."""
    out: dict[str, tuple[Shape, Shape, Shape]] = {}
    for text in items:
        m = _SHAPES.match(text.strip().replace(" ", ""))
        if not m:
            raise BadInputError(f"--shapes '{text}' is not NAME:MIN/OPT/MAX with shapes like 1x3x224x224 "
                                "(e.g. x:1x3x224x224/8x3x224x224/32x3x224x224)")
        shapes = []
        for key in ("min", "opt", "max"):
            dims = m[key].split("x") if m[key] else []
            if not all(d.isdigit() for d in dims):
                raise BadInputError(f"--shapes '{text}': {key} shape '{m[key]}' is not like 1x3x224x224")
            if any(len(d) > len(str(MAX_DIM)) or int(d) > MAX_DIM for d in dims):
                raise BadInputError(f"--shapes '{text}': {key} shape '{m[key]}' has a dimension above {MAX_DIM}")
            shapes.append(tuple(int(d) for d in dims))
        low, opt, high = shapes
        if not len(low) == len(opt) == len(high):
            raise BadInputError(f"--shapes '{text}': min, opt and max must have the same rank")
        if any(d < 1 for d in low) or not all(a <= b <= c for a, b, c in zip(low, opt, high)):
            raise BadInputError(f"--shapes '{text}': every dimension needs 1 <= min <= opt <= max")
        if m["name"] in out:
            raise BadInputError(f"--shapes gives input '{m['name']}' twice")
        out[m["name"]] = (low, opt, high)
    return out


def plan(inputs: Sequence[tuple[str, Shape]], given: dict[str, tuple[Shape, Shape, Shape]], context) -> dict:
    """Profiles for the network's ``inputs`` (name, dims with -1 for dynamic): {name: {"min", "opt", "max"}}.

    Inputs without dynamic axes get no profile unless ``--shapes`` names them. BadInputError when ``--shapes``
    names an unknown input, disagrees with a fixed dimension, or a dynamic input has no size to start from.
    """
    from onnxbridge.plugins import BuildContext

    context = context or BuildContext()
    names = [n for n, _ in inputs]
    unknown = [n for n in given if n not in names]
    if unknown:
        raise BadInputError(f"--shapes names unknown input(s) {', '.join(map(repr, unknown))}; "
                            f"the model has {', '.join(map(repr, names))}")
    sample = dict(context.sample_shapes or {})
    sample.update(context.input_shapes or {})
    ranges = {}
    for d in context.dynamic or []:
        ranges[(d.name, d.axis)] = (d.min, d.max)
    out = {}
    for name, dims in inputs:
        if name in given:
            low, opt, high = given[name]
            if len(low) != len(dims):
                raise BadInputError(f"--shapes '{name}': rank {len(low)}, but the input has rank {len(dims)} "
                                    f"({_text(dims)})")
            for i, d in enumerate(dims):
                if d >= 0 and not low[i] == opt[i] == high[i] == d:
                    raise BadInputError(f"--shapes '{name}': axis {i} is fixed to {d} in the model, "
                                        f"the profile gives {low[i]}/{opt[i]}/{high[i]}")
            out[name] = {"min": list(low), "opt": list(opt), "max": list(high), "origin": "--shapes"}
            continue
        if all(d >= 0 for d in dims):
            continue
        shape = sample.get(name)
        if shape is None or len(shape) != len(dims):
            raise BadInputError(f"input '{name}' has dynamic axes ({_text(dims)}) and no sample shape; "
                                f"give its profile with --shapes {name}:MIN/OPT/MAX")
        low, opt, high = [], [], []
        for i, (d, s) in enumerate(zip(dims, shape)):
            if d >= 0:
                low.append(d), opt.append(d), high.append(d)
                continue
            rmin, rmax = ranges.get((name, i), ranges.get((name, i - len(dims)), (None, None)))
            s = int(s)
            low.append(min(rmin or 1, s))
            opt.append(s)
            high.append(max(s + 1, rmax or 0))
        out[name] = {"min": low, "opt": opt, "max": high, "origin": "default (min 1, opt = sample, max covers "
                                                                    "validation)"}
    return out


def _text(dims: Sequence[int]) -> str:
    return "x".join("?" if d < 0 else str(d) for d in dims)
