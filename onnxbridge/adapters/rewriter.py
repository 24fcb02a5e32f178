"""A graph being adapted: producer index, folded constants, element types and fresh names."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from onnxbridge.errors import UnsupportedError

if TYPE_CHECKING:
    import numpy as np
    import onnx


class Rewriter:
    """Indexes one graph once; adapters read constants and types and create nodes through it."""

    def __init__(self, graph: "onnx.GraphProto", types: dict, outer: "Rewriter | None" = None,
                 touched: set[str] | None = None, folder=None):
        self.graph = graph
        self.outer = outer
        self.folder = folder  # folds computed constants of the main graph (adapters.folding)
        # value name -> ValueInfoProto / TensorProto from shape inference, or (elem_type, dims) for new values
        self.types = types
        self.touched = touched if touched is not None else set()  # inputs of rewritten nodes
        self.initializers = {t.name: t for t in graph.initializer}
        self.new_initializers: list["onnx.TensorProto"] = []
        self._producers: dict | None = None  # built on first use: most adaptations never need it
        self._names: set[str] | None = None
        self._consumed: set[str] | None = None
        self._value_types: dict[str, tuple] = {}
        self._counter = itertools.count()
        self._consts: dict[str, Any] = {}
        self._shared: dict[tuple, str] = {}

    @property
    def producers(self) -> dict:
        if self._producers is None:
            self._producers = {o: n for n in self.graph.node for o in n.output if o}
        return self._producers

    @property
    def names(self) -> set[str]:
        if self._names is None:
            self._names = {*self.initializers, *self.producers, *(i.name for i in self.graph.input)}
        return self._names

    def unused(self, name: str) -> bool:
        """True when nothing reads ``name``: no node here or in a subgraph, and no graph output."""
        if self._consumed is None:
            self._consumed = read_names(self.graph) | {o.name for o in self.graph.output}
        return name not in self._consumed and (self.outer is None or self.outer.unused(name))

    # reading ---------------------------------------------------------------------------------
    def const(self, name: str) -> "np.ndarray | None":
        """The value of ``name`` when it is an initializer or a Constant node's output, else None."""
        import onnx
        from onnx import numpy_helper

        if not name:
            return None
        if name in self._consts:
            return self._consts[name]
        value = None
        if name in self.initializers and not _is_graph_input(self.graph, name):
            t = self.initializers[name]
            if t.data_location != onnx.TensorProto.EXTERNAL:  # weights on disk are never folded
                value = numpy_helper.to_array(t)
        elif name in self.producers and self.producers[name].op_type == "Constant":
            node = self.producers[name]
            attr = node.attribute[0]
            value = _constant_value(onnx.helper.get_attribute_value(attr), attr.name)
        elif self.outer is not None and name not in self.names:
            value = self.outer.const(name)
        elif self.folder is not None:
            value = self.folder.value(name)
        self._consts[name] = value
        return value

    def require_const(self, node: "onnx.NodeProto", index: int, what: str) -> "np.ndarray | None":
        """Input ``index`` folded to a constant, or an UnsupportedError naming the node."""
        if index >= len(node.input) or not node.input[index]:
            return None
        value = self.const(node.input[index])
        if value is None:
            raise UnsupportedError(f"node '{node.name}' ({node.op_type}): its {what} input '{node.input[index]}' "
                                   "is computed at run time; an older opset needs it as a constant attribute")
        return value

    def _info(self, name: str) -> tuple[int, tuple | None] | None:
        t = self.types.get(name)
        if t is None or isinstance(t, tuple):
            return t
        if hasattr(t, "data_type"):  # TensorProto
            info = (t.data_type, tuple(t.dims))
        elif t.type.HasField("tensor_type"):
            tt = t.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                         for d in tt.shape.dim) if tt.HasField("shape") else None
            info = (tt.elem_type, dims)
        else:
            info = None
        if info is not None:
            self.types[name] = info
        return info

    def value_type(self, name: str) -> tuple[str | None, int | None]:
        """(kind, element type) of a value: kind is "seq"/"optional" for those, else None; None if unknown."""
        found = self._value_types.get(name)
        if found is None:
            t = self.types.get(name)
            if t is None:
                found = (None, None)
            elif isinstance(t, tuple):
                found = (None, t[0] or None)
            elif hasattr(t, "data_type"):
                found = (None, t.data_type or None)
            else:
                which = t.type.WhichOneof("value")
                kind = {"sequence_type": "seq", "optional_type": "optional"}.get(which)
                et = t.type.tensor_type.elem_type if which == "tensor_type" else None
                found = (kind, et or None)
            self._value_types[name] = found
        return found

    def kind(self, name: str) -> str | None:
        return self.value_type(name)[0]

    def elem_type(self, name: str) -> int | None:
        return self.value_type(name)[1]

    def shape(self, name: str) -> tuple | None:
        t = self._info(name)
        return t[1] if t else None

    def rank(self, name: str) -> int | None:
        dims = self.shape(name)
        return None if dims is None else len(dims)

    # writing ---------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        names = self.names
        while True:
            name = f"{base}__{next(self._counter)}"
            if name not in names:
                names.add(name)
                return name

    def constant(self, value: "np.ndarray", base: str) -> str:
        """An initializer holding ``value`` (shared with an equal one this adaptation made); its name."""
        import numpy as np
        from onnx import numpy_helper

        value = np.asarray(value)
        key = (value.dtype.str, value.shape, value.tobytes())
        root = self
        while root.outer is not None:  # share across subgraphs through the main graph
            root = root.outer
        name = root._shared.get(key)
        if name is None:
            name = root.fresh(base)
            root.new_initializers.append(numpy_helper.from_array(value, name))
            root._consts[name] = value
            root._shared[key] = name
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str] | None = None, *, name: str | None = None,
             like: str | None = None, **attrs) -> "onnx.NodeProto":
        """A new node; outputs get fresh names; ``like`` copies a value's type info to each output."""
        import onnx

        base = name or op
        outputs = outputs or [self.fresh(f"{base}_out")]
        node = onnx.helper.make_node(op, inputs, outputs, name=self.fresh(base), **attrs)
        if self._consumed is not None:
            self._consumed.update(inputs)
        if like is not None and self._info(like) is not None:
            for o in outputs:
                self.types.setdefault(o, self._info(like))
        return node


def _is_graph_input(graph, name: str) -> bool:
    return any(i.name == name for i in graph.input)


def _constant_value(value, attr: str) -> "np.ndarray":
    import numpy as np
    from onnx import numpy_helper

    if attr == "value":
        return numpy_helper.to_array(value)
    if attr in ("value_float", "value_int", "value_string"):
        return np.array(value, dtype={"value_float": np.float32, "value_int": np.int64}.get(attr, object))
    if attr in ("value_floats", "value_ints", "value_strings"):
        return np.array(list(value), dtype={"value_floats": np.float32, "value_ints": np.int64}.get(attr, object))
    raise UnsupportedError(f"Constant with '{attr}' cannot be folded")


def read_names(graph: "onnx.GraphProto") -> set[str]:
    """Every value name a node reads, in this graph and its subgraphs."""
    used: set[str] = set()
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            if attr.type in (5, 10):  # GRAPH, GRAPHS
                for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    used |= read_names(g)
    return used


def get_attr(node: "onnx.NodeProto", name: str, default: Any = None) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def set_attr(node: "onnx.NodeProto", name: str, value: Any) -> None:
    import onnx

    drop_attr(node, name)
    if isinstance(value, list) and value and all(type(v) is int for v in value):  # the common case, fast
        node.attribute.add(name=name, type=onnx.AttributeProto.INTS, ints=value)
    elif type(value) is int:
        node.attribute.add(name=name, type=onnx.AttributeProto.INT, i=value)
    else:
        node.attribute.append(onnx.helper.make_attribute(name, value))


def drop_attr(node: "onnx.NodeProto", *names: str) -> None:
    attrs = node.attribute
    for i in range(len(attrs) - 1, -1, -1):
        if attrs[i].name in names:
            del attrs[i]


def attr_to_input(node: "onnx.NodeProto", rw: Rewriter, attr: str, index: int, dtype, *, default: Any = None,
                  shape: tuple | None = None) -> None:
    """Move attribute ``attr`` (or ``default`` when absent; nothing when both are None) to input ``index``
    as a constant of ``dtype`` (reshaped to ``shape`` if given)."""
    import numpy as np

    value = default
    for i, a in enumerate(node.attribute):
        if a.name == attr:
            value = list(a.ints) if a.type == a.INTS else get_attr(node, attr)
            del node.attribute[i]
            break
    if value is not None:
        array = np.array(value, dtype)
        set_input(node, index, rw.constant(array.reshape(shape) if shape else array, f"{node.name}_{attr}"))


def drop_default(node: "onnx.NodeProto", name: str, default: Any, what: str, *, also: tuple = ()) -> None:
    """Drop attribute ``name`` when it holds ``default`` (or a value in ``also`` that means the same);
    refuse any other value: the older schema has no such attribute."""
    value = get_attr(node, name, default)
    if isinstance(value, bytes):
        value = value.decode()
    if value != default and value not in also:
        refuse(f"{name}={value!r} ({what}) has no older equivalent")
    drop_attr(node, name)


def set_input(node: "onnx.NodeProto", index: int, name: str) -> None:
    """Set input ``index``, padding skipped optional inputs with ''."""
    while len(node.input) <= index:
        node.input.append("")
    node.input[index] = name
    while node.input and not node.input[-1]:
        node.input.pop()


def refuse(message: str) -> None:
    """Raise the error a rewrite gives when a feature has no equivalent (the engine adds node and opset)."""
    raise UnsupportedError(message)
