"""The subgraphs of a ``.tflite`` file: which ones a signature runs, whether tf2onnx can convert their ops, and
the file re-rooted so that a signature's subgraph comes first.

A TFLite model is a list of subgraphs. Control flow lives in other subgraphs than the one that calls it: WHILE
names its cond and body subgraphs, IF its then and else branches, CALL_ONCE an initializer. A file with several
signatures also keeps each signature's graph in a subgraph of its own. tf2onnx 1.17 converts subgraph 0 as the
main graph and every other subgraph as a function its control-flow handlers (TFL_WHILE, TFL_IF) inline; a
signature whose subgraph is not 0 is converted from a copy of the file whose subgraphs are that one (first) and
those it reaches, with every subgraph index in the operators' options and signatures renumbered.
"""
from __future__ import annotations

from pathlib import Path

from onnxbridge.errors import BadInputError, UnsupportedError

# TFLite ops tf2onnx has no handler for, that a converter commonly emits: why, for the refusal
NO_HANDLER = {
    "CALL_ONCE": "it runs an initializer subgraph once (resource variables)",
    "VAR_HANDLE": "resource variables have no ONNX form",
    "READ_VARIABLE": "resource variables have no ONNX form",
    "ASSIGN_VARIABLE": "resource variables have no ONNX form",
    "CALL": "a call of another subgraph",
}


def _schema():
    from tensorflow.lite.python import schema_py_generated as schema

    return schema


def _op_names() -> dict[int, str]:
    ops = _schema().BuiltinOperator
    return {v: k for k, v in vars(ops).items() if not k.startswith("_") and isinstance(v, int)}


def _called(options) -> list[tuple[object, str, int]]:
    """(options, field, subgraph index) of every subgraph an operator's options name (``*SubgraphIndex``, CALL's
    ``subgraph``)."""
    if options is None:
        return []
    return [(options, k, v) for k, v in vars(options).items()
            if isinstance(v, int) and (k.endswith("SubgraphIndex") or k == "subgraph")]


def _ints(values) -> list[int]:
    """A flatbuffer vector of indices (None, a list or a numpy array) as ints."""
    return [int(v) for v in values] if values is not None else []


class TFLiteGraphs:
    """A parsed ``.tflite`` file (the flatbuffer's object form; buffers are views of the file's bytes)."""

    def __init__(self, path: Path):
        schema = _schema()
        self.path = path
        self.model = schema.ModelT.InitFromPackedBuf(bytearray(path.read_bytes()), 0)
        names = _op_names()
        self.op_names = [names.get(max(c.builtinCode, c.deprecatedBuiltinCode), "UNKNOWN")
                         for c in self.model.operatorCodes or []]
        self.custom = {i for i, c in enumerate(self.model.operatorCodes or [])
                       if max(c.builtinCode, c.deprecatedBuiltinCode) == schema.BuiltinOperator.CUSTOM}

    def check_indices(self) -> None:
        """Refuse an index out of range: a signature's subgraph or tensors, a subgraph's inputs and outputs, an
        operator's code, tensors and called subgraphs, a tensor's buffer. The interpreter follows some of them
        unchecked (a signature naming subgraph 77 ends the process), so a crafted file stops here, before it runs."""
        model = self.model
        subgraphs, buffers = model.subgraphs or [], len(model.buffers or [])
        if not subgraphs:
            raise BadInputError(f"'{self.path.name}' is not a TFLite model: it has no subgraphs")
        for s in model.signatureDefs or []:
            where = f"signature '{(s.signatureKey or b'').decode('utf-8', 'replace')}'"
            self._in_range(s.subgraphIndex, len(subgraphs), f"{where} runs subgraph", "subgraphs")
            tensors = len(subgraphs[s.subgraphIndex].tensors or [])
            for t in [*(s.inputs or []), *(s.outputs or [])]:
                self._in_range(t.tensorIndex, tensors, f"{where} names tensor", "tensors in its subgraph")
        for n, graph in enumerate(subgraphs):
            tensors = len(graph.tensors or [])
            for t in graph.tensors or []:
                self._in_range(t.buffer, buffers, f"subgraph {n} keeps a tensor in buffer", "buffers")
            for i in [*_ints(graph.inputs), *_ints(graph.outputs)]:
                self._in_range(i, tensors, f"subgraph {n} names tensor", "tensors")
            for op in graph.operators or []:
                self._in_range(op.opcodeIndex, len(self.op_names), f"subgraph {n} uses operator code", "codes")
                for i in [*_ints(op.inputs), *_ints(op.outputs), *_ints(op.intermediates)]:
                    if i != -1:  # an optional input left out
                        self._in_range(i, tensors, f"an operator in subgraph {n} names tensor", "tensors")
                for _, _, called in [*_called(op.builtinOptions), *_called(getattr(op, "builtinOptions2", None))]:
                    self._in_range(called, len(subgraphs), f"an operator in subgraph {n} calls subgraph", "subgraphs")

    def _in_range(self, index: int, count: int, what: str, of: str) -> None:
        if not 0 <= index < count:
            raise BadInputError(f"'{self.path.name}' is damaged: {what} {index}; it has {count} {of}")

    def signatures(self) -> list[str]:
        """The signature keys, in the file's order."""
        return [(s.signatureKey or b"").decode("utf-8", "replace") for s in self.model.signatureDefs or []]

    def signature_subgraph(self, key: str | None) -> int:
        """The subgraph index the signature ``key`` runs (0 without signatures)."""
        for s in self.model.signatureDefs or []:
            if key is not None and (s.signatureKey or b"").decode() == key:
                return s.subgraphIndex
        return 0

    def _operators(self, index: int):
        for op in self.model.subgraphs[index].operators or []:
            yield op, [*_called(op.builtinOptions), *_called(getattr(op, "builtinOptions2", None))]

    def reachable(self, root: int) -> list[int]:
        """``root`` and every subgraph its operators call, transitively; ``root`` first, then in discovery order."""
        order, stack = [], [root]
        count = len(self.model.subgraphs or [])
        while stack:
            index = stack.pop(0)
            if index in order:
                continue
            if not 0 <= index < count:
                raise UnsupportedError(f"'{self.path.name}' calls subgraph {index}; it has {count}")
            order.append(index)
            for _, called in self._operators(index):
                stack += [i for _, _, i in called]
        return order

    def check_ops(self, subgraphs: list[int]) -> None:
        """Refuse builtin ops in ``subgraphs`` that tf2onnx has no TFLite handler for, naming them."""
        import tf2onnx.tfonnx  # noqa: F401 - the TFLite handlers register when it loads
        from tf2onnx import handler

        supported = {name for by_version in handler.tf_op.get_opsets().values() for ops in by_version
                     for name in ops if name.startswith("TFL_")}
        missing: dict[str, int] = {}
        for index in subgraphs:
            for op, _ in self._operators(index):
                code = op.opcodeIndex
                name = self.op_names[code] if code < len(self.op_names) else "UNKNOWN"
                if code not in self.custom and f"TFL_{name}" not in supported:
                    missing[name] = missing.get(name, 0) + 1
        if missing:
            what = "; ".join(f"{op} x{n}" + (f" ({NO_HANDLER[op]})" if op in NO_HANDLER else "")
                             for op, n in sorted(missing.items()))
            raise UnsupportedError(f"tf2onnx has no conversion for TFLite op(s) in {self.path.name}: {what}",
                                   hint="convert the SavedModel or Keras model the .tflite was made from instead")

    def rerooted(self, root: int) -> bytes:
        """The file with subgraph ``root`` first and only the subgraphs it reaches, indices renumbered."""
        import flatbuffers

        if any((b.offset or 0) > 1 for b in self.model.buffers or []):
            raise UnsupportedError(f"'{self.path.name}' keeps its buffers after the flatbuffer (a > 2 GB "
                                   "TFLite file); only its first signature converts")
        keep = self.reachable(root)
        renumber = {old: new for new, old in enumerate(keep)}
        for index in keep:
            for op, called in self._operators(index):
                for options, field, old in called:
                    setattr(options, field, renumber[old])
        self.model.subgraphs = [self.model.subgraphs[i] for i in keep]
        signatures = [s for s in self.model.signatureDefs or [] if s.subgraphIndex in renumber]
        for s in signatures:
            s.subgraphIndex = renumber[s.subgraphIndex]
        self.model.signatureDefs = signatures
        builder = flatbuffers.Builder(1024)
        builder.Finish(self.model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())
