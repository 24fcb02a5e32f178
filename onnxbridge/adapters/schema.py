"""What the installed onnx knows about each default-domain op: its schema versions and signatures."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx.defs

DOMAINS = ("", "ai.onnx")


@functools.lru_cache(maxsize=None)
def _history() -> dict[str, tuple["onnx.defs.OpSchema", ...]]:
    import onnx.defs

    by_op: dict[str, list] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in DOMAINS:
            by_op.setdefault(s.name, []).append(s)
    return {op: tuple(sorted(ss, key=lambda s: s.since_version)) for op, ss in by_op.items()}


def known(op: str) -> bool:
    return op in _history()


@functools.lru_cache(maxsize=None)
def versions(op: str) -> tuple[int, ...]:
    """Since-versions of ``op`` in ascending order (deprecated ones included)."""
    return tuple(s.since_version for s in _history().get(op, ()))


@functools.lru_cache(maxsize=None)
def schema(op: str, version: int) -> "onnx.defs.OpSchema":
    return next(s for s in _history()[op] if s.since_version == version)


@functools.lru_cache(maxsize=None)
def version_at(op: str, opset: int) -> int | None:
    """The schema version of ``op`` in effect at ``opset``; None where it does not exist or was removed."""
    found = [v for v in versions(op) if v <= opset]
    if not found or found[-1] == removed_at(op):
        return None
    return found[-1]


@functools.lru_cache(maxsize=None)
def removed_at(op: str) -> int | None:
    """The version from which ``op`` is deprecated with no live successor (Upsample 10, Scatter 11).

    A deprecated version that a later live one supersedes (GroupNormalization 18 -> 21) is not a removal.
    """
    vs = versions(op)
    return vs[-1] if vs and schema(op, vs[-1]).deprecated else None


def first_version(op: str) -> int | None:
    live = [v for v in versions(op) if v != removed_at(op)]
    return live[0] if live else None


def _signature(s: "onnx.defs.OpSchema") -> tuple:
    ins = tuple((i.name, i.option) for i in s.inputs)
    outs = tuple((o.name, o.option) for o in s.outputs)
    attrs = tuple(sorted((name, str(a.type)) for name, a in s.attributes.items()))
    return ins, outs, attrs, s.min_input, s.max_input, s.min_output, s.max_output


@functools.lru_cache(maxsize=None)
def same_signature(op: str, old: int, new: int) -> bool:
    """True when inputs, outputs and attributes are unchanged between the two versions (types may differ)."""
    return _signature(schema(op, old)) == _signature(schema(op, new))


@functools.lru_cache(maxsize=None)
def _allowed(op: str, version: int) -> dict[str, frozenset[str]]:
    return {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema(op, version).type_constraints}


@functools.lru_cache(maxsize=None)
def type_allowed(op: str, version: int, index: int, elem_type: int, *, output: bool = False) -> bool:
    """Whether an input (or output) of element type ``elem_type`` is valid for ``op``-``version``."""
    import onnx

    s = schema(op, version)
    params = s.outputs if output else s.inputs
    if not params:
        return True
    param = params[min(index, len(params) - 1)]  # variadic: the last formal parameter repeats
    allowed = _allowed(op, version).get(param.type_str)
    if allowed is None:  # a concrete type, e.g. "tensor(int64)"
        allowed = frozenset([param.type_str])
    name = onnx.helper.tensor_dtype_to_string(elem_type).replace("TensorProto.", "").lower()
    wanted = {"float": "float", "double": "double", "float16": "float16"}.get(name, name)
    return any(t.endswith(f"({wanted})") for t in allowed)


@functools.lru_cache(maxsize=None)
def additive(op: str, old: int, new: int) -> bool:
    """True when ``new`` only adds optional inputs, outputs or attributes to ``old`` (same order, same
    kinds): a node written for ``old`` is valid for ``new`` unchanged."""
    a, b = schema(op, old), schema(op, new)

    def extends(xs, ys) -> bool:
        if len(ys) < len(xs) or any(x.name != y.name for x, y in zip(xs, ys)):
            return False
        return all(str(y.option).endswith("Optional") for y in ys[len(xs):])

    attrs_ok = all(name in b.attributes and str(b.attributes[name].type) == str(attr.type)
                   for name, attr in a.attributes.items())
    new_attrs_optional = all(not attr.required for name, attr in b.attributes.items() if name not in a.attributes)
    return extends(a.inputs, b.inputs) and extends(a.outputs, b.outputs) and attrs_ok and new_attrs_optional


def new_features(op: str, old: int, new: int) -> tuple[int, int, frozenset[str]]:
    """(input count, output count, attribute names) that ``old`` accepts."""
    a = schema(op, old)
    return a.max_input, a.max_output, frozenset(a.attributes)


@functools.lru_cache(maxsize=None)
def type_var(op: str, version: int, index: int, *, output: bool = False) -> str | None:
    """The type variable ("T", "T1", ...) of an input/output, or None for a concrete type."""
    s = schema(op, version)
    params = s.outputs if output else s.inputs
    if not params:
        return None
    type_str = params[min(index, len(params) - 1)].type_str
    return type_str if type_str in _allowed(op, version) else None


def takes_kind(op: str, version: int, index: int, kind: str, *, output: bool = False) -> bool:
    """Whether an input/output may be a ``kind`` ("seq" or "optional") value in ``op``-``version``."""
    s = schema(op, version)
    params = s.outputs if output else s.inputs
    if not params:
        return True
    type_str = params[min(index, len(params) - 1)].type_str
    allowed = _allowed(op, version).get(type_str, frozenset([type_str]))
    return any(t.startswith(f"{kind}(") for t in allowed)


@functools.lru_cache(maxsize=None)
def types_narrowed(op: str, old: int, new: int) -> bool:
    """True when some input or output of ``new`` no longer allows a type that ``old`` allowed."""
    a, b = schema(op, old), schema(op, new)
    allowed_a, allowed_b = _allowed(op, old), _allowed(op, new)
    for pa, pb in [*zip(a.inputs, b.inputs), *zip(a.outputs, b.outputs)]:
        ta = allowed_a.get(pa.type_str, frozenset([pa.type_str]))
        tb = allowed_b.get(pb.type_str, frozenset([pb.type_str]))
        if not ta <= tb:
            return True
    return False


@functools.lru_cache(maxsize=None)
def params(op: str, version: int, output: bool) -> tuple[tuple[str | None, frozenset, frozenset], ...]:
    """Per formal input (or output): (type variable or None, allowed tensor element types as ints,
    allowed non-tensor kinds {"seq", "optional"}). The last entry repeats for variadic parameters."""
    import onnx

    by_name = {onnx.TensorProto.DataType.Name(v).lower(): v for v in onnx.TensorProto.DataType.values() if v}
    s = schema(op, version)
    table = []
    for p in (s.outputs if output else s.inputs):
        allowed = _allowed(op, version).get(p.type_str)
        var = p.type_str if allowed is not None else None
        allowed = allowed if allowed is not None else frozenset([p.type_str])
        elems = frozenset(by_name[t[7:-1]] for t in allowed if t.startswith("tensor(") and t[7:-1] in by_name)
        kinds = frozenset(k for k in ("seq", "optional") if any(t.startswith(f"{k}(") for t in allowed))
        table.append((var, elems, kinds))
    return tuple(table)
