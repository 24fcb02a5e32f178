"""A minimal read-only FlatBuffers table reader (enough for the DLC's NETD/NETP buffers; no schema compiler).

A table is read by field slot (0-based, the order fields appear in the schema); absent fields give the default,
as FlatBuffers omits default-valued fields.

Work is bounded by the buffer's size. A crafted buffer can point many offsets at one table, vector or string, so
that reading it naively decodes far more than it holds (the square of its size, and more with nesting). Each
root carries a budget: every table, vector and string a reader reaches is charged the bytes it would take if
nothing were shared (``TABLE_BYTES`` a table, 4 plus its elements a vector, 5 plus its length a string), and the
reader may decode ``BUDGET_PER_BYTE`` times the buffer's size; past it ``FlatBufferError``. A buffer whose
writer shares nothing (QnnIr's) is charged at most its size, so the budget also bounds everything downstream of
the reader (summaries, comparisons, rendering) to a few times the file's size.
"""
from __future__ import annotations

import struct

BUDGET_PER_BYTE = 2  # room for a writer that shares strings, never for a buffer that multiplies itself
TABLE_BYTES = 8  # a table's offset to its vtable and at least one field


class FlatBufferError(ValueError):
    """The bytes are not a well-formed FlatBuffer where a field points."""


class _Budget:
    """The bytes one buffer's readers may still decode."""

    __slots__ = ("left",)

    def __init__(self, size: int):
        self.left = size * BUDGET_PER_BYTE

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise FlatBufferError("the buffer points at the same data over and over (more work than its size "
                                  "allows): a crafted or corrupt file")


def root(buf: bytes, identifier: str | None = None) -> "Table":
    """The root table of ``buf``; checks the 4-byte file identifier when given."""
    if len(buf) < 8:
        raise FlatBufferError("buffer too short for a FlatBuffer")
    if identifier is not None and file_identifier(buf) != identifier:
        raise FlatBufferError(f"file identifier {file_identifier(buf)!r}, expected {identifier!r}")
    return Table(buf, _u32(buf, 0), _Budget(len(buf)))


def file_identifier(buf: bytes) -> str:
    return buf[4:8].decode("latin-1")


def _u32(buf: bytes, pos: int) -> int:
    if pos < 0 or pos + 4 > len(buf):
        raise FlatBufferError(f"offset {pos} outside the buffer ({len(buf)} bytes)")
    return struct.unpack_from("<I", buf, pos)[0]


class Table:
    """One table: ``buf`` and the table's position."""

    __slots__ = ("buf", "pos", "_vt", "_vt_len", "_budget")

    def __init__(self, buf: bytes, pos: int, budget: _Budget | None = None):
        self.buf, self.pos = buf, pos
        self._budget = budget if budget is not None else _Budget(len(buf))
        self._budget.spend(TABLE_BYTES)
        self._vt = pos - struct.unpack_from("<i", buf, pos)[0]
        if not 0 <= self._vt < len(buf) - 4:
            raise FlatBufferError(f"vtable of the table at {pos} lies outside the buffer")
        self._vt_len = struct.unpack_from("<H", buf, self._vt)[0]

    def _field(self, slot: int) -> int:
        """The field's absolute position, or 0 when absent."""
        entry = 4 + 2 * slot
        if entry >= self._vt_len:
            return 0
        rel = struct.unpack_from("<H", self.buf, self._vt + entry)[0]
        return self.pos + rel if rel else 0

    def has(self, slot: int) -> bool:
        return self._field(slot) != 0

    def scalar(self, slot: int, fmt: str, default=0):
        at = self._field(slot)
        return struct.unpack_from("<" + fmt, self.buf, at)[0] if at else default

    def _target(self, slot: int) -> int:
        at = self._field(slot)
        return at + _u32(self.buf, at) if at else 0

    def table(self, slot: int) -> "Table | None":
        at = self._target(slot)
        return Table(self.buf, at, self._budget) if at else None

    def string(self, slot: int, default: str | None = None) -> str | None:
        at = self._target(slot)
        return _string(self.buf, at, self._budget) if at else default

    def _vector(self, slot: int, size: int) -> tuple[int, int]:
        """(start, length) of the vector at ``slot`` whose elements take ``size`` bytes; (0, 0) when absent."""
        at = self._target(slot)
        if not at:
            return 0, 0
        n = _u32(self.buf, at)
        if at + 4 + n * size > len(self.buf):
            raise FlatBufferError("vector runs past the end of the buffer")
        self._budget.spend(4 + n * size)
        return at + 4, n

    def vector(self, slot: int, fmt: str) -> list:
        """A vector of scalars (``fmt``: one struct code, e.g. ``"i"``, ``"B"``)."""
        start, n = self._vector(slot, struct.calcsize("<" + fmt))
        return list(struct.unpack_from(f"<{n}{fmt}", self.buf, start)) if n else []

    def tables(self, slot: int) -> list["Table"]:
        start, n = self._vector(slot, 4)
        return [Table(self.buf, start + 4 * i + _u32(self.buf, start + 4 * i), self._budget) for i in range(n)]

    def strings(self, slot: int) -> list[str]:
        start, n = self._vector(slot, 4)
        return [_string(self.buf, start + 4 * i + _u32(self.buf, start + 4 * i), self._budget) for i in range(n)]


def _string(buf: bytes, at: int, budget: _Budget) -> str:
    n = _u32(buf, at)
    if at + 4 + n > len(buf):
        raise FlatBufferError("string runs past the end of the buffer")
    budget.spend(5 + n)
    return bytes(buf[at + 4:at + 4 + n]).decode("utf-8", "replace")
