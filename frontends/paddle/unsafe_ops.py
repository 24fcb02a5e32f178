"""Paddle operators that reach outside the process, and the static check of an inference program.

A Paddle inference model is a program: the reference runs execute every operator in it. Without trust
its program file is read as data (the ``.pdmodel`` ProgramDesc protobuf, or the PIR ``.json``), before
Paddle loads it, and refused when an operator in any block or nested region is denied.

What "complete" means here. An operator reaches a file, a peer or Python only through a path, an
endpoint or a Python callable it is given, or by being native code Paddle does not ship. Every operator
registered in Paddle 3.3 (``core.get_all_op_names``, 1209) with a string attribute, and every one whose
name says file, read, save/load, send/recv, collective or Python, was reviewed: ``DENIED`` and the ``c_``
family (collective communication) are those that read or write files, talk to other processes, read from
a Python feeder or run Python; ``print`` only writes to stdout and ``feed``/``fetch`` are the program's
own inputs and outputs, so they stay allowed. Custom operators (the PIR ``custom_op`` dialect, or a
``.pdmodel`` operator Paddle has not registered) are native code and refused, and so is the distributed
dialect (``pd_dist``), which communicates.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from onnxbridge.errors import TRUST_HINT, BadInputError, UnsafeInputError

_NETWORK = "talks to other processes"
_GROUPS: dict[str, tuple[str, ...]] = {
    "reads or writes files": ("save", "save_combine", "load", "load_combine", "read_file", "check_numerics"),
    "runs Python": ("py_func", "pylayer", "ap_variadic", "ap_facade"),
    "reads from a Python data feeder": ("read", "create_py_reader", "create_double_buffer_reader"),
    _NETWORK: ("all_gather", "all_reduce", "all_to_all", "barrier", "broadcast", "reduce", "reduce_scatter",
               "comm_init_all", "distributed_fused_lamb_init", "fetch_barrier", "global_gather", "global_scatter",
               "mp_allreduce_sum", "p_recv", "p_recv_array", "p_send", "p_send_array", "partial_allgather",
               "partial_recv", "partial_send", "recv_v2", "send_v2"),
}
DENIED: dict[str, str] = {op: why for why, ops in _GROUPS.items() for op in ops}
COLLECTIVES = "c_"
# PIR dialect ids in a .json program (paddle/fluid/pir/serialize_deserialize/src/schema.cc)
DIALECTS = {"0": "builtin", "1": "pd_op", "2": "cf", "3": "custom_op", "4": "pd_dist"}
CUSTOM = "a custom operator: native code outside Paddle"
REFUSED_DIALECTS = {"custom_op": CUSTOM, "pd_dist": f"distributed: it {_NETWORK}"}
PARAMETER_OP = "p"


def why_denied(op: str) -> str | None:
    """Why the Paddle operator ``op`` (without its dialect) may not run untrusted, or None when it may."""
    name = op.rstrip("_")  # the in-place variant runs the same kernel
    if name in DENIED:
        return DENIED[name]
    return f"collective communication: it {_NETWORK}" if name.startswith(COLLECTIVES) else None


def check_program(path: Path) -> None:
    """Refuse a Paddle program file holding a denied or custom operator; nothing is loaded or run."""
    for op, why in _verdicts(path):
        if why:
            raise UnsafeInputError(f"'{path}' runs {op} ({why}); converting it would run it", hint=TRUST_HINT)


def _verdicts(path: Path) -> Iterator[tuple[str, str | None]]:
    try:
        data = path.read_bytes()
        if path.suffix == ".json":
            yield from (_pir_verdict(op) for op in _pir_ops(json.loads(data)))
            return
        from paddle.base import core
        from paddle.base.proto import framework_pb2

        known = set(core.get_all_op_names())
        for block in framework_pb2.ProgramDesc.FromString(data).blocks:
            for op in block.ops:
                yield op.type, why_denied(op.type) or (None if op.type in known else CUSTOM)
    except (OSError, ValueError, DecodeError, RecursionError) as exc:
        what = "not a JSON program" if path.suffix == ".json" else "Failed to parse program_desc"
        raise BadInputError(f"cannot load Paddle model '{path.name}': {what}: {exc}"[:300]) from None


def _pir_ops(program) -> Iterator[str]:
    """The ``#`` (``dialect.name``) of every operation in a PIR JSON program, nested regions included."""
    stack = [program]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ops = item.get("ops")
            if isinstance(ops, list):
                yield from (op["#"] for op in ops if isinstance(op, dict) and isinstance(op.get("#"), str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _pir_verdict(op: str) -> tuple[str, str | None]:
    if op == PARAMETER_OP:
        return op, None
    dialect_id, _, name = op.partition(".")
    dialect = DIALECTS.get(dialect_id)
    if dialect is None:
        return op, "an operator of an unknown dialect"
    return f"{dialect}.{name}", REFUSED_DIALECTS.get(dialect) or why_denied(name)
