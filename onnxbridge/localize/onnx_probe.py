"""ONNX models as localization probes: onnxruntime on prefix models cut at the asked tensors.

``OnnxProbe`` shows a model's intermediate tensors by cutting it: the prefix model keeps the nodes (and only the
initializers) that produce the asked tensors and makes those its outputs, so a run holds what that prefix needs,
never every intermediate. Prefixes run in the worker (``onnxbridge.runtime.Session``): a model that computes in
fp16 runs node by node with every intermediate stored in fp16, as on fp16 hardware. Models with external data are
read from their path; each prefix loads the weights it keeps.

``onnx_checkpoints`` lists a graph's float tensors in topological order, ``match_tensors`` pairs two graphs'
tensors (by name, else by graph position: the opset adapters rename and insert nodes), and
``localize_onnx_pair`` localizes an ONNX -> ONNX hop (``validate a.onnx b.onnx``, the adapters' hop).
"""
from __future__ import annotations

import heapq
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from onnxbridge.localize.probe import Checkpoint

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from onnxbridge.specs import Sample
    from onnxbridge.validation import Tolerance

FLOAT_TYPES = (1, 10, 11, 16)  # float, float16, double, bfloat16
UNDEFINED = 0
NOT_A_TENSOR = -1


def _skeleton(model: "str | Path | onnx.ModelProto") -> tuple["onnx.ModelProto", Path | None]:
    """The model (a path's external weights left on disk) and the folder its external data lives in."""
    from onnxbridge.onnxio import load_onnx

    if isinstance(model, (str, Path)):
        return load_onnx(model), Path(model).resolve().parent
    return model, None


SMALL_INITIALIZER = 1024  # bytes: initializers up to this size keep their values for shape inference


def _weightless(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """A copy for shape inference: small initializers (shapes, axes, scalars: what inference reads the values of)
    kept whole, the others declared as graph inputs of their type and dims (an initializer with dims but no data
    fails inference at the first node that reads its values, e.g. a Reshape's shape, and every node after it is
    left without a type)."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto(ir_version=model.ir_version)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g = out.graph
    g.name = model.graph.name
    for field in ("node", "input", "output", "value_info"):
        getattr(g, field).extend(getattr(model.graph, field))
    declared = {i.name for i in g.input}
    for t in model.graph.initializer:
        external = t.data_location == onnx.TensorProto.EXTERNAL
        if not external and t.ByteSize() <= SMALL_INITIALIZER:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return out


# element types of node outputs that shape inference left unknown: ops whose output type is fixed, else the first
# typed input's (most ops keep their inputs' type)
INT64_OPS = {"Shape", "Size", "NonZero", "ArgMax", "ArgMin"}
BOOL_OPS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN",
            "IsInf"}


def _propagate_types(model: "onnx.ModelProto", out: dict[str, tuple[int, tuple | None]]) -> None:
    """Fill in ``out`` (name -> (element type, dims)) for node outputs inference gave no type, in topological
    order: Cast's ``to``, CastLike's target's type, fixed types (Shape: int64, Equal: bool, ...), else the type of
    the node's first typed input (for its first output only)."""
    g = model.graph
    for i in topological(g):
        node = g.node[i]
        for k, name in enumerate(node.output):
            if not name or out.get(name, (UNDEFINED, None))[0] != UNDEFINED:
                continue
            elem = UNDEFINED
            if node.op_type == "Cast":
                elem = next((a.i for a in node.attribute if a.name == "to"), UNDEFINED)
            elif node.op_type == "CastLike" and len(node.input) > 1:
                elem = out.get(node.input[1], (UNDEFINED, None))[0]
            elif node.op_type == "DequantizeLinear" and len(node.input) > 1:
                elem = out.get(node.input[1], (UNDEFINED, None))[0]  # the scale's type
            elif node.op_type == "QuantizeLinear":
                elem = out.get(node.input[2], (UNDEFINED, None))[0] if len(node.input) > 2 and node.input[2] else 2
            elif node.op_type in ("Constant", "ConstantOfShape"):
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                elem = value.data_type if value is not None else 1 if node.op_type == "ConstantOfShape" else UNDEFINED
            elif node.op_type in INT64_OPS:
                elem = 7
            elif node.op_type in BOOL_OPS:
                elem = 9
            elif k == 0:
                elem = next((out[r][0] for r in node.input if r and out.get(r, (UNDEFINED, None))[0] > 0),
                            UNDEFINED)
            if elem != UNDEFINED:
                out[name] = (elem, out.get(name, (UNDEFINED, None))[1])


def value_types(model: "onnx.ModelProto", shapes: Mapping[str, Sequence[int]] | None = None
                ) -> dict[str, tuple[int, tuple | None]]:
    """name -> (ONNX element type, dims or None) from shape inference (``shapes``: the graph inputs' shapes);
    values that are not tensors get ``NOT_A_TENSOR``."""
    import onnx

    light = _weightless(model)
    for vi in light.graph.input:
        if shapes and vi.name in shapes and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape
            dims.ClearField("dim")
            for d in shapes[vi.name]:
                dims.dim.add(dim_value=int(d))
    try:
        light = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - what the model records is the fallback
        pass
    out: dict[str, tuple[int, tuple | None]] = {}
    for vi in [*light.graph.input, *light.graph.value_info, *light.graph.output]:
        if not vi.type.HasField("tensor_type"):
            out[vi.name] = (NOT_A_TENSOR, None)  # sequences, maps, optionals: never checkpoints
            continue
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim) \
            if tt.HasField("shape") else None
        out[vi.name] = (tt.elem_type, None if dims is None or None in dims else dims)
    for t in model.graph.initializer:
        out.setdefault(t.name, (t.data_type, tuple(t.dims)))
    _propagate_types(model, out)
    return out


def _reads(node: "onnx.NodeProto") -> list[str]:
    from onnxbridge.fp16eval import Fp16Evaluator

    return Fp16Evaluator._reads(node)


def topological(graph: "onnx.GraphProto") -> list[int]:
    """Node indices in topological order (the file's order where it already is one)."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    waits = [0] * len(graph.node)
    users: dict[int, list[int]] = {}
    for i, node in enumerate(graph.node):
        deps = {producer[r] for r in _reads(node) if r in producer and producer[r] != i}
        waits[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, w in enumerate(waits) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            waits[u] -= 1
            if waits[u] == 0:
                heapq.heappush(ready, u)
    return order + [i for i in range(len(graph.node)) if waits[i] > 0]  # a cycle: left in file order


def _node_name(node: "onnx.NodeProto", index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def onnx_checkpoints(model: "str | Path | onnx.ModelProto") -> list[Checkpoint]:
    """Every node output that is a float tensor (or of unknown type), in topological order; Constant nodes'
    outputs are left out (nothing is computed there). ``inputs``: the node's inputs that are checkpoints or graph
    inputs."""
    proto, _ = _skeleton(model)
    g = proto.graph
    types = value_types(proto)
    initializers = {t.name for t in g.initializer}
    graph_inputs = {i.name for i in g.input if i.name not in initializers}
    seen: set[str] = set()
    out = []
    for i in topological(g):
        node = g.node[i]
        if node.op_type == "Constant":
            continue
        for name in node.output:
            if not name or types.get(name, (UNDEFINED, None))[0] not in (*FLOAT_TYPES, UNDEFINED):
                continue
            inputs = tuple(dict.fromkeys(r for r in node.input if r in seen or r in graph_inputs))
            out.append(Checkpoint(name, _node_name(node, i), node.op_type, inputs))
            seen.add(name)
    return out


def match_tensors(ref_model: "str | Path | onnx.ModelProto", cand_model: "str | Path | onnx.ModelProto"
                  ) -> dict[str, str]:
    """Reference node output -> candidate tensor: the same name where the candidate has it, else by graph position:
    in topological order, a reference node's match is the nearest candidate node of the same op type downstream
    (up to ``HOPS`` nodes) of the candidate tensors its inputs matched, so nodes an adapter renamed still pair up
    and the nodes it inserted (Transposes, Casts, Flattens) are stepped over. Graph inputs match by name, else by
    position."""
    ref, _ = _skeleton(ref_model)
    cand, _ = _skeleton(cand_model)
    rg, cg = ref.graph, cand.graph
    cand_made = {o: i for i, n in enumerate(cg.node) for o in n.output if o}
    mapping = {o: o for n in rg.node for o in n.output if o and o in cand_made}
    r_inits, c_inits = {t.name for t in rg.initializer}, {t.name for t in cg.initializer}
    r_in = [i.name for i in rg.input if i.name not in r_inits]
    c_in = [i.name for i in cg.input if i.name not in c_inits]
    tensors = dict(mapping)
    tensors.update({n: n for n in r_in if n in c_in} if any(n in c_in for n in r_in) else dict(zip(r_in, c_in)))
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(cg.node):
        for r in node.input:
            readers.setdefault(r, []).append(i)
    used = set(mapping.values())
    taken = {cand_made[c] for c in used}
    for i in topological(rg):
        node = rg.node[i]
        outs = [o for o in node.output if o and o not in mapping]
        starts = [tensors[r] for r in node.input if r in tensors and r not in r_inits]
        if not outs or not starts or node.op_type == "Constant":
            continue
        found = _downstream(cg, readers, starts, node.op_type, taken)
        if found is None:
            continue
        taken.add(found)
        for ro, co in zip(node.output, cg.node[found].output):
            if ro and co and ro not in mapping and co not in used:
                mapping[ro] = tensors[ro] = co
                used.add(co)
    return mapping


HOPS = 4  # nodes an adapter may insert between a matched tensor and the op that reads it


def _downstream(graph: "onnx.GraphProto", readers: Mapping[str, list[int]], starts: Sequence[str], op: str,
                taken: set[int]) -> int | None:
    """The nearest node of type ``op`` reading (through at most ``HOPS`` nodes) the tensors ``starts``."""
    frontier, seen = list(dict.fromkeys(starts)), set()
    for _ in range(HOPS + 1):
        nodes = sorted({j for t in frontier for j in readers.get(t, ()) if j not in seen})
        hits = [j for j in nodes if graph.node[j].op_type == op and j not in taken]
        if hits:
            return hits[0]
        seen.update(nodes)
        frontier = [o for j in nodes for o in graph.node[j].output if o]
        if not frontier:
            return None
    return None


def prefix_model(model: "onnx.ModelProto", outputs: Sequence[str],
                 types: Mapping[str, tuple[int, tuple | None]] | None = None) -> "onnx.ModelProto":
    """The part of ``model`` that computes ``outputs`` (node outputs), with those as its outputs: the nodes they
    depend on, the graph inputs and initializers those read; everything else dropped. External data references
    are kept as they are. ``types``: element types of the outputs (``value_types``); an output whose type shape
    inference could not tell is declared float (onnxruntime needs a type there)."""
    import onnx
    from onnx import helper

    g = model.graph
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    needed = set(outputs)
    keep: set[int] = set()
    stack = list(outputs)
    while stack:
        i = producer.get(stack.pop())
        if i is None or i in keep:
            continue
        keep.add(i)
        for r in _reads(g.node[i]):
            if r not in needed:
                needed.add(r)
                stack.append(r)
    types = types or {}
    known = {n: types.get(n, (UNDEFINED, None))[0] for n in outputs}
    outs = [helper.make_tensor_value_info(n, known[n] or onnx.TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph([g.node[i] for i in sorted(keep)], f"{g.name}_prefix",
                              [vi for vi in g.input if vi.name in needed], outs,
                              [t for t in g.initializer if t.name in needed])
    out = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    out.functions.extend(model.functions)
    return out


def prefix_session(model: bytes, base_dir: str | None = None, fp16: bool | None = None):
    """In the worker: an onnxruntime runner on a prefix model whose external weights (if any) are in
    ``base_dir``; fp16 prefixes run node by node (``onnxbridge.runtime.Session``)."""
    import onnx

    from onnxbridge.runtime import Session

    if base_dir is not None:
        proto = onnx.load_from_string(model)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
            onnx.load_external_data_for_model(proto, base_dir)
            model = proto.SerializeToString()
    return Session(model, fp16=fp16)


class OnnxProbe:
    """An ONNX model as a ``Probe``: each call runs the prefix model that ends at the asked tensors.

    ``model``: a path (external data read from its folder, only what a prefix keeps) or a ModelProto. ``fp16``:
    run node by node with fp16 intermediates (default: when the model computes in fp16). ``rename``: the names the
    caller asks by -> this model's tensor names (the reference graph's names for a candidate). ``emulate``: show
    the fp16 emulation of this fp32 model instead (``emulation.of_fp32_graph``: every float value rounded to fp16
    where it is made, under its own name), the yardstick of a hop judged by the fp16-emulation rule. ``base_dir``:
    where a ModelProto's external data lives. Between calls it keeps only the runner of the last prefix (the
    samples of one step share it).
    """

    def __init__(self, model: "str | Path | onnx.ModelProto", *, fp16: bool | None = None,
                 rename: Mapping[str, str] | None = None, emulate: bool = False, base_dir: Path | None = None,
                 label: str | None = None):
        import onnxruntime as ort

        from onnxbridge.fp16eval import computes_in_fp16

        self.model, self.base_dir = _skeleton(model)
        self.base_dir = self.base_dir or base_dir
        label = label or (Path(model).name if isinstance(model, (str, Path)) else "the model")
        if emulate:
            from onnxbridge.emulation import of_fp32_graph

            self.model, fp16 = of_fp32_graph(self.model), False
            label = f"the fp16 emulation of {label}"
        self.fp16 = computes_in_fp16(self.model) if fp16 is None else fp16
        self.rename = dict(rename or {})
        self.what = (f"onnxruntime {ort.__version__} CPU on prefix models of {label}"
                     + (", node by node with fp16 intermediates" if self.fp16 else ""))
        self.runs = 0
        initializers = {t.name for t in self.model.graph.initializer}
        self.input_names = [i.name for i in self.model.graph.input if i.name not in initializers]
        self._types = value_types(self.model)
        self._shaped: tuple[tuple, dict] | None = None
        self._key: tuple | None = None
        self._runner = None

    def tensors(self, names: Sequence[str], feeds: Mapping[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        """Run the prefix ending at ``names`` once on ``feeds``; those tensors by the asked names."""
        import numpy as np

        from onnxbridge.runtime import match_feeds

        self.runs += 1
        feeds = match_feeds(self.input_names, feeds)
        own = {n: self.rename.get(n, n) for n in dict.fromkeys(names)}
        values = {o: np.asarray(feeds[o]) for o in own.values() if o in feeds}
        wanted = [o for o in dict.fromkeys(own.values()) if o not in values]
        if wanted:
            runner = self._prefix(tuple(wanted))
            taken = {s.name: feeds[s.name] for s in runner.input_specs if s.name in feeds}
            values.update(zip(runner.output_names, runner(taken)))
        return {n: values[o] for n, o in own.items() if o in values}

    def _prefix(self, outputs: tuple[str, ...]):
        from onnxbridge.registry import dist_version
        from onnxbridge.worker import RunnerSpec, open_runner

        if self._key != outputs:
            self._runner = None  # the previous prefix's session is freed before the next is made
            prefix = prefix_model(self.model, outputs, self._types).SerializeToString()
            spec = RunnerSpec("onnxbridge.localize.onnx_probe:prefix_session",
                              {"model": prefix, "base_dir": str(self.base_dir) if self.base_dir else None,
                               "fp16": self.fp16}, library=f"onnxruntime {dist_version('onnxruntime')}")
            self._runner = open_runner(spec, f"the prefix model ending at {len(outputs)} tensor(s)")
            self._key = outputs
        return self._runner

    def estimate_bytes(self, names: Sequence[str], feeds: Mapping[str, "np.ndarray"]) -> dict[str, int]:
        """Bytes of each tensor at ``feeds``' shapes, from shape inference (tensors of unknown size left out)."""
        import numpy as np
        from onnx import helper

        shapes = tuple((k, tuple(np.shape(v))) for k, v in feeds.items())
        if self._shaped is None or self._shaped[0] != shapes:
            by_name = dict(zip(self.input_names, (s for _, s in shapes))) if not any(
                k in self.input_names for k, _ in shapes) else dict(shapes)
            self._shaped = (shapes, value_types(self.model, by_name))
        out = {}
        for n in names:
            et, dims = self._shaped[1].get(self.rename.get(n, n), (UNDEFINED, None))
            if dims is not None and et != UNDEFINED:
                out[n] = int(np.prod(dims, dtype=np.int64)) * np.dtype(helper.tensor_dtype_to_np_dtype(et)).itemsize
        return out

    def close(self) -> None:
        """Drop the last prefix's runner (the worker frees its session before its next call)."""
        self._runner, self._key = None, None


def emulation_probe(reference: OnnxProbe, tol: "Tolerance") -> OnnxProbe | None:
    """A probe of the fp16 emulation of the ``reference`` probe's model (asked by the same names), where ``tol``
    (the hop's) judges against it (rule "fp16-emulation") and that model is an fp32 graph; else None (checkpoints
    then take the elementwise tolerance)."""
    if tol.rule != "fp16-emulation" or reference.fp16:
        return None
    return OnnxProbe(reference.model, emulate=True, base_dir=reference.base_dir, label="the reference graph",
                     rename=reference.rename)


def made_by(model: "onnx.ModelProto") -> dict[str, str]:
    """Tensor -> the name of the node that makes it."""
    return {o: _node_name(n, i) for i, n in enumerate(model.graph.node) for o in n.output if o}


def localize_onnx_pair(reference: "str | Path | onnx.ModelProto", candidate: "str | Path | onnx.ModelProto",
                       samples: "Sequence[Sample]", tol: "Tolerance", *, budget_bytes: int = 256 * 2**20) -> dict:
    """The ``localization`` block for an ONNX -> ONNX hop: both models run as prefix models, the candidate's
    tensors matched to the reference's (``match_tensors``); ``source`` names the candidate's node."""
    from onnxbridge.localize.bisect import localize

    ref_probe, cand_probe = OnnxProbe(reference), OnnxProbe(candidate)
    emulation = emulation_probe(ref_probe, tol)
    mapping = match_tensors(ref_probe.model, cand_probe.model)
    cand_probe.rename = mapping
    made_by_cand = made_by(cand_probe.model)
    every = onnx_checkpoints(ref_probe.model)
    checkpoints = [Checkpoint(cp.tensor, cp.node, cp.op, cp.inputs, made_by_cand.get(mapping[cp.tensor]))
                   for cp in every if cp.tensor in mapping]
    by_name = sum(1 for cp in checkpoints if mapping[cp.tensor] == cp.tensor)
    method = (f"onnxruntime on prefix models of both graphs; {len(checkpoints)} of {len(every)} reference tensors "
              f"matched in the candidate ({by_name} by name, {len(checkpoints) - by_name} by graph position); "
              "source: the candidate's node")
    try:
        return localize(ref_probe, cand_probe, checkpoints, samples, tol, method=method, budget_bytes=budget_bytes,
                        emulation=emulation)
    finally:
        ref_probe.close()
        cand_probe.close()
        if emulation is not None:
            emulation.close()
