"""fp16 arithmetic in one onnxruntime session: a graph rewritten so every value an fp16 program stores is rounded
to fp16 between ops (Cast to fp16, Cast back), while each op computes as onnxruntime's fp32 kernel does.

Two uses, one rewrite (``rounded``):

- ``of_fp16_file`` (the artifact): an fp16 ONNX file with its fp16 values widened to fp32 after rounding. onnxruntime
  runs fp16 ops without CPU kernels in fp32 and drops its own casts between them, so an fp16 file run as-is hides
  overflow and rounding; this graph does not (a value beyond ±65504 becomes inf, as on fp16 hardware). The
  node-by-node ``fp16eval.Fp16Evaluator`` computes the same numbers at 3-20x the cost; it stays for control flow
  and for naming the node where a value left fp16's range.
- ``of_fp32_graph`` (the budget): an fp32 graph as an fp16 program would store it (inputs, weights and every float
  value rounded to fp16), the reference of what fp16 arithmetic alone costs a model: a reduced-precision hop is
  judged against this emulation's error rather than a fixed atol.

Casts narrowing fp32 to fp16 survive every onnxruntime optimization level (they lose precision, so its cast
elimination keeps them); ops that only move or select values (Reshape, Transpose, Gather, Relu, MaxPool...) get
no Casts after them: their outputs are already fp16 values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from onnxbridge.precision import FP16_MAX

if TYPE_CHECKING:
    import onnx

F32, F16 = 1, 10
# ops whose float outputs are some of their float inputs' values (or exact functions of one: Relu, Neg, Abs):
# no rounding needed after them when their inputs are fp16 values already
EXACT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Gather",
                   "GatherElements", "GatherND", "Concat", "Split", "Expand", "Tile", "MaxPool", "Relu", "Max", "Min",
                   "Where", "DepthToSpace", "SpaceToDepth", "Neg", "Abs", "Pad", "ReduceMax", "ReduceMin",
                   "GlobalMaxPool", "Dropout"})
CONTROL_FLOW = ("If", "Loop", "Scan")


class CannotEmulate(Exception):
    """The graph holds something this rewrite does not cover (fp16 inside control flow)."""


def of_fp16_file(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """``model`` (computing in fp16) with every fp16 value held in fp32 after rounding to fp16: the same numbers an
    fp16 program stores, computed by onnxruntime's fp32 kernels. Raises CannotEmulate for fp16 values inside
    control-flow bodies."""
    return rounded(model, F16)


def of_fp32_graph(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """``model`` (fp32) as an fp16 program would store it: inputs, weights and every float value rounded to fp16
    (weights and constants clamped to ±65504 first, as ``precision.to_fp16`` does; those an op takes only in fp32,
    e.g. Resize scales, left as they are; control-flow bodies unrounded)."""
    return rounded(model, F32)


def rounded(model: "onnx.ModelProto", kind: int) -> "onnx.ModelProto":
    """A copy of ``model`` with every value of element type ``kind`` (fp32 or fp16) rounded to fp16 where it is
    made, held in fp32 from there on. Weights stay where they are (external data is referenced, not read): the
    Casts after them are folded by onnxruntime when the session is made."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from onnxbridge.adapters import default_opset
    from onnxbridge.fp16eval import _value_types
    from onnxbridge.precision import _fp32_only_inputs

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    if kind == F16 and any(n.op_type in CONTROL_FLOW for n in g.node) and _fp16_in_bodies(g):
        raise CannotEmulate("fp16 values inside If/Loop/Scan bodies")
    types = _value_types(out)
    keep = _fp32_only_inputs(g, default_opset(out)) if kind == F32 else set()
    graph_outputs = {o.name: o for o in g.output}
    fresh = _namer(g)
    exact: set[str] = set()  # values holding fp16-representable numbers already
    renamed: dict[str, str] = {}  # value -> the name consumers read instead
    head: list = []

    bounds: list[str] = []  # the names of ±FP16_MAX, made on first use

    def round_pair(src: str, dst: str, name: str, clamp: bool = False) -> list:
        """Cast to fp16 and back; ``clamp``: constants clamped to fp16's range first, as ``precision.to_fp16``
        stores them (a -FLT_MAX mask stays -65504, not -inf)."""
        mid = fresh(f"{dst}__fp16")
        nodes = []
        if clamp:
            if not bounds:
                bounds.extend([fresh("fp16_lowest"), fresh("fp16_max")])
                g.initializer.extend([numpy_helper.from_array(np.array(-FP16_MAX, np.float32), bounds[0]),
                                      numpy_helper.from_array(np.array(FP16_MAX, np.float32), bounds[1])])
            clamped = fresh(f"{dst}__clamped")
            nodes.append(helper.make_node("Clip", [src, *bounds], [clamped], name=fresh(f"{name}__clamp")))
            src = clamped
        return nodes + [helper.make_node("Cast", [src], [mid], to=F16, name=fresh(f"{name}__round")),
                        helper.make_node("Cast", [mid], [dst], to=F32, name=fresh(f"{name}__widen"))]

    # weights: renamed, and the old name made by a Cast pair (fp32: rounded) or a Cast (fp16: widened)
    for t in list(g.initializer):  # a snapshot: the clamp bounds are added on the way
        if t.data_type != kind or t.name in keep:
            continue
        stored = fresh(f"{t.name}__stored")
        old = t.name
        t.name = stored
        if kind == F32:
            head += round_pair(stored, old, old, clamp=True)
        else:
            head.append(helper.make_node("Cast", [stored], [old], to=F32, name=fresh(f"{old}__widen")))
        exact.add(old)
    for i in g.input:  # graph inputs keep their names and types; consumers read a rounded (or widened) copy
        if i.type.tensor_type.elem_type != kind or i.name in keep or any(t.name == i.name for t in g.initializer):
            continue
        copy = fresh(f"{i.name}__rounded")
        head += round_pair(i.name, copy, i.name)
        renamed[i.name] = copy
        exact.add(i.name)
    body: list = []
    for node in g.node:
        node.input[:] = [renamed.get(n, n) for n in node.input]
        made = [o for o in node.output if o and types.get(o) == kind and o not in keep]
        reads = [n for n in node.input if n]
        if node.op_type in EXACT and made and all(n in exact or types.get(n) != kind for n in reads) and \
                not (node.op_type == "Pad" and _pad_mode(node) != "constant"):
            body.append(node)
            exact.update(made)
            continue
        after = []
        for o in made:
            raw = fresh(f"{o}__raw")
            node.output[:] = [raw if x == o else x for x in node.output]
            if kind == F16 and o in graph_outputs:  # an fp16 graph output stays fp16; consumers read it widened
                wide = fresh(f"{o}__wide")
                after += [helper.make_node("Cast", [raw], [o], to=F16, name=fresh(f"{o}__round")),
                          helper.make_node("Cast", [o], [wide], to=F32, name=fresh(f"{o}__widen"))]
                renamed[o] = wide
            else:
                after += round_pair(raw, o, node.name or o, clamp=kind == F32 and node.op_type == "Constant")
            exact.add(o)
        body.append(node)
        body += after
    if kind == F16:  # fp16 graph outputs made by exact ops from widened values: cast back to fp16 at the end
        for name, vi in graph_outputs.items():
            if vi.type.tensor_type.elem_type == F16 and name in exact and name not in renamed \
                    and not any(t.name == name for t in g.initializer):
                inner = fresh(f"{name}__wide")
                for n in body:
                    n.output[:] = [inner if x == name else x for x in n.output]
                    n.input[:] = [inner if x == name else x for x in n.input]
                body.append(helper.make_node("Cast", [inner], [name], to=F16, name=fresh(f"{name}__round")))
    del g.node[:]
    g.node.extend([*head, *body])
    del g.value_info[:]  # types changed (fp16 values are fp32 now): onnxruntime infers them
    return out


def _fp16_in_bodies(graph: "onnx.GraphProto") -> bool:
    """Whether an If/Loop/Scan body (at any depth) holds or makes fp16 values."""
    import onnx

    from onnxbridge.fp16eval import computes_in_fp16
    from onnxbridge.modelwalk import graphs

    return any(computes_in_fp16(onnx.helper.make_model(body)) for body in graphs(graph) if body is not graph)


def _pad_mode(node: "onnx.NodeProto") -> str:
    return next((a.s.decode() for a in node.attribute if a.name == "mode"), "constant")


def _namer(graph: "onnx.GraphProto"):
    """Fresh value/node names that clash with nothing in ``graph``."""
    used = {t.name for t in graph.initializer} | {i.name for i in graph.input} | {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        used.update(node.output)
        used.add(node.name)

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        return name

    return fresh
