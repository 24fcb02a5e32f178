"""What a TorchScript archive or a torch.export program would run, checked before anything runs it.

A TorchScript archive is code: ``torch.jit.load`` compiles its ``code/`` entries and runs any scripted
``__setstate__`` while unpickling; forward, the reference runs and the export run the rest. A ``.pt2``
program is a graph of operator calls that the reference runs execute. Without trust, both are read and
refused when they can reach the file system, the network, another process or native code we do not know.

What "complete" means here. A graph can only act through (a) operators, (b) calls to other scripted
functions and methods, (c) Python calls, (d) methods of TorchBind classes (C++). The check sees all of
them: every function the archive compiles (every method of every module and class, free functions, hooks,
each nested block) is in the compilation unit we load it into, and every ``.pt2`` graph is walked with its
subgraphs. Python calls (``prim::PythonOp``) are refused. Operators are refused outside the namespaces
of torch's own numeric kernels (``ALLOWED_NAMESPACES``): custom operators may be any native code, and
``c10d``/``symm_mem``/``debugprims``/``inductor`` ... communicate, load files or reinterpret memory.
Inside them, an operator can name a file, a host or a peer only through a ``str`` or ``RRef`` argument:
``DENIED`` lists every schema of torch 2.13 whose ``str`` argument is a path (``from_file``, ``save``)
plus the RPC operators; the other ``str`` arguments are modes (``rounding_mode``, ``padding``,
``equation``, string methods). Printing (``prim::Print``, ``aten::warn``) and threads (``prim::fork``)
stay allowed. Memory safety of the allowed kernels themselves is torch's concern, not this check's.
"""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterator

from onnxbridge.errors import TRUST_HINT, BadInputError, UnsafeInputError

ALLOWED_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "_quantized", "quantization", "sparse",
                                "mkldnn", "mkldnn_prepacked", "onednn", "mkl", "profiler", "onnx"})
TORCHBIND_PREFIX = "__torch__.torch.classes."
DENIED = {
    "aten::from_file": "maps any file into a tensor, reading or writing it",
    "aten::save": "writes a file",
    "prim::PythonOp": "calls Python",
    "prim::IgnoredPythonOp": "calls Python",
    "prim::rpc_async": "calls another process over the network",
    "prim::rpc_sync": "calls another process over the network",
    "prim::rpc_remote": "calls another process over the network",
    "aten::to_here": "fetches a remote value over the network",
    "aten::local_value": "reads a remote reference",
    "aten::owner": "reads a remote reference",
    "aten::owner_name": "reads a remote reference",
    "aten::confirmed_by_owner": "reads a remote reference",
    "aten::is_owner": "reads a remote reference",
}
_SETSTATE = b"__setstate__"


def why_denied(op: str) -> str | None:
    """Why the operator ``ns::name`` may not run untrusted, or None when it may."""
    if op in DENIED:
        return DENIED[op]
    if op.split("::", 1)[0] not in ALLOWED_NAMESPACES:
        return "a custom operator: native code outside torch's own kernels"
    return None


def refuse(path: Path, what: str) -> UnsafeInputError:
    return UnsafeInputError(f"'{path}' {what}; converting it would run it", hint=TRUST_HINT)


def check_setstate(path: Path) -> None:
    """Refuse an archive whose code defines ``__setstate__``: ``torch.jit.load`` runs it while loading.

    Every ``.py`` entry is read (duplicates of one name included), in chunks, without compiling anything.
    """
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.filename.endswith(".py") and _contains(z, info, _SETSTATE):
                    raise refuse(path, f"defines a scripted __setstate__ ({info.filename}), which loading runs")
    except (zipfile.BadZipFile, zlib.error, OSError, RuntimeError, EOFError, NotImplementedError) as exc:
        raise BadInputError(f"'{path}' is a damaged archive: {exc}") from None


def _contains(z: zipfile.ZipFile, info: zipfile.ZipInfo, token: bytes, chunk: int = 1 << 20) -> bool:
    tail = b""
    with z.open(info) as f:
        while block := f.read(chunk):
            if token in tail + block:
                return True
            tail = block[-(len(token) - 1):]
    return False


def load_torchscript(path: Path) -> Any:
    """The archive as a ScriptModule, refused before anything in it runs if it holds a denied call.

    Loading compiles the code into a compilation unit of its own, so the functions to check are exactly
    the archive's; loading itself runs only ``__setstate__``, which ``check_setstate`` refused first.
    """
    import torch
    from torch.jit._recursive import wrap_cpp_module

    check_setstate(path)
    unit = torch._C.CompilationUnit()
    cpp_module = torch._C.import_ir_module(unit, str(path), torch.device("cpu"), {}, False)
    for function in unit.get_functions():
        for node in _nodes(function.graph.nodes()):
            what = _scripted_call(node)
            if what:
                raise refuse(path, f"{what} in {function.qualified_name}")
    return wrap_cpp_module(cpp_module)


def _nodes(nodes) -> Iterator[Any]:
    for node in nodes:
        yield node
        for block in node.blocks():
            yield from _nodes(block.nodes())


def _scripted_call(node) -> str | None:
    """What a TorchScript node would do that is not allowed, as a phrase; None when allowed."""
    op = node.kind()
    if op == "prim::CallMethod":
        owner = getattr(node.inputsAt(0).type(), "qualified_name", lambda: "")()
        if owner.startswith(TORCHBIND_PREFIX):
            op = f"{owner[len(TORCHBIND_PREFIX):].split('.', 1)[0]}::{node.s('name')}"
    why = why_denied(op)
    return f"calls {op} ({why})" if why else None


def check_program(path: Path, program: Any) -> None:
    """Refuse a ``.pt2`` ExportedProgram whose graphs (subgraphs included) call a denied operator."""
    import torch

    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function":
                continue
            for target in (node.target, *node.args):
                if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                    name = target._schema.name if isinstance(target, torch._ops.OpOverload) else \
                        target._qualified_op_name
                    why = why_denied(name)
                    if why:
                        raise refuse(path, f"calls {name} ({why}) in node '{node.name}'")
