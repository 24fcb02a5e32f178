"""Input specifications: names, shapes, dtypes; parsing of --input-shape / --dynamic; sample inputs."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from onnxbridge.errors import BadInputError

if TYPE_CHECKING:
    import numpy as np

Dim = int | str | None  # int: fixed; str: symbolic label; None: unknown


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[Dim, ...]
    dtype: str | None = "float32"

    def concrete(self, fill: int = 1) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) and d >= 0 else fill for d in self.shape)

    def as_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class DynamicAxis:
    name: str
    axis: int
    label: str | None = None
    min: int | None = None  # sizes validation checks besides the sample's (``x:0:batch:1..16``)
    max: int | None = None

    @property
    def dim_label(self) -> str:
        return self.label or f"{self.name}_dim{self.axis}"


_SHAPE = re.compile(r"^(?P<name>[^:]+):(?P<dims>[^:]*)(?::(?P<dtype>\w+))?$")
_DYN = re.compile(r"^(?P<name>[^:]+):(?P<axis>-?\d+)(?::(?P<label>[A-Za-z_][\w]*))?(?::(?P<min>\d+)\.\.(?P<max>\d+))?$")
DTYPES = ("float32", "float16", "float64", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool")


def parse_input_shape(text: str) -> TensorSpec:
    """``NAME:D1,D2,...[:DTYPE]`` -> TensorSpec (all dims fixed, positive)."""
    m = _SHAPE.match(text.strip())
    if not m:
        raise BadInputError(f"--input-shape '{text}' is not NAME:D1,D2,...[:DTYPE] (e.g. x:1,3,224,224)")
    dims_text = m["dims"].replace(" ", "")
    try:
        dims = tuple(int(d) for d in dims_text.split(",")) if dims_text else ()
    except ValueError:
        raise BadInputError(f"--input-shape '{text}': dimensions must be integers") from None
    if any(d <= 0 for d in dims):
        raise BadInputError(f"--input-shape '{text}': dimensions must be positive")
    dtype = m["dtype"]  # None: keep the sample's dtype (float32 when there is none)
    if dtype is not None and dtype not in DTYPES:
        raise BadInputError(f"--input-shape '{text}': unknown dtype '{dtype}'; known: {', '.join(DTYPES)}")
    return TensorSpec(m["name"], dims, dtype)


def parse_dynamic(text: str) -> DynamicAxis:
    """``NAME:AXIS[:LABEL][:MIN..MAX]`` -> DynamicAxis."""
    m = _DYN.match(text.strip())
    if not m:
        raise BadInputError(f"--dynamic '{text}' is not NAME:AXIS[:LABEL][:MIN..MAX] (e.g. x:0:batch:1..16)")
    low, high = (int(m["min"]), int(m["max"])) if m["min"] else (None, None)
    if low is not None and not 1 <= low <= high:
        raise BadInputError(f"--dynamic '{text}': the range needs 1 <= MIN <= MAX")
    return DynamicAxis(m["name"], int(m["axis"]), m["label"], low, high)


def normalize_dynamic(dynamic) -> list[DynamicAxis]:
    """Accept DynamicAxis items, 'x:0:batch' strings, or {'x': {0: 'batch'}} / {'x': [0]} mappings."""
    if not dynamic:
        return []
    if isinstance(dynamic, Mapping):
        out = []
        for name, axes in dynamic.items():
            items = axes.items() if isinstance(axes, Mapping) else ((a, None) for a in axes)
            out += [DynamicAxis(name, int(a), label) for a, label in items]
        return out
    return [d if isinstance(d, DynamicAxis) else parse_dynamic(str(d)) for d in dynamic]


@dataclass(frozen=True)
class InputSpec:
    """``--input-shape`` and ``--dynamic``, parsed once: what frontends and backends both read."""

    shapes: tuple[TensorSpec, ...] = ()
    dynamic: tuple[DynamicAxis, ...] = ()

    @classmethod
    def parse(cls, input_shapes: "Sequence[str | TensorSpec] | None" = (), dynamic: Any = None) -> "InputSpec":
        """From ``NAME:D1,D2[:DTYPE]`` strings or TensorSpecs, and ``--dynamic`` in any form ``normalize_dynamic``
        takes."""
        return cls(tuple(parse_input_shape(s) if isinstance(s, str) else s for s in input_shapes or ()),
                   tuple(normalize_dynamic(dynamic)))

    def fixed(self) -> dict[str, tuple]:
        """The shapes fixed by ``--input-shape``, by input name."""
        return {s.name: tuple(s.shape) for s in self.shapes}

    def with_dynamic(self, dynamic: Sequence[DynamicAxis]) -> "InputSpec":
        """The same shapes with the dynamic axes as a frontend resolved them."""
        return InputSpec(self.shapes, tuple(dynamic))


def check_names(kind: str, given: Sequence[str], known: Sequence[str]) -> None:
    unknown = [n for n in given if n not in known]
    if unknown:
        raise BadInputError(f"{kind} names unknown input/output {', '.join(map(repr, unknown))}; "
                            f"the model has {', '.join(map(repr, known)) or 'none'}")


def apply_overrides(specs: list[TensorSpec], input_shapes: Sequence[TensorSpec],
                    dynamic: Sequence[DynamicAxis], *, can_open: bool = True) -> list[TensorSpec]:
    """``--input-shape`` fixes dims (and dtype); ``--dynamic`` opens an axis (when ``can_open``)."""
    names = [s.name for s in specs]
    check_names("--input-shape", [s.name for s in input_shapes], names)
    check_names("--dynamic", [d.name for d in dynamic], names)
    by_name = {s.name: s for s in specs}
    for given in input_shapes:
        have = by_name[given.name]
        if len(given.shape) != len(have.shape) or any(isinstance(h, int) and h != g
                                                       for h, g in zip(have.shape, given.shape)):
            raise BadInputError(f"--input-shape {given.name}:{','.join(map(str, given.shape))} does not fit the "
                                f"model's input shape {_text(have.shape)}")
        by_name[given.name] = TensorSpec(given.name, given.shape, given.dtype or have.dtype)
    for d in dynamic:
        have = by_name[d.name]
        if not -len(have.shape) <= d.axis < len(have.shape):
            raise BadInputError(f"--dynamic {d.name}:{d.axis}: the input has rank {len(have.shape)}")
        axis = d.axis % len(have.shape)
        if isinstance(have.shape[axis], int) and not can_open:
            raise BadInputError(f"--dynamic {d.name}:{d.axis}: this model fixes that axis to {have.shape[axis]}")
        shape = list(have.shape)
        shape[axis] = None
        by_name[d.name] = TensorSpec(d.name, tuple(shape), have.dtype)
    return [by_name[n] for n in names]


def _text(shape: Sequence) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def as_arrays(sample: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Sample inputs (array, framework tensor, list/tuple in input order, or name -> value) as named numpy arrays."""
    import numpy as np

    if isinstance(sample, Mapping):
        check_names("sample input", list(sample), names)
        missing = [n for n in names if n not in sample]
        if missing:
            raise BadInputError(f"sample inputs lack {', '.join(map(repr, missing))}")
        return {n: np.asarray(sample[n]) for n in names}
    values = list(sample) if isinstance(sample, (list, tuple)) else [sample]
    if len(values) != len(names):
        raise BadInputError(f"{len(values)} sample input(s) for {len(names)} model input(s) ({', '.join(names)})")
    return {n: np.asarray(v) for n, v in zip(names, values)}


@dataclass
class Sample:
    """One set of named input arrays, with where it came from."""

    feeds: dict[str, "np.ndarray"]
    origin: str = "random"

    def shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.feeds.items()}


def random_array(shape: Sequence[int], dtype: str, rng) -> "np.ndarray":
    """Seeded values in a range that suits the dtype: N(0,1) floats, small non-negative ints, fair bools."""
    import numpy as np

    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 10, size=shape).astype(dtype)
    if dtype == "bfloat16":
        import ml_dtypes

        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    return rng.standard_normal(shape).astype(np.dtype(dtype))


def random_sample(specs: Sequence[TensorSpec], seed: int = 0, fill: int = 1) -> Sample:
    import numpy as np

    from onnxbridge.budget import check_inputs

    check_inputs(specs, fill)
    rng = np.random.default_rng(seed)
    feeds = {s.name: random_array(s.concrete(fill), s.dtype or "float32", rng) for s in specs}
    return Sample(feeds, origin=f"random(seed={seed})")


def load_npz(path: str | Path) -> dict[str, "np.ndarray"]:
    """Named arrays from a .npz file or a directory of .npy files, size-checked before reading
    (``onnxbridge.inputfile.load_npz``, which reads every inputs file)."""
    from onnxbridge.inputfile import load_npz as load

    return load(path)


def reseed(sample: Sample, seed: int) -> Sample:
    """Another batch shaped and typed like ``sample``: fresh N(0,1) floats, bools at random, and the
    sample's own integers and strings shuffled (so ids and categories stay valid)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for name, a in sample.feeds.items():
        if a.dtype.kind == "f":
            feeds[name] = rng.standard_normal(a.shape).astype(a.dtype)
        elif a.dtype.kind == "b":
            feeds[name] = rng.random(a.shape) < 0.5
        else:
            feeds[name] = rng.permutation(a.ravel()).reshape(a.shape) if a.size else a
    return Sample(feeds, origin=f"random(seed={seed}) like {sample.origin}")


def vary_dynamic(sample: Sample, dynamic: Sequence[DynamicAxis], size: Callable[[DynamicAxis, int], int] | None = None,
                 what: str = "dynamic axes grown by one") -> Sample | None:
    """The sample with every dynamic input axis resized (default: grown by one; axes sharing a label get
    the same size), or None when nothing changes.

    Values are taken cyclically from the original sample, so real data stays realistic and
    integer ids stay in range.
    """
    import numpy as np

    size = size or (lambda d, n: n + 1)
    sizes: dict[str, int] = {}
    feeds = dict(sample.feeds)
    changed = False
    for d in dynamic:
        if d.name not in feeds:
            continue
        arr = feeds[d.name]
        axis = d.axis % arr.ndim if arr.ndim else 0
        if arr.ndim == 0 or arr.shape[axis] == 0:
            continue
        new = sizes.setdefault(d.dim_label, size(d, arr.shape[axis]))
        if new == arr.shape[axis]:
            continue
        idx = np.arange(new) % arr.shape[axis]
        feeds[d.name] = np.take(arr, idx, axis=axis)
        changed = True
    if not changed:
        return None
    return Sample(feeds, origin=f"{sample.origin}, {what}")


GROWTH_STEPS = 4  # second sizes an axis of size n may take besides n + 1: n + q, n + 2q, n + 4q, n + 8q
GROWTH_TRIES = 4  # grown samples tried on the source before the dynamic axes count as not exercised
INFER_MAX_NODES = 20000  # above this (main-graph nodes) no shape inference: the default sizes
INFER_MAX_SECONDS = 5.0  # inference at all the sizes taking longer: the default sizes


def growth_sizes(n: int) -> list[int]:
    """Second sizes for an axis of size ``n`` that keep its power-of-two divisibility (up to 16), smallest first:
    n + q, n + 2q, n + 4q, n + 8q with q the largest power of two that divides n, at most 16 (64: 80, 96, 128,
    192; 224: 240, 256, 288, 352; 1: 2, 3, 5, 9), so sources that need a multiple of their patch or stride run."""
    q = min(n & -n, 16) if n > 0 else 1
    return [n + q * 2 ** k for k in range(GROWTH_STEPS)]


@dataclass
class Growth:
    """The second sizes to try for the dynamic axes, best first: ``candidates`` (grown), then ``smaller`` (for a
    source that runs at no larger size, e.g. a sample already at its position table's length); and how they were
    chosen."""

    candidates: list[Sample]
    reason: str
    smaller: list[Sample] = field(default_factory=list)


def _sizes_text(sample: Sample, dynamic: Sequence[DynamicAxis]) -> str:
    return ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in sample.shapes().items()
                     if any(d.name == n for d in dynamic))


def _resized(first: Sample, dynamic: Sequence[DynamicAxis], sizes: Sequence[Callable[[int], int]],
             besides: Sequence[Sample] = ()) -> list[Sample]:
    """``first`` with every dynamic axis at each of ``sizes`` (n -> new size; n where none fits), no shape twice."""
    out: list[Sample] = []
    for size in sizes:
        s = vary_dynamic(first, dynamic, lambda d, n, size=size: size(n))
        if s is not None and all(s.shapes() != o.shapes() for o in (*besides, *out)):
            s.origin = f"{first.origin}, dynamic axes at {_sizes_text(s, dynamic)}"
            out.append(s)
    return out


def _step(n: int) -> int:
    return min(n & -n, 16) if n > 0 else 1


def grow(first: Sample, dynamic: Sequence[DynamicAxis], model_path: "str | Path | None" = None) -> Growth:
    """The second sizes for the dynamic axes of ``first`` (several axes grow together, one step at a time).

    With ``model_path`` (the ONNX model) shape inference (with data propagation) runs at the first size and at
    each candidate (n + 1, then ``growth_sizes``; smaller: n - 1, n - q): the values whose inferred shapes differ
    between them derive from the axes, and only candidates that change every one of them are kept, smallest change
    first (65 leaves the 4x4 grid of 16x16 patches of a 64x64 image as it was; 80 does not). Without inference (no
    model, too big, or it fails) the candidates are ``growth_sizes`` (then n - q, n - 1); where nothing but the
    inputs derives from the axes, n + 1 comes first."""
    growth = _resized(first, dynamic, [lambda n, k=k: growth_sizes(n)[k] for k in range(GROWTH_STEPS)])
    grown = _resized(first, dynamic, [lambda n: n + 1], growth) + growth
    smaller = _resized(first, dynamic, [lambda n: n - _step(n) if n > _step(n) else n,
                                        lambda n: n - 1 if n > 1 else n], grown)
    if not grown:
        return Growth([], "no second size applies to the sample")
    shapes, why = _infer_all(model_path, [first, *grown, *smaller]) if model_path is not None else \
        (None, "no ONNX model")
    if shapes is None:
        return Growth(growth or grown, f"sizes that keep the axes' power-of-two divisibility (no shape inference: "
                                       f"{why})", smaller)
    base = shapes[0]
    up = _ranked(base, shapes[1:len(grown) + 1], list(first.feeds))
    down = _ranked(base, shapes[len(grown) + 1:], list(first.feeds))
    if up is None:
        return Growth(grown, "shape inference derives no shape from the axes but the inputs'", smaller)
    derived, same = up
    full = [i for i, n in enumerate(same) if n == 0]
    if down is not None:
        smaller = [smaller[i] for i, n in enumerate(down[1]) if n == 0]
    if full:
        left = [f"{_sizes_text(grown[i], dynamic)} leaves {same[i]} unchanged" for i in range(full[0])]
        return Growth([grown[i] for i in full],
                      f"shape inference: {derived} value shape(s) derive from the axes and "
                      f"{_sizes_text(grown[full[0]], dynamic)} changes them all"
                      + (f" ({'; '.join(left)})" if left else ""), smaller)
    ranked = sorted(range(len(grown)), key=lambda i: (same[i], i))
    return Growth([grown[i] for i in ranked],
                  f"shape inference: no larger size tried changes all {derived} value shape(s) derived from the axes "
                  f"({'; '.join(f'{_sizes_text(grown[i], dynamic)} leaves {same[i]} unchanged' for i in ranked)})",
                  smaller)


def _ranked(base: dict, rest: Sequence[dict], inputs: Sequence[str]) -> tuple[int, list[int]] | None:
    """How many values' shapes differ from ``base`` in some of ``rest`` (derive from the axes), and per entry of
    ``rest`` how many of those it leaves unchanged; None when only the ``inputs``' shapes change."""
    derived = {v for v in set(base).union(*rest) if any(r.get(v) != base.get(v) for r in rest)}
    if not derived - set(inputs):
        return None
    return len(derived), [sum(r.get(v) == base.get(v) for v in derived) for r in rest]


def _infer_all(model_path: "str | Path", samples: Sequence[Sample]) -> tuple[list[dict] | None, str]:
    """Per sample, every value's inferred shape (None where inference gave none) from the ONNX model with its inputs
    set to the sample's shapes; (None, why) when inference cannot tell (too big, too slow, or it fails at the first
    size)."""
    import time

    import onnx

    from onnxbridge.inplace import load_in_place

    try:
        model = load_in_place(model_path)  # weights stay in the file: the graph alone
    except Exception as exc:  # noqa: BLE001 - the hop reports an unreadable model itself
        return None, f"the model does not load ({type(exc).__name__})"
    if len(model.graph.node) > INFER_MAX_NODES:
        return None, f"{len(model.graph.node)} nodes, over {INFER_MAX_NODES}"
    del model.graph.value_info[:]
    for out in model.graph.output:  # shapes the export wrote for the first size would clash at the others
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    found, start = [], time.perf_counter()
    for i, sample in enumerate(samples):
        shapes = sample.shapes()
        for inp in model.graph.input:
            if inp.name in shapes and inp.type.HasField("tensor_type"):
                tensor = inp.type.tensor_type
                tensor.ClearField("shape")
                for size in shapes[inp.name]:
                    tensor.shape.dim.add().dim_value = size
        try:
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
        except Exception as exc:  # noqa: BLE001 - inference refusing a size tells that the shapes change there
            if i == 0:
                return None, f"it fails at the first size ({type(exc).__name__})"
            found.append({})
            continue
        if time.perf_counter() - start > INFER_MAX_SECONDS:
            return None, f"it took over {INFER_MAX_SECONDS:g} s"
        graph = inferred.graph
        found.append({v.name: _shape_of(v) for v in (*graph.input, *graph.value_info, *graph.output)})
    return found, ""


def _shape_of(value) -> tuple | None:
    t = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if t is None or not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
