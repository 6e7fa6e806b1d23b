"""Chrome's first Android arm32 unwind format ("v1"), encoder and reader.

The format of `build/android/gyp/extract_unwind_tables.py` (2018), in our
words. A blob is, little-endian:

    uint32  size of UNW_INDEX in bytes (6 per entry)
    UNW_INDEX  N uint32 function starts (offsets from the text base, ascending),
               then N uint16 indices: half-words into UNW_DATA, or 0xFFFF
               (CANT_UNWIND: no information from this start on)
    UNW_DATA   per function: uint16 row count, then rows of two uint16:
               address offset from the function start, and
               CFA offset | RA offset / 4 (the CFA offset is a multiple of 4,
               so its two low bits are free for the return address slot)

A row says: from this address on, caller sp = sp + CFA offset and caller
pc = [caller sp - RA offset]. RA offset 0 means "as the row before".

What the fixed widths cannot express is refused per function, as Chrome's
converter did: code longer than 0xFFFF bytes, a CFA through any register
but sp (so no dynamic stack allocation), a CFA offset over 0xFFFC, the
return address 16 or more bytes below the CFA, and a row after the entry
whose CFA offset is 0 (the return address is back in lr, which no row can
say). Refused and frameless functions get no entry: they fall in a
CANT_UNWIND range, where the unwinder can only assume it is at the very
start of a function (pc = lr) for the innermost frame. No callee-saved
register is ever restored. Epilogue rows are left out by v2's rule (Chrome
built v1 from clang's CFI, which has none).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence

from harness.errors import CorruptTable, EncodeError, TableOverflow
from harness.formats.chrome_v2.encoder import starts_epilogue
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, SP

CANT_UNWIND = 0xFFFF
MAX_FUNCTION_BYTES = 0xFFFF
MAX_CFA_OFFSET = 0xFFFC  # 14 bits of CFA offset / 4
MAX_RA_OFFSET = 12  # 2 bits of RA offset / 4


@dataclass(frozen=True)
class V1Row:
    """From `offset` bytes into the function on: caller sp = sp + cfa_offset,
    caller pc = [caller sp - ra_offset] (ra_offset 0: as the previous row)."""

    offset: int
    cfa_offset: int
    ra_offset: int

    def packed(self) -> tuple[int, int]:
        return self.offset, self.cfa_offset | self.ra_offset // 4


@dataclass(frozen=True)
class V1Function:
    start: int  # bytes from the text base
    end: int
    name: str
    rows: tuple[V1Row, ...]


@dataclass(frozen=True)
class V1Encoded:
    """A v1 blob and what the encoder left out on the way."""

    blob: bytes
    functions: tuple[V1Function, ...]  # in the table
    refused: tuple[tuple[str, str], ...]  # (function, why)
    frameless: tuple[str, ...]  # no row after the entry: no entry needed
    index_entries: int

    @property
    def addresses(self) -> int:
        return sum(len(f.rows) for f in self.functions)


class Refused(Exception):
    """A function the v1 widths cannot describe."""


def v1_row(row: CfiRow, start: int) -> V1Row:
    """The v1 row for one CFI row after a function's entry, or Refused."""
    where = f"{row.address:#x}"
    if row.problem:
        raise Refused(f"{where}: {row.problem}")
    if row.cfa_reg != SP:
        raise Refused(f"{where}: CFA through r{row.cfa_reg}, not sp")
    if row.cfa_offset <= 0 or row.cfa_offset % 4:
        raise Refused(f"{where}: CFA offset {row.cfa_offset} (needs a positive multiple of 4)")
    if row.cfa_offset > MAX_CFA_OFFSET:
        raise Refused(f"{where}: CFA offset {row.cfa_offset} exceeds {MAX_CFA_OFFSET}")
    ra = dict(row.saved).get(LR)
    ra_offset = 0 if ra is None else -ra
    if ra is not None and not 0 < ra_offset <= MAX_RA_OFFSET:
        raise Refused(f"{where}: return address at CFA{ra:+d} (v1 holds 4, 8 or 12 below the CFA)")
    return V1Row(row.address - start, row.cfa_offset, ra_offset)


def v1_function(function: FunctionCfi, text_base: int) -> V1Function:
    """One function's rows (Refused if the widths cannot hold them)."""
    if function.end - function.start > MAX_FUNCTION_BYTES:
        raise Refused(f"{function.end - function.start} bytes of code (v1 offsets have 16 bits)")
    rows: list[V1Row] = []
    body = function.rows[0]
    for row in function.rows[1:]:
        if starts_epilogue(row, body):
            continue
        body = row
        converted = v1_row(row, function.start)
        if rows and rows[-1].cfa_offset == converted.cfa_offset and (
            converted.ra_offset in (0, _ra_in_force(rows))
        ):
            continue  # nothing v1 can see changed
        rows.append(converted)
    return V1Function(function.start - text_base, function.end - text_base, function.name, tuple(rows))


def _ra_in_force(rows: Sequence[V1Row]) -> int:
    return next((r.ra_offset for r in reversed(rows) if r.ra_offset), 0)


def encode_v1(functions: Sequence[FunctionCfi], text_base: int) -> V1Encoded:
    """The v1 blob for `functions` (sorted or not; they must not overlap)."""
    kept: list[V1Function] = []
    refused: list[tuple[str, str]] = []
    frameless: list[str] = []
    for function in sorted(functions, key=lambda f: f.start):
        if function.start < text_base:
            raise EncodeError(f"function {function.name} at {function.start:#x} lies below the text base {text_base:#x}")
        try:
            converted = v1_function(function, text_base)
        except Refused as why:
            refused.append((function.name, str(why)))
            continue
        if converted.rows:
            kept.append(converted)
        else:
            frameless.append(function.name)
    data: list[int] = []
    index_of: dict[tuple[int, ...], int] = {}  # identical function data is stored once
    entries: list[tuple[int, int]] = []
    for number, function in enumerate(kept):
        if number and function.start < kept[number - 1].end:
            raise EncodeError(f"functions overlap: {kept[number - 1].name} and {function.name}")
        if number and kept[number - 1].end != function.start:
            entries.append((kept[number - 1].end, CANT_UNWIND))
        words = (len(function.rows), *(w for row in function.rows for w in row.packed()))
        index = index_of.get(words)
        if index is None:
            index = index_of[words] = len(data)
            if index >= CANT_UNWIND:
                raise TableOverflow(f"v1 UNW_DATA passed {CANT_UNWIND} half-words at {function.name}")
            data.extend(words)
        entries.append((function.start, index))
    if kept:
        entries.append((kept[-1].end, CANT_UNWIND))
    if entries and entries[-1][0] > 0xFFFFFFFF:
        raise TableOverflow("v1 function offsets have 32 bits")
    blob = struct.pack(
        f"<I{len(entries)}I{len(entries)}H{len(data)}H",
        6 * len(entries), *(start for start, _ in entries), *(index for _, index in entries), *data,
    )
    return V1Encoded(blob, tuple(kept), tuple(refused), tuple(frameless), len(entries))


class V1Table:
    """A validated v1 blob. `lookup(offset)` gives (CFA offset, RA offset),
    or None where the table has no information."""

    def __init__(self, starts: Sequence[int], indices: Sequence[int], data: Sequence[int]):
        self.starts = list(starts)
        self.rows: list[tuple[tuple[int, int, int], ...] | None] = []
        for position, (start, index) in enumerate(zip(starts, indices)):
            if position and start <= starts[position - 1]:
                raise CorruptTable("UNW_INDEX", f"function start {start:#x} does not ascend", 4 + 4 * position, "v1")
            self.rows.append(None if index == CANT_UNWIND else _function_rows(data, index, position))

    @classmethod
    def from_blob(cls, blob: bytes) -> "V1Table":
        if len(blob) < 4:
            raise CorruptTable("header", f"{len(blob)} bytes; the index size needs 4", 0, "v1")
        (index_bytes,) = struct.unpack_from("<I", blob)
        if index_bytes % 6 or 4 + index_bytes > len(blob):
            raise CorruptTable("header", f"UNW_INDEX size {index_bytes} is not 6 per entry within "
                               f"the blob's {len(blob) - 4} bytes", 0, "v1")
        count = index_bytes // 6
        rest = len(blob) - 4 - index_bytes
        if rest % 2:
            raise CorruptTable("UNW_DATA", f"odd size {rest}", 4 + index_bytes, "v1")
        starts = struct.unpack_from(f"<{count}I", blob, 4)
        indices = struct.unpack_from(f"<{count}H", blob, 4 + 4 * count)
        data = struct.unpack_from(f"<{rest // 2}H", blob, 4 + index_bytes)
        return cls(starts, indices, data)

    def lookup(self, offset: int) -> tuple[int, int] | None:
        """Chrome's rule: the last function starting below `offset` (a pc at
        a function's very start, or in a CANT_UNWIND range, has nothing);
        then the last row at or below it, with the RA offset last given. Before
        the first row that is (0, 0), as in Chrome's unwinder."""
        return self.lookup_range(offset)[0]

    def lookup_range(self, offset: int) -> tuple[tuple[int, int] | None, int | None, int | None]:
        """`lookup(offset)`, and the offsets [low, high) that find the same
        (None: without bound on that side)."""
        position = bisect_right(self.starts, offset) - 1
        if position < 0:
            return None, None, self.starts[0] if self.starts else None
        start = self.starts[position]
        if start == offset:
            return None, offset, offset + 1
        high = self.starts[position + 1] if position + 1 < len(self.starts) else None
        rows = self.rows[position]
        if rows is None:
            return None, start + 1, high
        cfa = ra = 0
        low = start + 1
        for row_offset, row_cfa, row_ra in rows:
            if start + row_offset > offset:
                high = start + row_offset if high is None else min(high, start + row_offset)
                break
            cfa = row_cfa
            ra = row_ra or ra
            low = max(low, start + row_offset)
        return (cfa, ra), low, high


def _function_rows(data: Sequence[int], index: int, position: int) -> tuple[tuple[int, int, int], ...]:
    where = f"UNW_DATA for entry {position}"
    if index >= len(data):
        raise CorruptTable(where, f"index {index} is past the data's {len(data)} half-words", None, "v1")
    count = data[index]
    if index + 1 + 2 * count > len(data):
        raise CorruptTable(where, f"{count} rows at half-word {index} run past the data", None, "v1")
    rows = []
    for number in range(count):
        offset, packed = data[index + 1 + 2 * number], data[index + 2 + 2 * number]
        if rows and offset <= rows[-1][0]:
            raise CorruptTable(where, f"row {number} offset {offset} does not ascend", None, "v1")
        rows.append((offset, packed & ~3, 4 * (packed & 3)))
    return tuple(rows)


def dump_v1(table: V1Table, text_base: int) -> str:
    """A stable, readable listing of a v1 blob."""
    lines = [f"v1 unwind info, text base {text_base:#x}", f"index entries: {len(table.starts)}"]
    for position, (start, rows) in enumerate(zip(table.starts, table.rows)):
        if rows is None:
            lines.append(f"  entry {position} at {text_base + start:#x}: CANT_UNWIND")
            continue
        lines.append(f"  entry {position} at {text_base + start:#x}: {len(rows)} rows")
        for offset, cfa, ra in rows:
            where = f"return address at CFA - {ra}" if ra else "return address as the row before"
            lines.append(f"    +{offset:#x}: CFA = sp + {cfa}, {where}")
    return "\n".join(lines) + "\n"
