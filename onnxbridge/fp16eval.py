"""fp16 arithmetic for validation: an ONNX model run one node at a time, every value between nodes a real fp16 array.

onnxruntime's CPU provider has no fp16 kernel for many ops: it runs them in fp32 between inserted Casts and then
removes the Casts between consecutive such ops, so a chain like Mul -> Relu -> Div computes in fp32 and an
intermediate that overflows fp16 never becomes inf (it also folds away any Cast or Identity placed to stop it,
with graph optimizations off). A validation on such a session says "passed" for a model that overflows on fp16
hardware.

``Fp16Evaluator`` gives each node a session of its own whose inputs and outputs are the graph's values at their
declared types: every fp16 value is stored as fp16 (rounded to nearest even, ±inf beyond ±65504) before the next
op reads it, which is what fp16 hardware does. Inside one op, onnxruntime computes as its CPU kernel does (fp32 for
most fp16 ops, then one rounding), like fp16 units that accumulate in fp32. Control-flow bodies (If, Loop, Scan)
run inside their node's session, where onnxruntime's own precision applies; the runner says so.

It also finds where the range was left: the first node that turns finite inputs into inf or NaN.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import numpy as np
    import onnx

F16 = 10
CONTROL_FLOW = ("If", "Loop", "Scan")


def computes_in_fp16(model: "onnx.ModelProto") -> bool:
    """True when fp16 appears anywhere a value can come from: a weight or constant, a graph input, output or
    recorded value, or a node that makes fp16 (``to``/``dtype`` attributes). Ops keep their inputs' type otherwise,
    so without any of these no node computes in fp16. Cheap: no shape inference."""
    import onnx

    from onnxbridge.modelwalk import iter_tensors

    if any(t.data_type == F16 for t in iter_tensors(model)):
        return True
    g = model.graph
    if any(v.type.tensor_type.elem_type == F16 for v in [*g.input, *g.output, *g.value_info]):
        return True

    def makes_fp16(graph: "onnx.GraphProto") -> bool:
        for node in graph.node:
            for attr in node.attribute:
                if attr.name in ("to", "dtype", "output_dtype") and attr.type == onnx.AttributeProto.INT \
                        and attr.i == F16:
                    return True
                if any(makes_fp16(sub) for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)):
                    return True
        return False

    return makes_fp16(g)


def _value_types(model: "onnx.ModelProto") -> dict[str, "onnx.TypeProto"]:
    """Element types of the graph's values: from shape inference, else what the model records."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - the types the model records are the fallback
        inferred = model
    g = inferred.graph
    return {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.value_info, *g.output]
            if v.type.HasField("tensor_type")}


def _free_names(graph: "onnx.GraphProto") -> set[str]:
    """Values a subgraph reads from the scopes around it."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                used |= _free_names(sub)
        defined.update(node.output)
    return used - defined


class Fp16Evaluator:
    """Runs ``model`` node by node in onnxruntime (CPU), each node's outputs stored at their ONNX types.

    ``model``: a path (external data next to it is read) or a ModelProto with its weights loaded.
    ``last_notes`` after a call: where a value first left fp16's range, if it did.
    """

    def __init__(self, model: "str | Path | onnx.ModelProto"):
        import numpy as np
        import onnx
        from onnx import numpy_helper

        from onnxbridge.onnxio import load_onnx

        proto = load_onnx(model, load_external_data=True) if isinstance(model, (str, Path)) else model
        types = _value_types(proto)
        g = proto.graph
        self.constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.inputs = [i.name for i in g.input if i.name not in self.constants]
        self.outputs = [o.name for o in g.output]
        opsets = list(proto.opset_import)
        self.steps: list[tuple] = []
        self.control_flow = sorted({n.op_type for n in g.node if n.op_type in CONTROL_FLOW})
        uses: dict[str, int] = {}
        for index, node in enumerate(g.node):
            for name in self._reads(node):
                uses[name] = index
        for index, node in enumerate(g.node):
            if node.op_type == "Constant" and not node.input:
                self.steps.append((node, None, [], list(node.output), self._constant(node)))
                continue
            reads = [n for n in self._reads(node) if n not in self.constants]
            inits = [self.constants[n] for n in self._reads(node) if n in self.constants]
            graph = onnx.helper.make_graph(
                [node], node.name or node.op_type,
                [self._info(n, types) for n in reads],
                [self._info(n, types) for n in node.output if n],
                [numpy_helper.from_array(a, n) for n, a in zip((n for n in self._reads(node) if n in self.constants),
                                                               inits)])
            single = onnx.helper.make_model(graph, opset_imports=opsets, ir_version=proto.ir_version)
            single.functions.extend(proto.functions)
            self.steps.append((node, self._session(single), reads, [n for n in node.output if n], None))
        # values no later step reads can be dropped as soon as they are made (graph outputs are kept)
        keep = set(self.outputs)
        self.last_use = {name: index for name, index in uses.items() if name not in keep}
        self.fp16 = {name for name, t in types.items() if t == F16}
        self.last_notes: list[str] = []
        # the sessions hold the weights now: keep only what the range check and the outputs need of them
        self.nonfinite_constants = {n for n, a in self.constants.items() if a.dtype.kind == "f"
                                    and not np.isfinite(a).all()}
        self.constants = {n: a for n, a in self.constants.items() if n in keep}

    @staticmethod
    def _reads(node: "onnx.NodeProto") -> list[str]:
        names = [n for n in node.input if n]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                names += sorted(_free_names(sub))
        return list(dict.fromkeys(names))

    @staticmethod
    def _info(name: str, types: dict) -> "onnx.ValueInfoProto":
        import onnx

        return onnx.helper.make_tensor_value_info(name, types.get(name, onnx.TensorProto.UNDEFINED), None)

    @staticmethod
    def _constant(node: "onnx.NodeProto") -> list:
        import onnx
        import onnx.reference

        return [onnx.reference.ReferenceEvaluator(onnx.helper.make_model(onnx.helper.make_graph(
            [node], "constant", [], [onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.UNDEFINED,
                                                                         None)]))).run(None, {})[0]]

    @staticmethod
    def _session(model: "onnx.ModelProto"):
        import onnxruntime as ort

        from onnxbridge.errors import UnsupportedError

        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            node = model.graph.node[0]
            raise UnsupportedError(f"onnxruntime cannot run node '{node.name}' ({node.op_type}) on its own for the "
                                   f"fp16 check: {' '.join(str(exc).split())[:300]}") from None

    def __call__(self, feeds: Mapping[str, Any]) -> list["np.ndarray"]:
        import numpy as np

        env: dict[str, Any] = {n: np.require(feeds[n], requirements="C") for n in self.inputs}
        self.last_notes = []
        for index, (node, sess, reads, writes, fixed) in enumerate(self.steps):
            values = fixed if sess is None else sess.run(None, {n: env[n] for n in reads})
            for name, value in zip(writes, values):
                env[name] = value
            if not self.last_notes:
                self._check_range(node, reads, writes, env)
            for name in reads:
                if self.last_use.get(name) == index:
                    env.pop(name, None)
        return [env[n] if n in env else self.constants[n] for n in self.outputs]

    def _check_range(self, node, reads: list[str], writes: list[str], env: dict) -> None:
        """Note the first node whose fp16 output is inf or NaN while its float inputs are finite."""
        import numpy as np

        bad = [n for n in writes if n in self.fp16 and isinstance(env.get(n), np.ndarray)
               and not np.isfinite(env[n]).all()]
        if not bad:
            return
        if any(n in self.nonfinite_constants for n in node.input):
            return
        inputs = [env.get(n) for n in reads]
        if any(isinstance(a, np.ndarray) and a.dtype.kind == "f" and not np.isfinite(a).all() for a in inputs):
            return
        value = env[bad[0]]
        what = "inf" if np.isinf(value).any() else "NaN"
        self.last_notes.append(
            f"fp16: node '{node.name}' ({node.op_type}) made {what} in '{bad[0]}' from finite inputs: the intermediate "
            f"left fp16's range (|x| > 65504)" if what == "inf" else
            f"fp16: node '{node.name}' ({node.op_type}) made NaN in '{bad[0]}' from finite inputs")
