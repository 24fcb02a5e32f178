"""Size limits, checked before anything runs a model: a 200-byte file must not make onnxbridge allocate gigabytes
(nor loop forever: a Loop whose constants say it never stops is refused too, ``ENDLESS_LOOP``).

Every tensor onnxbridge would make, or a runtime would make at a size known in advance, is checked against one limit,
``ONNXBRIDGE_MAX_TENSOR_MB`` (default 4096 MB): random sample inputs (from static input shapes or --input-shape), and
the outputs of ops whose sizes are constants in the graph (``check_model``: a ``ConstantOfShape`` of a constant shape,
and the like). Sizes that only appear while running (shapes computed from input values) are bounded by the worker's
resident memory instead (``memory_limit``, ``ONNXBRIDGE_MAX_MEMORY_MB``, watched by ``onnxbridge.worker``).
"""
from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Iterable, Sequence

from onnxbridge.errors import BadInputError, TooLargeError

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from onnxbridge.specs import TensorSpec

TENSOR_ENV = "ONNXBRIDGE_MAX_TENSOR_MB"
DEFAULT_TENSOR_MB = 4096
_SHAPE_LIKE = 4096  # initializers up to this many elements are kept for constant propagation (shapes, indices)


def tensor_limit() -> int:
    """The largest tensor, in bytes, that onnxbridge makes or lets a runtime make."""
    text = os.environ.get(TENSOR_ENV, "")
    try:
        mb = float(text) if text else DEFAULT_TENSOR_MB
    except ValueError:
        raise BadInputError(f"{TENSOR_ENV}={text!r} is not a number of megabytes") from None
    return int(mb * 2**20)


def _size(count: int) -> str:
    for unit, scale in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count:,} bytes"


def check_tensor(what: str, shape: Sequence[int], itemsize: int, limit: int | None = None) -> None:
    """Refuse a tensor of ``shape`` (``itemsize`` bytes per element) over the limit, naming it as ``what``."""
    limit = tensor_limit() if limit is None else limit
    count = math.prod(max(int(d), 0) for d in shape) * max(itemsize, 1)
    if count > limit:
        raise TooLargeError(f"{what} of shape [{', '.join(map(str, shape))}] would take {_size(count)}, over the "
                            f"{_size(limit)} limit",
                            hint=f"set {TENSOR_ENV} to raise it if this is intended")


def check_inputs(specs: Iterable["TensorSpec"], fill: int = 1) -> None:
    """The sample inputs ``specs`` would make (symbolic axes at ``fill``) must fit the limit."""
    import numpy as np

    for s in specs:
        try:
            itemsize = np.dtype(s.dtype or "float32").itemsize
        except TypeError:
            itemsize = 8
        check_tensor(f"input '{s.name}'", s.concrete(fill), itemsize)


def check_model(model: "onnx.ModelProto", what: str) -> None:
    """Refuse a model that would make a tensor over the limit from constants alone (``what``: the model, in words):
    ConstantOfShape, Expand, Tile, Range, Resize and OneHot whose sizes are constants (initializers, Constant nodes,
    or Concat/Identity/Cast of them). Pure Python: onnx's shape inference crashes on malformed graphs."""
    from onnxbridge.modelwalk import graphs

    limit = tensor_limit()
    for graph in graphs(model.graph):
        consts: dict[str, "np.ndarray"] = {}
        shapes = {t.name: list(t.dims) for t in graph.initializer}
        for vi in graph.input:
            dims = vi.type.tensor_type.shape.dim
            if vi.type.HasField("tensor_type") and all(d.HasField("dim_value") for d in dims):
                shapes[vi.name] = [d.dim_value for d in dims]
        for t in graph.initializer:
            _keep(consts, t.name, t)
        for node in graph.node:
            for name, shape, itemsize in _made(node, consts, shapes):
                check_tensor(f"{what}: tensor '{name}' ({node.op_type} '{node.name}')", shape, itemsize, limit)
            if node.op_type == "Loop":
                _check_loop(node, consts, what)
            _propagate(node, consts)


def _keep(consts: dict, name: str, tensor) -> None:
    """Remember a small integer or float tensor's value (shapes, repeats, range ends)."""
    import numpy as np
    from onnx import numpy_helper

    if math.prod(tensor.dims) <= _SHAPE_LIKE:
        try:
            value = numpy_helper.to_array(tensor)
        except Exception:  # noqa: BLE001 - external or unreadable: not a constant we can use
            return
        if value.dtype.kind in "iufb":
            consts[name] = np.asarray(value)


def _propagate(node, consts: dict) -> None:
    """Values of nodes computed from constants alone that commonly carry shapes."""
    import numpy as np

    if node.op_type == "Constant":
        for attr in node.attribute:
            if attr.name == "value" and attr.HasField("t"):
                _keep(consts, node.output[0], attr.t)
            elif attr.name in ("value_ints", "value_int"):
                consts[node.output[0]] = np.array(list(attr.ints) if attr.name == "value_ints" else attr.i)
    elif node.op_type in ("Identity", "Cast") and node.input and node.input[0] in consts:
        consts[node.output[0]] = consts[node.input[0]]
    elif node.op_type == "Concat" and node.input and all(i in consts for i in node.input):
        try:
            consts[node.output[0]] = np.concatenate([consts[i].reshape(-1) for i in node.input])
        except ValueError:
            pass


def _made(node, consts: dict, shapes: dict) -> list[tuple[str, list[int], int]]:
    """(output, shape, bytes per element) of what ``node`` would allocate, where constants tell (a lower bound)."""
    import numpy as np

    def const(i: int):
        return consts.get(node.input[i]) if len(node.input) > i and node.input[i] else None

    out = node.output[0] if node.output else "?"
    op = node.op_type
    if op == "ConstantOfShape" and const(0) is not None:
        value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
        itemsize = 4 if value is None else _itemsize(value.data_type)
        return [(out, [int(d) for d in const(0).reshape(-1)], itemsize)]
    if op == "Expand" and const(1) is not None:
        return [(out, [int(d) for d in const(1).reshape(-1)], 1)]
    if op == "Tile" and const(1) is not None and node.input[0] in shapes:
        reps = [int(r) for r in const(1).reshape(-1)]
        return [(out, [d * r for d, r in zip(shapes[node.input[0]], reps)], 1)]
    if op == "Range" and all(const(i) is not None and const(i).size == 1 for i in range(3)):
        start, end, delta = (float(const(i).reshape(-1)[0]) for i in range(3))
        count = (end - start) / delta if delta else 0.0
        return [(out, [int(min(max(np.ceil(count), 0), 2**62)) if np.isfinite(count) else 2**62], 1)]
    if op == "Resize" and const(3) is not None and const(3).size:
        return [(out, [int(d) for d in const(3).reshape(-1)], 1)]
    if op == "OneHot" and const(1) is not None and node.input[0] in shapes and const(1).size == 1:
        return [(out, [*shapes[node.input[0]], int(const(1).reshape(-1)[0])], 1)]
    return []


ENDLESS_LOOP = 10**9  # iterations of a Loop whose condition never turns false: no model means that many


def _check_loop(node, consts: dict, what: str) -> None:
    """Refuse a Loop that runs ``ENDLESS_LOOP`` or more iterations from constants alone: its trip count is absent
    or such a constant, and its condition is absent or true and passed on unchanged (or set true) by the body."""
    trip = consts.get(node.input[0]) if node.input and node.input[0] else None
    if node.input and node.input[0] and (trip is None or trip.size != 1):
        return  # computed at run time: bounded by the run's time budget
    count = None if trip is None else int(trip.reshape(-1)[0])
    if count is not None and count < ENDLESS_LOOP:
        return
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and not (cond in consts and consts[cond].size == 1 and bool(consts[cond].reshape(-1)[0])):
        return
    body = next((a.g for a in node.attribute if a.name == "body" and a.HasField("g")), None)
    if body is None or not _stays_true(body):
        return
    runs = "without end" if count is None else f"{count:,} times"
    raise BadInputError(f"{what}: Loop '{node.name}' would run {runs} (its trip count and condition are constants "
                        "that never stop it)", hint="a model that never finishes cannot be converted or validated")


def _stays_true(body) -> bool:
    """Whether a Loop body's condition output is its condition input passed on, or the constant true."""
    if len(body.input) < 2 or not body.output:
        return False
    consts: dict = {}
    for t in body.initializer:
        _keep(consts, t.name, t)
    true = {body.input[1].name}
    for node in body.node:
        _propagate(node, consts)
        if node.op_type == "Identity" and node.input and node.input[0] in true:
            true.add(node.output[0])
    out = body.output[0].name
    value = consts.get(out)
    return out in true or (value is not None and value.size == 1 and bool(value.reshape(-1)[0]))


def _itemsize(data_type: int) -> int:
    import onnx

    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return 1


MEMORY_ENV = "ONNXBRIDGE_MAX_MEMORY_MB"


def memory_limit() -> int | None:
    """The most resident memory, in bytes, the worker process may use (default: 75% of this machine's RAM; None
    where the platform cannot say)."""
    text = os.environ.get(MEMORY_ENV, "")
    if text:
        try:
            return int(float(text) * 2**20)
        except ValueError:
            raise BadInputError(f"{MEMORY_ENV}={text!r} is not a number of megabytes") from None
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 0.75)
    except (ValueError, OSError, AttributeError):
        return None


def resident(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes (Linux; None elsewhere or when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def over_memory(step: str, used: int, limit: int) -> TooLargeError:
    """The error for a worker stopped at the memory limit while doing ``step``."""
    return TooLargeError(f"{step} used {_size(used)} of memory, over the {_size(limit)} limit; it was stopped",
                         hint=f"set {MEMORY_ENV} to raise the limit if the model really needs it")
