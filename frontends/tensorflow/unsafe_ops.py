"""TensorFlow operations that reach outside the process, and the static check of SavedModels and TFLite files.

A SavedModel is a program: loading it runs its resource initialisers and restore functions, and converting
it runs the chosen signature (tf2onnx even constant-folds it, so a file read with a constant path ends up
in the ONNX model). A TFLite custom operator is native code, and a Flex operator runs a TensorFlow kernel.
Without trust the files are parsed with TF's protobuf/flatbuffer classes, nothing is loaded or run, and
they are refused when something that would run is in ``why_denied``.

What "complete" means here. An operation can only reach a file, a host, a peer process or Python through
a name it is given (a string input or attribute: a path, an address, a URL, a Python token), through a
resource made by such an operation, or by being native code TF does not know. Every op registered in
TF 2.21 (1910 ops, ``TF_GetAllOpList``) with a string input or a string attribute that is not a mode was
reviewed; the ones that open, list, write, memory-map or delete files, talk to other hosts or devices
(send/recv, collectives, RPC, tf.data service, TPU), run Python, run a program embedded as a string
(MLIR, StableHLO, a serialized graph) or end the process are below, by name or by family (a prefix, so
that later versions of a family are covered too). Ops that are not registered at all are custom
kernels and refused. Pure string ops (``StringJoin``, ``ShardedFilename``, ``Print`` to stderr,
``DecodeProto`` with the built-in descriptors) are allowed.

What runs is followed exactly: the chosen signature's function and, for a TF2 SavedModel, what
``tf.saved_model.load`` itself runs (resource create/initialise/destroy functions, the save/restore
functions of saveable objects, registered objects' functions), recursively through every function
they call (``PartitionedCall`` and any other function-valued attribute: ``If``/``While``/``Case``
branches, dataset functions, gradients). The SavedModel's own checkpoint writer and reader
(``__inference__traced_save/restore``) are not run by the loader and are not checked; the variables are
restored by TF's Python checkpoint code. A TF1 SavedModel is checked whole: every node and function,
except its saver's own Save/Restore nodes where they cannot reach outside the model's variables folder: the
Restore nodes the restore op runs, reading the filename tensor the loader feeds with that folder, and the Save
nodes nothing runs at load. A Save or Restore node the init op or a signature reaches runs with the path the
graph itself holds (the filename tensor's default: any path the file chose), and is refused.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from onnxbridge.errors import TRUST_HINT, BadInputError, UnsafeInputError
from onnxbridge.frontends.tensorflow.signatures import choose_signature

_FILES = "reads or writes files"
_NETWORK = "talks to other devices, processes or hosts"
_GROUPS: dict[str, tuple[str, ...]] = {
    _FILES: (
        "ReadFile", "MatchingFiles", "ImmutableConst", "MergeV2Checkpoints", "DTensorRestoreV2", "LoadAndRemapMatrix",
        "GenerateVocabRemapping", "InitializeTableFromTextFile", "InitializeTableFromTextFileV2", "Skipgram",
        "RecordInput", "CalibrationStatisticsSaver", "DumpTensor", "FileSystemSetConfiguration",
        "CreateSummaryFileWriter", "CreateSummaryDbWriter", "ImportEvent", "FlushSummaryWriter", "CloseSummaryWriter",
        "StatsAggregatorSetSummaryWriter", "TFRecordDataset", "TFRecordDatasetV2", "TextLineDataset",
        "FixedLengthRecordDataset", "FixedLengthRecordDatasetV2", "CSVDataset", "CSVDatasetV2",
        "ExperimentalCSVDataset", "LMDBDataset", "ExperimentalLMDBDataset", "MatchingFilesDataset", "ExperimentalMatchingFilesDataset",
        "CacheDataset", "CacheDatasetV2", "SnapshotDataset", "SnapshotDatasetV2", "SnapshotChunkDataset",
        "ListSnapshotChunksDataset", "LoadDataset", "DatasetToTFRecord", "ExperimentalDatasetToTFRecord",
        "SqlDataset", "ExperimentalSqlDataset", "DistributedSave"),
    "writes debug dumps to files or gRPC URLs": (
        "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount", "DebugNumericSummary", "Copy",
        "CopyHost"),
    _NETWORK: (
        "Send", "Recv", "_Send", "_Recv", "_HostSend", "_HostRecv", "RemoteCall", "RegisterDataset",
        "RegisterDatasetV2", "WorkerHeartbeat", "DTensorAllGather", "DTensorAllReduce", "DTensorAllScatter",
        "DTensorAllToAll", "DTensorReduceScatter", "CopyToMesh", "CopyToMeshGrad", "XlaSendToHost", "XlaRecvFromHost",
        "XlaHostCompute", "_XlaSendFromHost", "_XlaSendFromHostV2", "_XlaRecvAtHost", "_XlaRecvAtHostV2"),
    "runs Python": ("PyFunc", "PyFuncStateless", "EagerPyFunc"),
    "runs a program embedded in the model": (
        "MlirPassthroughOp", "DatasetFromGraph", "XlaCallModule", "XlaCustomCall", "XlaCustomCallV2",
        "_XlaHostComputeMlir"),
    "ends the process": ("Abort",),
}
DENIED: dict[str, str] = {op: why for why, ops in _GROUPS.items() for op in ops}
PREFIXES: dict[str, str] = {"Save": _FILES, "Restore": _FILES, "Write": _FILES, "Reader": _FILES,
                            "Collective": _NETWORK, "Nccl": _NETWORK, "Rpc": _NETWORK, "DataService": _NETWORK}
READERS = ("Reader", "ReaderV2")  # WholeFileReader, TFRecordReaderV2, ...: they open the files they are fed
_STREAMS = {"stderr", "stdout", "log(info)", "log(warning)", "log(error)"}
# op -> (attribute, its default, whether a value is allowed, what other values do)
ATTR_RULES = {
    "PrintV2": ("output_stream", "stderr", lambda v: v in _STREAMS, "prints to a file"),
    "DecodeProtoV2": ("descriptor_source", "local://", lambda v: v == "local://" or v.startswith("bytes://"),
                      "reads a descriptor file"),
    "EncodeProto": ("descriptor_source", "local://", lambda v: v == "local://" or v.startswith("bytes://"),
                    "reads a descriptor file"),
    "FixedUnigramCandidateSampler": ("vocab_file", "", lambda v: not v, "reads a vocabulary file"),
}
# the TF1 saver's ops, allowed where their path input comes from the saver's filename tensor
SAVER_OPS = {"Save": (0,), "SaveV2": (0,), "SaveSlices": (0,), "Restore": (0,), "RestoreV2": (0,),
             "RestoreSlice": (0,), "MergeV2Checkpoints": (0, 1)}
_PATH_OPS = {"Identity", "StringJoin", "ShardedFilename", "ShardedFilespec", "Pack", "Const", "Select",
             "StaticRegexFullMatch"}


def why_denied(op: str, attrs: Mapping[str, Any] | None = None) -> str | None:
    """Why the TF op ``op`` (with these NodeDef attributes) may not run untrusted, or None when it may."""
    from tensorflow.python.framework import op_def_registry

    if op in DENIED:
        return DENIED[op]
    family = next((why for prefix, why in PREFIXES.items() if op.startswith(prefix)), None)
    if family or op.endswith(READERS):
        return family or _FILES
    if "TPU" in op:
        return "drives TPU hardware and its hosts"
    if op in ATTR_RULES:
        name, default, allowed, why = ATTR_RULES[op]
        value = attrs[name].s.decode("utf-8", "replace") if attrs and name in attrs else default
        return None if allowed(value) else f"{why}: {name}={value!r}"
    if op_def_registry.get(op) is None:
        return "not a TensorFlow op: a custom kernel"
    return None


def refuse(path: Path, what: str) -> UnsafeInputError:
    return UnsafeInputError(f"'{path}' {what}; converting it would run it", hint=TRUST_HINT)


# SavedModel ------------------------------------------------------------------------------------------
def check_saved_model(path: Path, signature: str | None) -> None:
    """Refuse a SavedModel whose loading or chosen signature would run a denied op (nothing is loaded)."""
    from tensorflow.python.saved_model import loader_impl

    try:
        proto = loader_impl.parse_saved_model(str(path))
    except Exception as exc:  # noqa: BLE001 - any failure in TF becomes one line
        raise BadInputError(f"cannot load SavedModel '{path}': {' '.join(str(exc).split())[:300]}") from None
    metas = list(proto.meta_graphs)
    if len(metas) == 1 and metas[0].HasField("object_graph_def"):  # what tf.saved_model.load takes as TF2
        try:
            roots = _loaded_functions(path, metas[0].object_graph_def, signature)
        except IndexError:
            raise BadInputError(f"SavedModel '{path}' has a damaged object graph (a node id out of range)") from None
        _Library(path, metas[0].graph_def.library).check(roots)
        return
    for meta in metas:
        _check_v1(path, meta)


def _loaded_functions(path: Path, objects, signature: str | None) -> list[str]:
    """Names of the functions tf.saved_model.load runs, and the chosen signature's."""
    def functions(node) -> list[str]:
        kind = node.WhichOneof("kind")
        if kind == "function":
            return list(node.function.concrete_functions)
        return [node.bare_concrete_function.concrete_function_name] if kind == "bare_concrete_function" else []

    nodes = list(objects.nodes)
    names = [n.captured_tensor.concrete_function for n in nodes if n.WhichOneof("kind") == "captured_tensor"]
    for node in nodes:
        if node.WhichOneof("kind") == "resource" or node.registered_name:
            names += [f for child in node.children for f in functions(nodes[child.node_id])]
        for saveable in node.saveable_objects.values():
            names += functions(nodes[saveable.save_function]) + functions(nodes[saveable.restore_function])
    signatures = {c.local_name: c.node_id for c in nodes[0].children} if nodes else {}
    if "signatures" in signatures:
        available = {c.local_name: c.node_id for c in nodes[signatures["signatures"]].children}
        if available:
            chosen = choose_signature(list(available), signature, f"SavedModel '{path}'")
            names += functions(nodes[available[chosen]])
    return names


class _Library:
    """A FunctionDefLibrary, walked from given functions through every function they call."""

    def __init__(self, path: Path, library):
        self.path = path
        self.functions = {f.signature.name: f for f in library.function}
        self.gradients = {g.function_name: g.gradient_func for g in library.gradient}

    def check(self, roots: Iterable[str]) -> None:
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            name = stack.pop()
            if name in seen or name not in self.functions:  # an unknown function fails to load by itself
                continue
            seen.add(name)
            for node in self.functions[name].node_def:
                stack += self.node(node, f"function {name}")
            stack += [self.gradients[name]] if name in self.gradients else []

    def node(self, node, where: str) -> list[str]:
        """The functions ``node`` calls; raises if the node itself is denied."""
        called = [node.op] if node.op in self.functions else []
        for value in node.attr.values():
            called += [value.func.name] if value.HasField("func") else []
            called += [f.name for f in value.list.func]
        if node.op not in self.functions:
            why = why_denied(node.op, node.attr)
            if why:
                raise refuse(self.path, f"runs {node.op} ({why}) in {where}")
        return called


def _check_v1(path: Path, meta) -> None:
    """A TF1 MetaGraph: every node and every function, but the saver's own Save/Restore nodes."""
    library = _Library(path, meta.graph_def.library)
    saver = set(_saver_nodes(meta))
    for node in meta.graph_def.node:
        if node.name not in saver:
            where = " (a checkpoint op not confined to the model's variables folder)" if node.op in SAVER_OPS else ""
            library.node(node, f"node '{node.name}'{where}")
    library.check(library.functions)


def _saver_nodes(meta) -> Iterator[str]:
    """Names of the saver's Save/Restore nodes that only ever see the model's variables folder: Restore nodes the
    restore op runs that read the (fed) filename tensor itself, and nodes nothing runs at load whose path inputs
    are built from the filename tensor. None that the init op or a signature reaches (the filename is not fed
    there: its default, a path of the file's choosing, is used)."""
    filename = _node_name(meta.saver_def.filename_tensor_name)
    if not filename:
        return
    nodes = {n.name: n for n in meta.graph_def.node}
    unfed = _reached(nodes, _load_roots(meta))
    restored = _reached(nodes, [meta.saver_def.restore_op_name], stop=filename)

    def from_filename(name: str) -> bool:
        seen, stack, reached = set(), [name], False
        while stack:
            current = _node_name(stack.pop())
            if current == filename:
                reached = True
            elif current not in seen:
                seen.add(current)
                node = nodes.get(current)
                if node is None or node.op not in _PATH_OPS:
                    return False
                stack += [i for i in node.input if not i.startswith("^")]  # data inputs only
        return reached

    for node in nodes.values():
        slots = SAVER_OPS.get(node.op, ())
        if not slots or node.name in unfed or any(i >= len(node.input) for i in slots):
            continue
        if node.name in restored:
            if node.op.startswith("Restore") and _node_name(node.input[0]) == filename:
                yield node.name
        elif all(from_filename(node.input[i]) for i in slots):
            yield node.name


def _node_name(ref: str) -> str:
    """The node a graph reference names ("^node", "node:1", "node")."""
    return ref.lstrip("^").split(":")[0]


def _reached(nodes: Mapping[str, Any], roots: Iterable[str], stop: str = "") -> set[str]:
    """Names of the nodes that running ``roots`` runs (data and control inputs), not above the node ``stop``."""
    seen: set[str] = set()
    stack = [_node_name(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen or name == stop or name not in nodes:
            continue
        seen.add(name)
        stack += [_node_name(i) for i in nodes[name].input]
    return seen


def _load_roots(meta) -> list[str]:
    """What loading a TF1 MetaGraph (and calling its signatures) runs without feeding the saver's filename: every
    signature's outputs (the init op's ``__saved_model_init_op`` among them), the main_op / legacy_init_op
    collections, and the table and local-variable initialisers TF runs where there is no init op."""
    from tensorflow.core.framework import variable_pb2

    def tensors(info) -> list[str]:
        sparse = info.coo_sparse
        return [info.name, sparse.values_tensor_name, sparse.indices_tensor_name, sparse.dense_shape_tensor_name,
                *[n for c in info.composite_tensor.components for n in tensors(c)]]

    roots = [n for s in meta.signature_def.values() for info in s.outputs.values() for n in tensors(info)]
    collections = meta.collection_def
    for key in ("saved_model_main_op", "legacy_init_op", "table_initializer"):
        roots += collections[key].node_list.value if key in collections else []
    for raw in collections["local_variables"].bytes_list.value if "local_variables" in collections else []:
        try:
            variable = variable_pb2.VariableDef.FromString(raw)
        except Exception:  # noqa: BLE001 - TF fails to load it by itself
            continue
        roots += [variable.initializer_name, variable.snapshot_name, variable.initial_value_name]
    return [r for r in roots if r]


# TFLite ----------------------------------------------------------------------------------------------
def check_tflite(path: Path) -> None:
    """Refuse a .tflite file with custom operators (a Flex one names the TF kernel it runs)."""
    from tensorflow.lite.python import schema_py_generated as schema

    try:
        model = schema.Model.GetRootAsModel(path.read_bytes(), 0)
        codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
        custom = [(c.CustomCode() or b"").decode("utf-8", "replace") for c in codes
                  if max(c.BuiltinCode(), c.DeprecatedBuiltinCode()) == schema.BuiltinOperator.CUSTOM]
    except Exception as exc:  # noqa: BLE001 - a damaged flatbuffer fails in many ways
        raise BadInputError(f"'{path.name}' is not a TFLite model: {type(exc).__name__}: {exc}"[:300]) from None
    flex = {c: why_denied(c[len("Flex"):]) for c in custom if c.startswith("Flex")}
    code = next((c for c, why in flex.items() if why), custom[0] if custom else None)
    if code is None:
        return
    if code in flex:
        what = f"runs TensorFlow's {code[len('Flex'):]}" + (f": {flex[code]}" if flex[code] else "")
    else:
        what = "native code outside TFLite's kernels"
    raise refuse(path, f"holds custom operator {code or '(unnamed)'} ({what})")
