"""Protocol buffers' wire format, read and written by hand: varints and length-delimited fields (enough to edit a
message's bytes without parsing it)."""
from __future__ import annotations

from typing import Iterator


def read_varint(buf, pos: int) -> tuple[int, int]:
    """The varint at ``buf[pos]`` and the position after it."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def varint(n: int) -> bytes:
    """``n`` (>= 0) as a varint."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def wire_fields(buf, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, start of its tag, start of its value, end) for each field of the message in
    ``buf[start:end]``; a length-delimited value starts after its length."""
    pos = start
    while pos < end:
        tag_at = pos
        key, pos = read_varint(buf, pos)
        kind = key & 7
        if kind == 0:
            _, stop = read_varint(buf, pos)
        elif kind == 2:
            length, pos = read_varint(buf, pos)
            stop = pos + length
        elif kind in (1, 5):
            stop = pos + (8 if kind == 1 else 4)
        else:
            raise ValueError(f"wire type {kind}")
        if stop > end:
            raise ValueError("field past the end of its message")
        yield key >> 3, tag_at, pos, stop
        pos = stop


def length_field(number: int, value: bytes) -> bytes:
    """Field ``number`` holding ``value``, length-delimited (wire type 2), tag included."""
    return varint(number << 3 | 2) + varint(len(value)) + value
