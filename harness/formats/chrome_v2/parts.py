"""Several v2 tables for one module's text, where one cannot hold it.

A function table entry points at its offset list with a 16-bit byte index,
so one table addresses at most 64 KiB of offset lists. Chrome's tables from
CFI share few shapes and fit; rows from the machine code of Chromium's
whole binary (982,309 functions) take 143,928 bytes of lists. Such text is
cut into runs of consecutive functions, each run in a table of its own
whose text base is its first function's start, as a runtime would hold one
table per code range; a pc's table is the last one starting at or below it.

The parts are kept together in one file (little-endian):

    magic      8 bytes  "V2PARTS\\0"
    count      uint32   tables, at least 2
    count x    uint32   text offset: where the table's text base lies, in bytes
                        from the module's (the first's is 0; increasing)
               uint32   byte offset of its blob in this file
               uint32   its blob's size in bytes
    the blobs, each a v2 blob of one layout (harness.formats.chrome_v2.layout)

One table is written as its blob alone, as before.
"""

from __future__ import annotations

import struct
from typing import Sequence

from harness.errors import CorruptTable

MAGIC = b"V2PARTS\0"
_COUNT = struct.Struct("<I")
_PART = struct.Struct("<III")


def is_parts(blob: bytes) -> bool:
    return blob[:len(MAGIC)] == MAGIC


def pack_parts(parts: Sequence[tuple[int, bytes]]) -> bytes:
    """The file holding `parts`: (text offset, blob) pairs in text order."""
    assert len(parts) >= 2 and parts[0][0] == 0
    position = len(MAGIC) + _COUNT.size + _PART.size * len(parts)
    index, blobs = [], []
    for text_offset, blob in parts:
        index.append(_PART.pack(text_offset, position, len(blob)))
        blobs.append(blob)
        position += len(blob)
    return MAGIC + _COUNT.pack(len(parts)) + b"".join(index) + b"".join(blobs)


def unpack_parts(blob: bytes) -> tuple[tuple[int, bytes], ...]:
    """The (text offset, blob) pairs of a parts file; CorruptTable naming the
    field where its index does not hold together."""
    if not is_parts(blob):
        raise CorruptTable("magic", "not a v2 parts file", 0, "v2 parts")
    if len(blob) < len(MAGIC) + _COUNT.size:
        raise CorruptTable("count", f"the {len(blob)}-byte file ends before its count", len(MAGIC), "v2 parts")
    (count,) = _COUNT.unpack_from(blob, len(MAGIC))
    first = len(MAGIC) + _COUNT.size
    if count < 2 or first + _PART.size * count > len(blob):
        raise CorruptTable("count", f"{count} tables: fewer than 2, or more than the {len(blob)}-byte file indexes",
                           len(MAGIC), "v2 parts")
    parts = []
    for number in range(count):
        at = first + _PART.size * number
        text_offset, offset, size = _PART.unpack_from(blob, at)
        if (text_offset != 0) if number == 0 else text_offset <= parts[-1][0]:
            raise CorruptTable(f"table {number} text offset", f"{text_offset:#x} does not follow the table before "
                               "(the first is 0, each above the last)", at, "v2 parts")
        if offset < first + _PART.size * count or offset + size > len(blob):
            raise CorruptTable(f"table {number} blob", f"[{offset}, {offset + size}) lies outside the blobs of the "
                               f"{len(blob)}-byte file", at + 4, "v2 parts")
        parts.append((text_offset, blob[offset:offset + size]))
    return tuple(parts)
