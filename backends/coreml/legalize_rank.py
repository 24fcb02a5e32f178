"""Data movement through tensors of rank 6 and more, with sizes known or not before run time, rewritten within
Core ML's rank 5.

Window and patch partitions (Swin's ``x.view(B, H // w, w, W // w, w, C).permute(0, 1, 3, 2, 4, 5).reshape(...)``
in transformers, torchvision and timm) pad the image first, so the 6-D sizes are computed from shapes ONNX's shape
inference cannot follow, and the core rank rule (``onnxbridge.legalize.rank``, which needs them) leaves them alone;
other models scale a 6-D view before reshaping it back (RAFT's correlation volume: ``view`` to 6-D, divide, reshape).

The rule here matches from a final Reshape (rank <= 5) up to a Reshape to rank > 5 through single-use elementwise
ops whose other operands are one-element constants, and at most one Transpose; the chain becomes the elementwise ops
on the Reshape's input (they commute with reshapes and transposes), the Transpose done on the dims that stay
adjacent and in order under its permutation merged into one (a rank that the permutation alone decides, so no size
needs to be known; where more than five groups remain, as in Video Swin's 8-D windows, the permutation is done in
steps of rank 4, each moving one group forward), and the final Reshape. The merged sizes are products of the 6-D target's entries, computed in
the graph where they are not constants (Gather, Mul, Div: shape arithmetic the Core ML build folds, to numbers or to
flexible sizes), after resolving that target as ONNX does (a 0 copies the input's dim unless ``allowzero``, a -1
takes what is left; an entry computed at run time is the size it names); a 0 in the final target copies the dim of
the 6-D tensor it stood for. A Shape of a 6-D tensor (timm's patch merging flattens by it) is rewritten first, to
the same sizes, so the tensor can go. Every step is exact: the same elements move to the same places."""
from __future__ import annotations

import numpy as np
from onnx import helper

from onnxbridge.legalize import Graph, Match, Rule
from onnxbridge.legalize.common import Nodes, int_attr

# elementwise ops that commute with any reshape or transpose: unary, or binary with a one-element constant operand
UNARY = {"Abs", "Acos", "Asin", "Atan", "Cast", "Ceil", "Cos", "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu",
         "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu",
         "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater",
          "LessOrEqual", "GreaterOrEqual"}


def _onnx(node) -> bool:
    return node.domain in ("", "ai.onnx")


def _scalar_operand(graph: Graph, node, data: str) -> bool:
    """Whether every input of ``node`` but ``data`` is a one-element constant (Clip's bounds are scalars)."""
    others = [i for i in node.input if i and i != data]
    return all((v := graph.value(i)) is not None and v.size == 1 for i in others)


def _data_input(graph: Graph, node) -> str | None:
    """The input of an elementwise ``node`` that carries the tensor (the others constants of one element)."""
    if node.op_type in UNARY and len(node.input) == 1:
        return node.input[0]
    if node.op_type == "Clip" and _scalar_operand(graph, node, node.input[0]):
        return node.input[0]
    if node.op_type in BINARY and len(node.input) == 2:
        for i in (0, 1):
            if graph.value(node.input[i]) is None and _scalar_operand(graph, node, node.input[i]):
                return node.input[i]
    return None


def _target_rank(graph: Graph, reshape) -> int | None:
    """The rank a Reshape produces: the length of its target shape."""
    shape = graph.shape(reshape.input[1])
    if shape is not None and len(shape) == 1:
        return shape[0]
    values = graph.int_values(reshape.input[1])
    return None if values is None else len(values)


def _walk_up(graph: Graph, name: str, single_use: bool) -> list | None:
    """The nodes from the Reshape that makes the tensor reaching ``name`` through elementwise ops and Transposes,
    that Reshape first; None when ``name`` comes from anything else (or, with ``single_use``, a tensor on the way
    feeds another node too)."""
    nodes = []
    while True:
        node = graph.producer.get(name)
        if node is None or not _onnx(node) or (single_use and not graph.single_use(name)):
            return None
        nodes.append(node)
        if node.op_type == "Reshape":
            return nodes[::-1]
        name = node.input[0] if node.op_type == "Transpose" else _data_input(graph, node)
        if name is None:
            return None


def chain_pattern(graph: Graph, root) -> Match | None:
    """Reshape(e_k(... Transpose(... e_1(Reshape(x, to rank > 5))))): elementwise ops and at most one Transpose,
    each used only by the next."""
    if root.op_type != "Reshape" or not _onnx(root):
        return None
    nodes = _walk_up(graph, root.input[0], single_use=True)
    if nodes is None or sum(n.op_type == "Transpose" for n in nodes) > 1:
        return None
    return Match([*nodes, root], {"x": nodes[0].input[0]}, [root.output[0]])


def shape_pattern(graph: Graph, root) -> Match | None:
    """Shape(v) of a tensor ``v`` that elementwise ops and Transposes make from a Reshape (the Reshape's other
    users left as they are): its sizes are the Reshape's, permuted."""
    if root.op_type != "Shape" or not _onnx(root):
        return None
    nodes = _walk_up(graph, root.input[0], single_use=False)
    return None if nodes is None else Match([root], {"x": nodes[0].input[0]}, [root.output[0]])


def shape_condition(graph: Graph, match: Match, limit: int) -> bool:
    """A Reshape to a rank over ``limit`` whose input's rank is known."""
    inner = _walk_up(graph, match.nodes[0].input[0], single_use=False)[0]
    rank = _target_rank(graph, inner)
    t = graph.types.get(inner.input[0])
    return rank is not None and rank > limit and t is not None and t.HasField("shape")


def shape_replacement(graph: Graph, match: Match) -> list:
    """The resolved target's sizes in the order the Transposes put them, sliced as the Shape's start and end say
    (only the Shape is replaced: the nodes on the way stay for their other users)."""
    root = match.nodes[0]
    inner, *on_the_way = _walk_up(graph, root.input[0], single_use=False)
    nodes = Nodes(graph, root.name or "shape")
    order = list(range(_target_rank(graph, inner)))
    for node in on_the_way:
        if node.op_type == "Transpose":
            order = [order[p] for p in _perm(node, len(order))]
    picked = order[slice(int_attr(root, "start", 0), next((a.i for a in root.attribute if a.name == "end"), None))]
    sizes = _sizes(nodes, graph, inner)
    nodes("Identity", [_vector(nodes, [sizes[a] for a in picked])], root.output[0])
    return _used(nodes.nodes, root.output[0])


def _perm(transpose, rank: int) -> list[int]:
    perm = next((list(a.ints) for a in transpose.attribute if a.name == "perm"), None)
    return perm if perm is not None else list(range(rank))[::-1]


def runs(dims: list, perm: list[int]) -> tuple[list[list[int]], list[int]]:
    """The input axes that move together under ``perm`` (adjacent and in order; axes known to be of size 1 left
    out, as they move nothing), as runs in input order, and the permutation of the runs. ``dims`` holds ints, or
    None where a size is known only at run time."""
    kept = [a for a in perm if dims[a] != 1]
    out: list[list[int]] = []  # in output order
    for a in kept:
        prev = out[-1][-1] if out else None
        if prev is not None and a > prev and all(d == 1 for d in dims[prev + 1:a]):
            out[-1].append(a)
        else:
            out.append([a])
    order = sorted(range(len(out)), key=lambda r: out[r][0])
    return [out[r] for r in order], [order.index(r) for r in range(len(out))]


def _parts(nodes: list):
    """(inner Reshape, Transpose or None, the elementwise ops in order, final Reshape)."""
    inner, root = nodes[0], nodes[-1]
    transpose = next((n for n in nodes[1:-1] if n.op_type == "Transpose"), None)
    return inner, transpose, [n for n in nodes[1:-1] if n.op_type != "Transpose"], root


def rank_condition(graph: Graph, match: Match, limit: int) -> bool:
    """A target rank over ``limit`` and a final one within it, the input's rank known (a 0 in the target may copy its
    dims). Any Transpose: merged dims over ``limit`` move in steps of rank 4."""
    inner, transpose, _, root = _parts(match.nodes)
    rank, final = _target_rank(graph, inner), _target_rank(graph, root)
    if rank is None or final is None or rank <= limit or final > limit:
        return False
    if graph.types.get(inner.input[0]) is None or not graph.types[inner.input[0]].HasField("shape"):
        return False
    if transpose is None:
        return True
    dims = graph.int_values(inner.input[1]) or [None] * rank
    merged, _ = runs(dims, _perm(transpose, rank))
    return len(merged) >= 1 and limit >= 4  # over the limit: in steps of rank 4


def _sizes(nodes: Nodes, graph: Graph, inner) -> list:
    """The inner Reshape's output sizes, one entry per dim: an int where known, else the name of a [1] int64
    tensor computed from its target (Gather, Mul, Div: shape arithmetic the Core ML build folds, also on flexible
    sizes). As ONNX resolves the target: a 0 copies the input's size there (unless ``allowzero``), a -1 is what is
    left of the input's size; an entry computed at run time is the size it names."""
    target, x = inner.input[1], inner.input[0]
    rank = _target_rank(graph, inner)
    values = graph.int_values(target) or [None] * rank
    dims = [d.dim_value if d.HasField("dim_value") else None for d in graph.types[x].shape.dim]
    shape: list[str] = []

    def dim(i: int):  # the input's size i
        if dims[i] is not None:
            return dims[i]
        if not shape:
            shape.append(nodes("Shape", [x]))
        return _pick(nodes, shape[0], i)

    out: list = []
    for i, v in enumerate(values):
        if v is not None and v > 0:
            out.append(v)
        elif v == 0 and not int_attr(inner, "allowzero", 0):
            out.append(dim(i))
        elif v == -1:
            out.append(None)  # resolved below, from the others
        else:
            out.append(_pick(nodes, target, i))
    if None in out:
        others = _product(nodes, [e for e in out if e is not None])
        total = _product(nodes, [dim(i) for i in range(len(dims))])
        rest = total // others if isinstance(total, int) and isinstance(others, int) else nodes(
            "Div", [_tensor(nodes, total), _tensor(nodes, others)])
        out[out.index(None)] = rest
    return out


def _pick(nodes: Nodes, vector: str, i: int) -> str:
    """Element ``i`` of a 1-D integer tensor, as a [1] tensor."""
    return nodes("Gather", [vector, nodes.const("index", np.array([i], np.int64))], axis=0)


def _tensor(nodes: Nodes, entry) -> str:
    """An entry (int or [1] tensor name) as a tensor name."""
    return nodes.const("size", np.array([entry], np.int64)) if isinstance(entry, int) else entry


def _product(nodes: Nodes, entries: list):
    """The product of entries: an int when all are ints, else a [1] tensor (the ints folded into one factor)."""
    const = int(np.prod([e for e in entries if isinstance(e, int)], dtype=np.int64))
    tensors = [e for e in entries if not isinstance(e, int)]
    if not tensors:
        return const
    acc = tensors[0]
    for t in tensors[1:] + ([_tensor(nodes, const)] if const != 1 else []):
        acc = nodes("Mul", [acc, t])
    return acc


def _vector(nodes: Nodes, entries: list) -> str:
    """Entries as one 1-D int64 tensor (a constant when all are ints)."""
    if all(isinstance(e, int) for e in entries):
        return nodes.const("shape", np.array(entries, np.int64))
    parts = [_tensor(nodes, e) for e in entries]
    return parts[0] if len(parts) == 1 else nodes("Concat", parts, axis=0)


def _final_target(nodes: Nodes, graph: Graph, root, sizes, perm: list[int]) -> str:
    """The final Reshape's target; a known 0 in it (unless ``allowzero``) replaced by the 6-D size it copied: the
    Transpose's output dim there, i.e. size ``perm[i]`` of the inner Reshape's."""
    target = root.input[1]
    values = graph.int_values(target)
    if int_attr(root, "allowzero", 0) or values is None or 0 not in values:
        return target
    entries = [sizes()[perm[i]] if v == 0 else v if v is not None else _pick(nodes, target, i)
               for i, v in enumerate(values)]
    return _vector(nodes, entries)


def _elementwise(nodes: Nodes, graph: Graph, ops: list, x: str) -> str:
    """``ops`` re-applied in order on ``x``, each one-element constant operand as a 0-d one (so it broadcasts to
    any rank)."""
    for node in ops:
        data = _data_input(graph, node)
        moved = helper.make_node(node.op_type, [], [graph.fresh(f"{node.name or node.op_type}_moved")],
                                 name=graph.fresh(node.name or node.op_type), domain=node.domain)
        moved.attribute.extend(node.attribute)
        moved.input.extend(x if i == data else nodes.const("scalar", graph.value(i).reshape(())) if i else i
                           for i in node.input)
        nodes.nodes.append(moved)
        x = moved.output[0]
    return x


def merged_replacement(graph: Graph, match: Match, limit: int) -> list:
    """The elementwise ops on the input, the Transpose on merged dims (a Reshape to them first; more than ``limit``
    of them: in steps, ``_block_moves``), the final Reshape."""
    inner, transpose, ops, root = _parts(match.nodes)
    nodes = Nodes(graph, root.name or "rank_chain")
    x = _elementwise(nodes, graph, ops, match.inputs["x"])
    rank = _target_rank(graph, inner)
    known = [v if v is not None and v > 0 else None for v in (graph.int_values(inner.input[1]) or [None] * rank)]
    perm = _perm(transpose, rank) if transpose is not None else list(range(rank))
    resolved: list[list] = []

    def sizes() -> list:  # the 6-D sizes, built once and only when asked for
        if not resolved:
            resolved.append(_sizes(nodes, graph, inner))
        return resolved[0]

    if transpose is not None:
        groups, merged_perm = runs(known, perm)
        merged = [_product(nodes, [known[a] if known[a] is not None else sizes()[a] for a in run]) for run in groups]
        if len(merged) <= limit:
            x = nodes("Transpose", [nodes("Reshape", [x, _vector(nodes, merged)])], perm=merged_perm)
        else:
            x = _block_moves(nodes, x, merged, merged_perm)
    nodes("Reshape", [x, _final_target(nodes, graph, root, sizes, perm)], root.output[0])
    return _used(nodes.nodes, root.output[0])


def _block_moves(nodes: Nodes, x: str, sizes: list, perm: list[int]) -> str:
    """``x`` (of merged ``sizes``, flattened or not) transposed by ``perm`` in steps of rank 4: each brings the next
    group of the output order forward past the groups before it ([before, passed, moved, after] -> [before, moved,
    passed, after]), at most one step per group."""
    order = list(range(len(sizes)))
    for i, group in enumerate(perm):
        j = order.index(group)
        if j == i:
            continue
        blocks = [order[:i], order[i:j], [group], order[j + 1:]]
        dims = [_product(nodes, [sizes[g] for g in block]) for block in blocks]
        x = nodes("Transpose", [nodes("Reshape", [x, _vector(nodes, dims)])], perm=[0, 2, 1, 3])
        order = order[:i] + [group] + order[i:j] + order[j + 1:]
    return x


def _used(built: list, output: str) -> list:
    """The nodes of ``built`` that ``output`` depends on (entries computed but not needed are dropped)."""
    needed, kept = {output}, []
    for node in reversed(built):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    return kept[::-1]


def high_rank_shape_rule(limit: int) -> Rule:
    """The rule for rank <= ``limit``: the Shape of a tensor over it, from the sizes of the Reshape that made it (so
    that tensor may go: ``x.reshape(B, H // 2, 2, W // 2, 2, C).permute(...).flatten(3)`` reads its shape)."""
    return Rule(f"rank{limit + 1}-shape-from-reshape-target", shape_pattern,
                lambda graph, match: shape_condition(graph, match, limit), shape_replacement)


def high_rank_chain_rule(limit: int) -> Rule:
    """The rule for rank <= ``limit`` (at least 4): a Reshape over it, elementwise ops and a Transpose, a Reshape
    back, with sizes known or not."""
    return Rule(f"rank{limit + 1}-reshape-chain-to-rank{limit}", chain_pattern,
                lambda graph, match: rank_condition(graph, match, limit),
                lambda graph, match: merged_replacement(graph, match, limit))
