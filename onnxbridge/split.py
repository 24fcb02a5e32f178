"""``--split-tail``: an ONNX model cut in two where a backend stops taking it, as NPU deployments run detectors.

The head (every node the backend takes, up to the first one its own ``check`` refuses) becomes the backend's
artifact; the tail (each refused node and everything that depends on it) a small ONNX model that onnxruntime runs
beside it, fed the tensors at the cut. ``refused_nodes`` reads the nodes a backend's blockers name, ``cut`` makes the
two models, ``cut_file`` writes them (in the worker: shape inference is native code), ``Pipeline`` runs them as one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from onnxbridge.errors import UnsupportedError
from onnxbridge.modelwalk import subgraphs

if TYPE_CHECKING:
    import onnx

QUOTED = re.compile(r"'([^']+)'")
# ops whose value its inputs do not fix: never copied into the tail as a constant
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})
SHAPE_OPS = frozenset({"Shape", "Size"})  # what they compute depends on their input's shape only
TAIL_SUFFIX = ".tail.onnx"


def tail_path(output: Path) -> Path:
    """Where the tail goes beside ``output``: its name and ``.tail.onnx`` (``det.dlc`` -> ``det.dlc.tail.onnx``), so
    artifacts of two backends beside each other keep a tail each."""
    output = Path(output)
    return output.with_name(output.name + TAIL_SUFFIX)


def refused_nodes(blockers: Iterable[str], model: "onnx.ModelProto") -> tuple[dict[str, str], list[str]]:
    """The nodes of ``model`` that a backend's blockers name, each with the backend's reason (the part of the
    blocker that names it), and the blockers that name no node of ``model`` (no cut removes those). A blocker names a
    node by quoting its name, or the name of a tensor the node writes; a quoted node name is preferred."""
    graph = model.graph
    nodes = {n.name for n in graph.node if n.name}
    writer = {o: n.name for n in graph.node for o in n.output if o and n.name}
    found: dict[str, str] = {}
    unnamed = []
    for text in blockers:
        named = False
        for part in text.split("; "):
            tokens = QUOTED.findall(part)
            hits = [t for t in tokens if t in nodes] or [writer[t] for t in tokens if t in writer]
            for node in hits:
                found.setdefault(node, " ".join(part.split()))
            named = named or bool(hits)
        if not named:
            unnamed.append(text)
    return found, unnamed


def reads(node: "onnx.NodeProto") -> list[str]:
    """The tensors ``node`` reads: its inputs and what its subgraphs (If branches, Loop bodies) read from the
    enclosing graph."""
    names = [i for i in node.input if i]
    for g in subgraphs(node):
        names += _outer_reads(g)
    return names


def _outer_reads(graph: "onnx.GraphProto") -> list[str]:
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} | \
        {s.values.name for s in graph.sparse_initializer}
    out = []
    for node in graph.node:
        out += [n for n in reads(node) if n not in defined]
        defined.update(o for o in node.output if o)
    return out + [o.name for o in graph.output if o.name not in defined]


@dataclass
class Cut:
    """A model cut in two. ``first``: the first refused node in graph order (``node``, ``op``, the backend's
    ``reason``); ``tensors``: what the head hands the tail, in the order the tail first reads them; ``inputs``: the
    model inputs the tail reads itself; ``copied``: head nodes the tail computes again rather than take their values from the head
    (constants, shape arithmetic; a shape shape inference proves becomes a Constant); ``refused``: the
    nodes the backend refused, in graph order."""

    head: "onnx.ModelProto"
    tail: "onnx.ModelProto"
    first: dict
    tensors: list[str]
    inputs: list[str]
    refused: list[str]
    copied: int = 0
    ops: dict = field(default_factory=dict)  # the tail's ops, op -> count

    def facts(self) -> dict:
        """What the report says of the cut (``split`` in docs/report-schema.md, without the paths)."""
        return {"at": self.first, "tensors": self.tensors, "tail_inputs": self.inputs, "refused": self.refused,
                "head_nodes": len(self.head.graph.node), "tail_nodes": len(self.tail.graph.node),
                "tail_ops": self.ops, "head_outputs": [o.name for o in self.head.graph.output],
                "tail_outputs": [o.name for o in self.tail.graph.output]}


def cut(model: "onnx.ModelProto", refused: Mapping[str, str], types: Mapping[str, Any]) -> Cut:
    """``model`` cut before its refused nodes: the tail holds each refused node and every node that reads what one
    of them wrote (directly or down the graph); the head holds the rest that the model's outputs or the tail need.
    A value the tail needs that constants and tensor shapes determine (an initializer, a Constant, shape arithmetic:
    Shape, Gather, Concat... of them) is computed again in the tail, not handed over (backends fold such values away
    or keep them from their outputs; the DLC's QNN graph does): a Shape or Size of a tensor whose dims shape
    inference proves static becomes a Constant, others take the tensor whose shape they read. ``types``: tensor
    name -> TypeProto (from shape inference). UnsupportedError where the head would take nothing from the inputs,
    or a tensor at the cut has no known type."""
    import onnx

    g = model.graph
    order = list(g.node)
    inits = {t.name for t in g.initializer} | {s.values.name for s in g.sparse_initializer}
    inputs = [i for i in g.input if i.name not in inits]
    writer = {o: i for i, n in enumerate(order) for o in n.output if o}

    tail, tainted = set(), set()
    for i, node in enumerate(order):
        if node.name in refused or any(n in tainted for n in reads(node)):
            tail.add(i)
            tainted.update(o for o in node.output if o)
    if not tail:
        raise UnsupportedError(f"--split-tail: no node of the model is named {', '.join(map(repr, refused))}")

    constant, derived = set(inits), set(inits)  # from constants; from constants and tensor shapes
    for node in order:
        if node.op_type in RANDOM_OPS or subgraphs(node):
            continue
        if all(n in constant for n in reads(node)):
            constant.update(o for o in node.output if o)
        if node.op_type in SHAPE_OPS or all(n in derived for n in reads(node)):
            derived.update(o for o in node.output if o)

    copied: dict[int, "onnx.NodeProto"] = {}  # head nodes the tail computes again (a proven shape: a Constant)
    handed: dict[str, None] = {}  # the tensors at the cut, in the order first read
    from_inputs: dict[str, None] = {}
    input_names = {i.name for i in inputs}

    def need(name: str) -> None:
        at = writer.get(name)
        if at is None or at in tail or at in copied:
            if name in input_names:
                from_inputs[name] = None
            return
        node = order[at]
        if name not in derived:
            handed[name] = None
            return
        dims = _static_dims(types.get(node.input[0])) if node.op_type in SHAPE_OPS else None
        if dims is not None and name not in constant:  # a shape shape inference proves: a constant in the tail
            copied[at] = _folded(node, dims)
            return
        copied[at] = node  # shape arithmetic, constants: computed again in the tail, not handed over
        for n in reads(node):
            need(n)

    for i in sorted(tail):
        for name in reads(order[i]):
            need(name)
    outputs = [o.name for o in g.output]
    tail_outputs = [o for o in g.output if writer.get(o.name) in tail]
    head_wanted = [o for o in outputs if writer.get(o) not in tail] + \
        [t for t in handed if t not in outputs]

    # the head: the nodes outside the tail that its outputs need
    keep, stack = set(), [writer[n] for n in head_wanted if n in writer]
    while stack:
        i = stack.pop()
        if i in keep:
            continue
        keep.add(i)
        stack += [writer[n] for n in reads(order[i]) if n in writer and writer[n] not in tail]
    head_nodes = [order[i] for i in sorted(keep)]
    head_reads = {n for node in head_nodes for n in reads(node)} | set(head_wanted)
    head_inputs = [i for i in inputs if i.name in head_reads]
    first = min(tail, key=lambda i: (order[i].name not in refused, i))
    first_node = order[first]
    at = {"node": first_node.name, "op": first_node.op_type, "reason": refused.get(first_node.name, "")}
    if not head_nodes or not head_inputs:
        raise UnsupportedError(f"--split-tail: the backend takes nothing from the model's inputs before node "
                               f"'{first_node.name}' ({first_node.op_type}): {at['reason']}")

    def typed(name: str) -> "onnx.ValueInfoProto":
        given = next((o for o in g.output if o.name == name), None)
        if given is not None:
            return given
        t = types.get(name)
        if t is None or not t.tensor_type.elem_type or not t.tensor_type.HasField("shape"):
            raise UnsupportedError(f"--split-tail: the type or rank of tensor '{name}' at the cut is unknown (ONNX "
                                   "shape inference cannot tell it), so the head cannot declare it as an output")
        info = onnx.ValueInfoProto(name=name)
        info.type.CopyFrom(t)
        return info

    head_out = [typed(n) for n in head_wanted]
    handed_info = {n: typed(n) for n in handed}
    tail_nodes = [copied.get(i, order[i]) for i in sorted(tail | set(copied))]
    tail_inputs = [handed_info[n] for n in handed] + [i for i in inputs if i.name in from_inputs]
    known = {v.name: v for v in g.value_info}

    def side(nodes, ins, outs, name):
        read = {n for node in nodes for n in reads(node)} | {o.name for o in outs}
        made = {o for node in nodes for o in node.output}
        graph = onnx.helper.make_graph(
            nodes, name, ins, outs, [t for t in g.initializer if t.name in read],
            value_info=[v for n, v in known.items() if n in made and n not in {o.name for o in outs}],
            sparse_initializer=[s for s in g.sparse_initializer if s.values.name in read])
        return _model_like(model, graph)

    head = side(head_nodes, head_inputs, head_out, f"{g.name or 'model'}_head")
    tail_model = side(tail_nodes, tail_inputs, tail_outputs, f"{g.name or 'model'}_tail")
    ops: dict[str, int] = {}
    for node in tail_model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return Cut(head, tail_model, at, list(handed), list(from_inputs),
               [order[i].name for i in sorted(tail) if order[i].name in refused], len(copied), ops)


def _static_dims(t: Any) -> list[int] | None:
    """The dims of a tensor type when every one is known, else None."""
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims = t.tensor_type.shape.dim
    return [d.dim_value for d in dims] if all(d.HasField("dim_value") for d in dims) else None


def _folded(node: "onnx.NodeProto", dims: list[int]) -> "onnx.NodeProto":
    """A Shape or Size node as the Constant it computes on an input of static ``dims`` (Shape's start/end slice as
    ONNX clamps them, as Python slices do)."""
    import numpy as np
    from onnx import helper, numpy_helper

    if node.op_type == "Size":
        value = np.array(int(np.prod(dims, dtype=np.int64)), np.int64)
    else:
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), None)
        value = np.array(dims[start:end], np.int64)
    return helper.make_node("Constant", [], list(node.output), name=node.name,
                            value=numpy_helper.from_array(value, node.output[0]))


def _model_like(model: "onnx.ModelProto", graph: "onnx.GraphProto") -> "onnx.ModelProto":
    """A model holding ``graph`` with ``model``'s IR version, opsets, functions and metadata."""
    import onnx

    out = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                          producer_version=model.producer_version, domain=model.domain,
                          model_version=model.model_version, doc_string=model.doc_string)
    out.opset_import.extend(model.opset_import)
    out.metadata_props.extend(model.metadata_props)
    out.functions.extend(model.functions)
    out.graph.CopyFrom(graph)
    return out


def inferred_types(path: Path) -> dict:
    """Tensor name -> TypeProto for every value ONNX shape inference types in the model at ``path`` (its external
    weights stay on disk: inferred file to file, beside it)."""
    import onnx

    inferred = path.with_name(path.stem + ".inferred.onnx")
    try:
        onnx.shape_inference.infer_shapes_path(str(path), str(inferred), data_prop=True)
        graph = onnx.load(str(inferred), load_external_data=False).graph
    finally:
        inferred.unlink(missing_ok=True)
    return {v.name: v.type for v in [*graph.value_info, *graph.input, *graph.output]}


def cut_file(source: str, head: str, tail: str, refused: dict) -> dict:
    """The model at ``source`` cut before ``refused`` (node -> the backend's reason): the head written to ``head``,
    the tail to ``tail`` (each checked by the ONNX checker); returns ``Cut.facts()`` and the tail's external data
    files (``tail_files``). Runs in the worker."""
    from onnxbridge.builder import check_file
    from onnxbridge.onnxio import load_onnx, save_onnx

    model = load_onnx(source, load_external_data=True)
    made = cut(model, refused, inferred_types(Path(source)))
    del model
    save_onnx(made.head, head, check=check_file)
    files = save_onnx(made.tail, tail, check=check_file)
    return {**made.facts(), "tail_files": files}


class Reused:
    """``runner`` for two hops that run it on the same samples (the backend's on the head, then the pipeline): its
    outputs on a sample are computed once and given again to the second (the artifact's own numbers, not run twice
    on a slow simulator); ``fresh`` (latency figures) always runs it. Its other members are the runner's."""

    def __init__(self, runner):
        self._runner = runner
        self._done: dict[int, tuple] = {}  # id(feeds) -> (feeds, outputs, notes); the feeds kept: ids stay unique
        self.last_seconds: float | None = None
        self.last_notes: list | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        from onnxbridge.plugins import described

        done = self._done.get(id(feeds))
        if done is not None and done[0] is feeds:
            self.last_seconds, self.last_notes = None, done[2]  # nothing computed anew
            return done[1]
        outputs = self._runner(feeds)
        self.last_seconds = getattr(self._runner, "last_seconds", None)
        self.last_notes = described(self._runner).last_notes
        self._done[id(feeds)] = (feeds, outputs, self.last_notes)
        return outputs

    def fresh(self, feeds: Mapping[str, Any]) -> list:
        from onnxbridge.plugins import described

        return described(self._runner).fresh(feeds)


class Pipeline:
    """The head's runner feeding the tail's, as one runner (``onnxbridge.plugins.Runner``) with the whole model's
    inputs and outputs: the head runs on the model's inputs, the tail on the tensors at the cut (each given the
    dtype the tail declares: a backend that holds int64 as int32 hands it back so; ``casts`` says which) and the
    inputs it reads itself. What it says of itself is the head's (what it computes in, the shapes it takes), with
    both runtimes in ``what_ran``."""

    def __init__(self, head, tail, head_outputs: list[str], tail_inputs: Mapping[str, str],
                 tail_outputs: list[str], outputs: list[str], hop_name: str):
        from onnxbridge.plugins import described

        self.head, self.tail = head, tail
        self.head_outputs, self.tail_inputs = list(head_outputs), dict(tail_inputs)
        self.tail_outputs, self.output_names, self.hop_name = list(tail_outputs), list(outputs), hop_name
        said = described(head)
        self.compute_precision, self.emulation_factor = said.compute_precision, said.emulation_factor
        self.static_shapes, self.fp16 = said.static_shapes, said.fp16
        self.artifact_checked, self.artifact_check = said.artifact_checked, said.artifact_check
        self.what_ran = f"{said.what_ran or 'the head'} (head), then {described(tail).what_ran or 'onnxruntime'} (tail)"
        self.last_notes: list[str] = []
        self.last_seconds: float | None = None
        self.casts: list[str] = []  # the tensors the head handed over in another dtype than the tail declares

    @classmethod
    def of_files(cls, head, tail, head_path: Path, tail_path: Path, outputs: list[str],
                 hop_name: str) -> "Pipeline":
        """The pipeline of runners ``head`` and ``tail`` over the head and tail ONNX models at these paths."""
        import onnx
        from onnx.helper import tensor_dtype_to_np_dtype

        h = onnx.load(str(head_path), load_external_data=False).graph
        t = onnx.load(str(tail_path), load_external_data=False).graph
        inits = {i.name for i in t.initializer}
        declared = {i.name: str(tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in t.input
                    if i.name not in inits}
        return cls(head, tail, [o.name for o in h.output], declared, [o.name for o in t.output], outputs, hop_name)

    def _run(self, head, tail, feeds: Mapping[str, Any]) -> list:
        import numpy as np

        got = head(feeds)
        if len(got) != len(self.head_outputs):
            raise ValueError(f"the head gave {len(got)} outputs, its model declares {len(self.head_outputs)}")
        values = dict(zip(self.head_outputs, got))
        fed = {}
        for name, dtype in self.tail_inputs.items():
            value = np.asarray(values[name] if name in values else feeds[name])
            if value.dtype != np.dtype(dtype):
                cast = f"the head hands '{name}' over as {value.dtype}: fed to the tail as {dtype}"
                self.casts += [cast] if cast not in self.casts else []
                value = value.astype(dtype)
            fed[name] = value
        values.update(zip(self.tail_outputs, tail(fed)))
        self._said(head, tail)
        return [values[n] if n in values else np.asarray(feeds[n]) for n in self.output_names]

    def _said(self, head, tail) -> None:
        from onnxbridge.plugins import described

        self.last_notes = list(described(head).last_notes or ())
        seconds = [getattr(r, "last_seconds", None) for r in (head, tail)]
        self.last_seconds = sum(seconds) if all(s is not None for s in seconds) else None

    def __call__(self, feeds: Mapping[str, Any]) -> list:
        return self._run(self.head, self.tail, feeds)

    def fresh(self, feeds: Mapping[str, Any]) -> list:
        from onnxbridge.plugins import described

        return self._run(described(self.head).fresh, described(self.tail).fresh, feeds)
