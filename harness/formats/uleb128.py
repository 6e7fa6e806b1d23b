"""Unsigned LEB128, as used by the v2 function offset table and EHABI 0xb2."""

from __future__ import annotations


def encode(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"ULEB128 cannot encode negative {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode(data: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode one value at `pos`; return (value, position after it).

    Raises IndexError when the run is not terminated before `end` (default:
    the end of `data`); callers turn that into their own typed error.
    """
    stop = len(data) if end is None else end
    value = 0
    shift = 0
    while True:
        if pos >= stop:
            raise IndexError("unterminated ULEB128")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def size(value: int) -> int:
    """Bytes `encode(value)` takes."""
    return max(1, (value.bit_length() + 6) // 7)
