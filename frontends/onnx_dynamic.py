"""``--dynamic`` on an ONNX source: open fixed input axes of an exported model, refuse graphs that bake the old size
in, and run the static source at other sizes (slice by slice along the axis) for validation references."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from onnxbridge.errors import BadInputError
from onnxbridge.specs import DynamicAxis

if TYPE_CHECKING:
    import onnx

MAX_PIECES = 1024  # runs of the static source for one reference at another size
FROM_FRAMEWORK = "export from the framework with --dynamic"
HINTS = {"Reshape": f"{FROM_FRAMEWORK}, or make that Reshape use 0/-1 for the axis",
         "Flatten": f"{FROM_FRAMEWORK}, or flatten from axis 1 (or Reshape with 0/-1)",
         "Resize": f"{FROM_FRAMEWORK}, or make that Resize use scales instead of sizes",
         "Slice": f"{FROM_FRAMEWORK}, or make that Slice end at INT64_MAX on the axis"}
# Ops whose inputs broadcast against each other (numpy rules, aligned from the right).
BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "Equal",
                          "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "PRelu",
                          "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


@dataclass(frozen=True)
class Opened:
    """An opened axis: the input, its (non-negative) axis, the symbolic label and the size it had."""

    name: str
    axis: int
    label: str
    size: int


def resolve(model: onnx.ModelProto, dynamic: Sequence[DynamicAxis]) -> tuple[list[DynamicAxis], list[Opened]]:
    """The requested axes with their axis made non-negative, and those of them that are fixed in ``model`` (to be
    opened). Names the model's inputs do not have are passed through (the spine refuses them after export); an axis
    beyond an input's rank is refused."""
    inits = {t.name for t in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in inits}
    resolved, opened = [], []
    for d in dynamic:
        value = inputs.get(d.name)
        if value is None:
            resolved.append(d)
            continue
        dims = value.type.tensor_type.shape.dim
        rank = len(dims)
        if not value.type.tensor_type.HasField("shape") or not -rank <= d.axis < rank:
            raise BadInputError(f"--dynamic {d.name}:{d.axis}: input {d.name!r} has rank {rank} (axes 0..{rank - 1}, "
                                f"or -{rank}..-1)" if rank else f"--dynamic {d.name}:{d.axis}: input {d.name!r} is a "
                                "scalar or has no known shape; it has no axis to open")
        d = replace(d, axis=d.axis % rank)
        resolved.append(d)
        dim = dims[d.axis]
        if dim.HasField("dim_value"):
            opened.append(Opened(d.name, d.axis, d.dim_label, dim.dim_value))
    return resolved, opened


def open_axes(model: onnx.ModelProto, opened: Sequence[Opened]) -> tuple[onnx.ModelProto, list[str],
                                                                          dict[str, int]]:
    """A copy of ``model`` whose ``opened`` input axes are symbolic, with the shapes inferred from the fixed ones
    cleared and inferred again; also notes, and the output axes that follow the opened size (``_probe_sizes``).
    Refuses (BadInputError) a graph that bakes an opened size in where
    that shows without running it."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    if not opened:
        return out, [], {}
    by_name = {i.name: i for i in out.graph.input}
    for o in opened:
        dim = by_name[o.name].type.tensor_type.shape.dim[o.axis]
        dim.Clear()
        dim.dim_param = o.label
    for v in out.graph.value_info:
        v.type.tensor_type.ClearField("shape")
    for v in out.graph.output:
        if v.type.HasField("tensor_type"):
            v.type.tensor_type.ClearField("shape")
    del out.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(out, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - a model onnx cannot infer is still usable; validation decides
        note = (f"shape inference failed after opening the axes ({type(exc).__name__}: {exc}); only the validation "
                "at a second size checks that the model runs there")
        return out, [note], {}
    check_baked(inferred, opened)
    follows = _probe_sizes(inferred, opened)
    return inferred, [], follows


def _at_size(model: onnx.ModelProto, opened: Sequence[Opened], grow: int) -> onnx.ModelProto:
    """``model`` (opened) with the opened axes fixed at their old size plus ``grow``, shapes inferred strictly."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.value_info[:]
    for v in probe.graph.output:
        v.type.tensor_type.ClearField("shape")
    by_name = {i.name: i for i in probe.graph.input}
    for o in opened:
        by_name[o.name].type.tensor_type.shape.dim[o.axis].dim_value = o.size + grow
    return onnx.shape_inference.infer_shapes(probe, strict_mode=True, data_prop=True)


def _probe_sizes(model: onnx.ModelProto, opened: Sequence[Opened]) -> dict[str, int]:
    """Infer the shapes with the opened axes fixed at two other sizes: a node whose shapes stop agreeing there (while
    they agree at the old size) bakes the size in and is refused; an output axis that follows the size gets the label
    where inference lost it (Resize by scales, ...) and it grows one for one. Returns output -> the one axis that
    changes with the size (for ``SlicedRunner``). Models strict inference cannot take are left to validation."""
    from onnx.shape_inference import InferenceError

    try:
        _at_size(model, opened, 0)
    except Exception:  # noqa: BLE001 - strict inference does not take this model even unchanged
        return {}
    try:
        first, second = _at_size(model, opened, 2), _at_size(model, opened, 5)
    except InferenceError as exc:
        text = " ".join(str(exc).split())
        raise BadInputError(f"--dynamic: the model's shapes stop agreeing when {', '.join(o.label for o in opened)} "
                            f"changes: {text[:300]}", hint=FROM_FRAMEWORK) from None
    except Exception:  # noqa: BLE001 - anything else is left to validation
        return {}
    if len({o.label for o in opened}) != 1:
        return {}
    label, size = opened[0].label, opened[0].size
    follows = {}
    for out, a, b in zip(model.graph.output, first.graph.output, second.graph.output):
        dims = out.type.tensor_type.shape.dim
        at = [(x.dim_value, y.dim_value) for x, y in zip(a.type.tensor_type.shape.dim, b.type.tensor_type.shape.dim)]
        differ = [i for i, (x, y) in enumerate(at) if x != y]
        if len(differ) != 1 or differ[0] >= len(dims):
            continue
        follows[out.name] = i = differ[0]
        if at[i] == (size + 2, size + 5) and not dims[i].HasField("dim_value") and dims[i].dim_param != label:
            dims[i].Clear()
            dims[i].dim_param = label
    return follows


def _shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Tensor name -> dims (int, label str or None) for every tensor with a known shape."""
    shapes = {}
    for v in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            shapes[v.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def _constants(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Integer constants (initializers and Constant nodes) as flat lists."""
    from onnx import TensorProto, numpy_helper

    ints = (TensorProto.INT64, TensorProto.INT32)
    found = {}
    for t in model.graph.initializer:
        if t.data_type in ints:
            found[t.name] = numpy_helper.to_array(t).reshape(-1).tolist()
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in ints:
                    found[n.output[0]] = numpy_helper.to_array(a.t).reshape(-1).tolist()
                elif a.name == "value_ints":
                    found[n.output[0]] = list(a.ints)
    return found


def check_baked(model: onnx.ModelProto, opened: Sequence[Opened]) -> None:
    """Refuse a node that fixes an opened axis at its old size: a Reshape/Resize/Slice constant holding it, a Flatten
    that folds it into a fixed leading 1, or an op that meets the axis with a tensor whose matching dimension is
    fixed at the old size (a constant built from it: Expand, ConstantOfShape, Tile, ...)."""
    sizes = {o.label: o.size for o in opened}
    shapes, consts = _shapes(model), _constants(model)
    makers = {out: n for n in model.graph.node for out in n.output}

    def where(name: str) -> list[tuple[int, str]]:
        return [(i, d) for i, d in enumerate(shapes.get(name, [])) if isinstance(d, str) and d in sizes]

    def refuse(node, why: str, hint: str | None = None) -> None:
        raise BadInputError(f"--dynamic: node {node.name or '(unnamed)'!r} ({node.op_type}) {why}, so the model "
                            "cannot run at another size", hint=hint or HINTS.get(node.op_type, FROM_FRAMEWORK))

    for node in model.graph.node:
        ins = list(node.input)
        carried = where(ins[0]) if ins and ins[0] else []
        if node.op_type == "Reshape" and carried and len(ins) > 1 and ins[1] in consts:
            target = consts[ins[1]]
            for pos, label in carried:
                if pos < len(target) and target[pos] == sizes[label] and target[pos] not in (0, -1):
                    refuse(node, f"reshapes to {target}, fixing axis {pos} ({label}) at its old size {sizes[label]}")
            if 0 not in target and -1 not in target:
                refuse(node, f"reshapes to the fixed shape {target}, which holds the old size of {carried[0][1]}")
        elif node.op_type == "Flatten" and carried:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            if (axis + len(shapes.get(ins[0], [])) if axis < 0 else axis) == 0:
                refuse(node, f"flattens with axis={axis}, folding {carried[0][1]} into a fixed leading 1")
        elif node.op_type == "Resize" and carried and len(ins) > 3 and ins[3] in consts:
            target = consts[ins[3]]
            for pos, label in carried:
                if pos < len(target) and target[pos] == sizes[label]:
                    refuse(node, f"resizes to the fixed sizes {target}, fixing axis {pos} ({label}) at "
                                 f"{sizes[label]}")
        elif node.op_type == "Slice" and carried and len(ins) > 2 and ins[2] in consts:
            ends = consts[ins[2]]
            axes = consts.get(ins[3]) if len(ins) > 3 and ins[3] else list(range(len(ends)))
            rank = len(shapes.get(ins[0], []))
            for pos, label in carried:
                hits = [e for a, e in zip(axes or [], ends) if rank and a % rank == pos]
                if hits and hits[0] == sizes[label]:
                    refuse(node, f"slices axis {pos} ({label}) to the fixed end {sizes[label]}")
        elif node.op_type in BROADCASTING or node.op_type == "Concat":
            _check_meeting(node, shapes, sizes, makers, refuse)


def _check_meeting(node, shapes, sizes, makers, refuse: Callable) -> None:
    """An op whose inputs must agree on a dimension: one carries an opened axis, another fixes it at the old size."""
    ranked = [(name, shapes[name]) for name in node.input if name and name in shapes]
    if len(ranked) < 2:
        return
    concat_axis = next((a.i for a in node.attribute if a.name == "axis"), None) if node.op_type == "Concat" else None
    rank = max(len(s) for _, s in ranked)
    for name, dims in ranked:
        for i, d in enumerate(dims):
            if not (isinstance(d, str) and d in sizes):
                continue
            aligned = rank - len(dims) + i
            if concat_axis is not None and aligned == concat_axis % rank:
                continue
            for other, odims in ranked:
                j = aligned - (rank - len(odims))
                if other == name or not 0 <= j < len(odims):
                    continue
                fixed = odims[j]
                if isinstance(fixed, int) and fixed == sizes[d] and (fixed != 1 or concat_axis is not None):
                    maker = makers.get(other)
                    made = f" (made by {maker.op_type} node {maker.name!r})" if maker else " (an initializer)"
                    refuse(node, f"meets {d} with {other!r}{made}, whose dimension there is fixed at {fixed}",
                           f"{FROM_FRAMEWORK}, so that {maker.op_type if maker else 'tensor'} is built from the "
                           "input's shape")


def output_axes(model: onnx.ModelProto, opened: Sequence[Opened],
                follows: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Output name -> {label: axis} where the output carries an opened axis (after ``open_axes``; ``follows``: its
    axes that change with the one opened size)."""
    labels = {o.label for o in opened}
    found: dict[str, dict[str, int]] = {}
    for v in model.graph.output:
        dims = v.type.tensor_type.shape.dim if v.type.HasField("tensor_type") else []
        found[v.name] = {d.dim_param: i for i, d in enumerate(dims) if d.dim_param in labels}
        if v.name in follows and len(labels) == 1:
            found[v.name].setdefault(next(iter(labels)), follows[v.name])
    return found


class SlicedRunner:
    """Runs a static model at other sizes of its opened axes: the feeds are cut along the (one) resized axis into
    pieces of the old size (the last one padded by repeating its first items), each run as is, and the outputs
    joined along the axis that carries it. This holds for a batch axis (items independent), not for an axis the
    model mixes (a sequence under attention)."""

    def __init__(self, run: Callable[[Mapping[str, Any]], list], opened: Sequence[Opened],
                 outputs: Sequence[tuple[str, dict[str, int]]]):
        self.run, self.opened, self.outputs = run, list(opened), list(outputs)

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        import numpy as np

        resized = [o for o in self.opened if o.name in feeds and np.shape(feeds[o.name])[o.axis] != o.size]
        if not resized:
            return self.run(feeds)
        labels = {o.label for o in resized}
        if len(labels) > 1:
            raise BadInputError(f"the static source model runs only at its own sizes; references for axes "
                                f"{', '.join(sorted(labels))} resized together cannot be computed")
        label = labels.pop()
        size = next(o.size for o in resized)
        new = int(np.shape(feeds[resized[0].name])[resized[0].axis])
        axes = [(name, axes[label]) for name, axes in self.outputs if label in axes]
        missing = [name for name, axes in self.outputs if label not in axes]
        if missing:
            raise BadInputError(f"output(s) {', '.join(map(repr, missing))} of the opened model do not carry the axis "
                                f"{label!r}, so the static source cannot give references at {label}={new}")
        if -(-new // size) > MAX_PIECES:
            raise BadInputError(f"a reference at {label}={new} would take {-(-new // size)} runs of the static source "
                                f"(at most {MAX_PIECES})")
        pieces: list[list] = []
        for start in range(0, new, size):
            idx = np.arange(start, start + size)
            keep = min(size, new - start)
            idx = np.where(idx < new, idx, start + (idx - start) % keep)
            chunk = dict(feeds)
            for o in resized:
                chunk[o.name] = np.take(feeds[o.name], idx, axis=o.axis)
            pieces.append([np.take(out, np.arange(out.shape[ax] * keep // size), axis=ax)
                           for out, (_, ax) in zip(self.run(chunk), axes)])
        return [np.concatenate([p[k] for p in pieces], axis=ax) for k, (_, ax) in enumerate(axes)]
