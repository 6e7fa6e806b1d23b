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


MAX_BYTES = 5  # enough for any 32-bit field of the formats that use it


def decode(data: bytes | memoryview, pos: int, end: int | None = None) -> tuple[int, int]:
    """Decode one value at `pos`; return (value, position after it).

    Raises IndexError when the run is not terminated before `end` (default:
    the end of `data`), ValueError when it runs past MAX_BYTES; callers turn
    those into their own typed errors.
    """
    stop = len(data) if end is None else end
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= stop:
            raise IndexError("unterminated ULEB128")
        if pos - start == MAX_BYTES:
            raise ValueError(f"ULEB128 longer than {MAX_BYTES} bytes")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def size(value: int) -> int:
    """Bytes `encode(value)` takes."""
    return max(1, (value.bit_length() + 6) // 7)
