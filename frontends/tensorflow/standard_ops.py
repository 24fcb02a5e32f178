"""TensorFlow ops that tf2onnx leaves in its output verbatim, rewritten into standard ONNX.

tf2onnx copies a TF op it has no handler for into the ONNX graph under its TF name ("Tensorflow op [...] is not
supported"), so the checker later fails with "No Op registered for Erfc" as if the input were bad. Keras uses
several of them: ``gelu`` (exact) is ``0.5 * x * erfc(-x / sqrt(2))``, ``celu`` uses ``expm1``. Each op with an
exact standard equivalent has one entry in ``REWRITES`` (one function emitting the replacement nodes, same
outputs); any other op outside the ONNX standard is refused here with ``UnsupportedError`` naming it.

Numerics: ``1 - Erf(x)`` and ``Exp(x) - 1`` are exact up to float rounding in absolute terms; where ``erfc`` or
``expm1`` are tiny (x > ~4 or |x| < ~1e-4) their *relative* error grows, which validation's absolute tolerance
absorbs for activations (gelu multiplies erfc by x and 0.5 around x <= 0, where erfc is near 1 or 2).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import onnx

# TF ops with no standard ONNX equivalent that tf2onnx can leave behind: why, for the refusal
NO_EQUIVALENT = {
    "Lgamma": "log-gamma has no ONNX operator",
    "Digamma": "digamma has no ONNX operator",
    "Erfinv": "the inverse error function has no ONNX operator",
    "Ndtri": "the inverse normal CDF has no ONNX operator",
    "StatefulPartitionedCall": "a nested tf.function tf2onnx could not inline (Keras runs grouped convolutions, "
                               "Conv with groups > 1, as an XLA-compiled function)",
    "PartitionedCall": "a nested tf.function tf2onnx could not inline",
    "StringToHashBucketFast": "FarmHash string hashing (Keras Hashing) has no ONNX operator",
    "LookupTableFindV2": "a TF hash-table lookup (Keras IntegerLookup/StringLookup) whose table tf2onnx does not "
                         "export",
}


class _Emitter:
    """Builds the replacement nodes of one TF node: fresh value names under the node's name, typed constants."""

    def __init__(self, node: onnx.NodeProto, elem_type: int, taken: set[str]):
        self.node, self.elem_type, self.taken, self.nodes = node, elem_type, taken, []
        self.base = node.name or node.output[0]

    def _name(self, hint: str) -> str:
        name, i = f"{self.base}/{hint}", 0
        while name in self.taken:
            i += 1
            name = f"{self.base}/{hint}_{i}"
        self.taken.add(name)
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        from onnx import helper

        out = out or self._name(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=self._name(f"{op_type}_node"),
                                           **attrs))
        return out

    def const(self, value, elem_type: int | None = None) -> str:
        """A constant of the input's element type (or ``elem_type``): a scalar, or 1-D from a list."""
        from onnx import helper

        out = self._name("const")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        dims = [len(values)] if isinstance(value, (list, tuple)) else []
        tensor = helper.make_tensor(out, elem_type or self.elem_type, dims, values)
        self.nodes.append(helper.make_node("Constant", [], [out], name=self._name("Constant_node"), value=tensor))
        return out

    def where_zero(self, cond_of: str, value: str, out: str) -> str:
        """``0 if cond_of == 0 else value`` (TF's *NoNan / x*f(y) conventions)."""
        zero = self.const(0.0)
        return self.op("Where", self.op("Equal", cond_of, zero), zero, value, out=out)


def _erfc(e: _Emitter, x: str, out: str) -> None:
    e.op("Sub", e.const(1.0), e.op("Erf", x), out=out)


def _expm1(e: _Emitter, x: str, out: str) -> None:
    e.op("Sub", e.op("Exp", x), e.const(1.0), out=out)


def _log1p(e: _Emitter, x: str, out: str) -> None:
    e.op("Log", e.op("Add", x, e.const(1.0)), out=out)


def _xlogy(e: _Emitter, x: str, y: str, out: str) -> None:
    e.where_zero(x, e.op("Mul", x, e.op("Log", y)), out)


def _xlog1py(e: _Emitter, x: str, y: str, out: str) -> None:
    e.where_zero(x, e.op("Mul", x, e.op("Log", e.op("Add", y, e.const(1.0)))), out)


def _xdivy(e: _Emitter, x: str, y: str, out: str) -> None:
    e.where_zero(x, e.op("Div", x, y), out)


def _mul_no_nan(e: _Emitter, x: str, y: str, out: str) -> None:
    e.where_zero(y, e.op("Mul", x, y), out)


def _bucketize(e: _Emitter, x: str, out: str) -> None:
    """TF's bucket index: how many (sorted) boundaries are <= x, as int32."""
    from onnx import TensorProto, helper

    boundaries = next((helper.get_attribute_value(a) for a in e.node.attribute if a.name == "boundaries"), None)
    if boundaries is None:
        raise UnsupportedError(f"TensorFlow Bucketize node {e.node.name} lost its boundaries in tf2onnx")
    kind = TensorProto.FLOAT if e.elem_type == TensorProto.FLOAT else TensorProto.DOUBLE
    if e.elem_type != kind:  # integers (and float64) compared exactly in float64, as TF compares them
        x = e.op("Cast", x, to=kind)
    if not boundaries:
        e.op("Cast", e.op("Mul", x, e.const(0.0, kind)), to=TensorProto.INT32, out=out)
        return
    ge = e.op("GreaterOrEqual", e.op("Unsqueeze", x, e.const([-1], TensorProto.INT64)),
              e.const([float(b) for b in boundaries], kind))
    e.op("ReduceSum", e.op("Cast", ge, to=TensorProto.INT32), e.const([-1], TensorProto.INT64), keepdims=0, out=out)


# TF op -> (its ONNX form, for the report note; the function emitting it)
REWRITES: dict[str, tuple[str, Callable[..., None]]] = {
    "Erfc": ("1 - Erf(x)", _erfc),
    "Expm1": ("Exp(x) - 1", _expm1),
    "Log1p": ("Log(x + 1)", _log1p),
    "Xlogy": ("Where(x == 0, 0, x * Log(y))", _xlogy),
    "Xlog1py": ("Where(x == 0, 0, x * Log(y + 1))", _xlog1py),
    "Xdivy": ("Where(x == 0, 0, x / y)", _xdivy),
    "MulNoNan": ("Where(y == 0, 0, x * y)", _mul_no_nan),
    "Bucketize": ("ReduceSum(Cast(x[..., None] >= boundaries, int32), -1)", _bucketize),
}
_ARITY = {"Erfc": 1, "Expm1": 1, "Log1p": 1, "Bucketize": 1}


def _known_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value shape inference can type (the leaked ops' own outputs stay untyped)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - types then come from what the exporter wrote
        inferred = model
    types: dict[str, int] = {}

    def visit(graph: onnx.GraphProto) -> None:
        for v in (*graph.input, *graph.output, *graph.value_info):
            if v.type.tensor_type.elem_type:
                types[v.name] = v.type.tensor_type.elem_type
        for t in graph.initializer:
            types[t.name] = t.data_type
        for node in graph.node:
            for a in node.attribute:
                for g in (a.g,) if a.HasField("g") else a.graphs:
                    visit(g)

    visit(inferred.graph)
    return types


def _is_standard(op_type: str, domain: str, opset: int) -> bool:
    import onnx

    try:
        onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return False
    return True


def standardize(model: onnx.ModelProto) -> list[str]:
    """Rewrite the leaked TF ops in ``model`` (in place, subgraphs included) into standard ONNX; return one
    report note per rewritten op type. Raise ``UnsupportedError`` naming any op still outside the standard."""
    import onnx

    opsets = {o.domain or "": o.version for o in model.opset_import}
    default = opsets.get("", opsets.get("ai.onnx", 13))
    types = _known_types(model) if any(n.op_type in REWRITES for n in _all_nodes(model.graph)) else {}
    taken = {v for n in _all_nodes(model.graph) for v in (*n.input, *n.output, n.name)}
    counts: dict[str, int] = {}
    refused: dict[str, str] = {}

    def visit(graph: onnx.GraphProto) -> None:
        out: list[onnx.NodeProto] = []
        for node in graph.node:
            for a in node.attribute:
                for g in (a.g,) if a.HasField("g") else a.graphs:
                    visit(g)
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            if domain == "" and node.op_type in REWRITES and not _is_standard(node.op_type, "", default):
                arity = _ARITY.get(node.op_type, 2)
                if len(node.input) != arity or len(node.output) != 1:
                    refused.setdefault(node.op_type, f"node {node.name} has {len(node.input)} inputs")
                    out.append(node)
                    continue
                elem = next((types[i] for i in node.input if i in types), onnx.TensorProto.FLOAT)
                emitter = _Emitter(node, elem, taken)
                REWRITES[node.op_type][1](emitter, *node.input, node.output[0])
                types[node.output[0]] = onnx.TensorProto.INT32 if node.op_type == "Bucketize" else elem
                out.extend(emitter.nodes)
                counts[node.op_type] = counts.get(node.op_type, 0) + 1
                continue
            if domain == "" and not _is_standard(node.op_type, "", default):
                refused.setdefault(node.op_type, NO_EQUIVALENT.get(
                    node.op_type, f"tf2onnx has no conversion for it (node {node.name})"))
            out.append(node)
        if len(out) != len(graph.node):
            del graph.node[:]
            graph.node.extend(out)

    visit(model.graph)
    if refused:
        what = "; ".join(f"{op}: {why}" for op, why in sorted(refused.items()))
        raise UnsupportedError(f"the TensorFlow model uses op(s) outside the ONNX standard that tf2onnx leaves "
                               f"unconverted ({what})",
                               hint="replace them in the model (e.g. a Lambda layer with standard math) or "
                                    "export that part separately")
    return [f"rewrote {n} TensorFlow {op} node(s) tf2onnx left unconverted into standard ONNX "
            f"{REWRITES[op][0]}" for op, n in sorted(counts.items())]


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in (a.g,) if a.HasField("g") else a.graphs:
                yield from _all_nodes(g)
