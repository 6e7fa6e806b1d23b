"""Chrome's first Android arm32 unwind format ("v1"), encoder and reader,
as Chrome built and read it.

The format of `build/android/gyp/extract_unwind_tables.py` (since October
2019) and `base/trace_event/cfi_backtrace_android.cc`, in our words. A
blob is, little-endian:

    uint32  N, the number of UNW_INDEX entries
    UNW_INDEX  N uint32 function starts (offsets from the text base, ascending),
               then N uint16 indices: half-words into UNW_DATA, or 0xFFFF
               (CANT_UNWIND: no information from this start on)
    UNW_DATA   per function: uint16 row count, then rows of two uint16:
               address offset from the function start, and
               CFA offset | RA offset / 4 (the CFA offset is a multiple of 4,
               so its two low bits are free for the return address slot)

A row says: from this address on, caller sp = sp + CFA offset and caller
pc = [caller sp - RA offset]; RA offset 0 means "as the row before". The
entry row is not stored.

Chrome's builder read the rows as `dump_syms` writes them (each row lists
only the rules that change) and kept a function only if every row after
the entry gives a CFA of the form sp + n, 0 < n <= 0xFFFF, and, where it
gives the return address, one 4 to 12 bytes below the CFA: so a row
through r7, a row back at sp + 0 (an epilogue), a row that changes only
where a register is saved (it gives no CFA, read as 0), a return address
back in lr, or code over 0xFFFF bytes drops the whole function. Functions
with no row after the entry get no entry either. A CANT_UNWIND entry goes
2 bytes past a function's end when more than 4 bytes separate it from the
next, and always after the last. Identical function data is stored once.
No callee-saved register is ever restored.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from harness.errors import CorruptTable, EncodeError, TableOverflow
from harness.formats.chrome_v2.dump import base_line
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, SP

CANT_UNWIND = 0xFFFF
MAX_FUNCTION_BYTES = 0xFFFF
MAX_CFA_OFFSET = 0xFFFC  # 14 bits of CFA offset / 4
MAX_RA_OFFSET = 12  # 2 bits of RA offset / 4
CANT_UNWIND_GAP = 4  # bytes between functions that get no CANT_UNWIND entry


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


def v1_rows(function: FunctionCfi) -> tuple[V1Row, ...]:
    """The rows Chrome's builder stored for `function`, or Refused with the
    first row (or size) its rule does not take; () for a frameless one."""
    size = function.end - function.start
    if not 0 < size <= MAX_FUNCTION_BYTES:
        raise Refused(f"{size} bytes of code (v1 offsets have 16 bits)")
    rows: list[V1Row] = []
    before = function.rows[0]
    for row in function.rows[1:]:
        if (row.cfa_reg, row.cfa_offset, row.saved, row.problem) == (
                before.cfa_reg, before.cfa_offset, before.saved, before.problem):
            continue  # no rule changes: dump_syms writes no row
        rows.append(_v1_row(row, before, function.start))
        before = row
    return tuple(rows)


def _v1_row(row: CfiRow, before: CfiRow, start: int) -> V1Row:
    """One row as Chrome read it from the rules that changed since `before`."""
    where = f"{row.address:#x}"
    if row.problem:
        raise Refused(f"{where}: {row.problem}")
    if (row.cfa_reg, row.cfa_offset) == (before.cfa_reg, before.cfa_offset):
        raise Refused(f"{where}: the row changes no CFA rule (dump_syms writes none; Chrome reads CFA 0)")
    if row.cfa_reg != SP:
        raise Refused(f"{where}: CFA through r{row.cfa_reg}, not sp")
    if row.cfa_offset <= 0:
        raise Refused(f"{where}: CFA back at sp + {row.cfa_offset} (an epilogue)")
    if row.cfa_offset > MAX_CFA_OFFSET or row.cfa_offset % 4:
        raise Refused(f"{where}: CFA offset {row.cfa_offset} (v1 holds multiples of 4 up to {MAX_CFA_OFFSET})")
    ra, was = dict(row.saved).get(LR), dict(before.saved).get(LR)
    if ra is None and was is not None:
        raise Refused(f"{where}: the return address back in lr (v1 has no rule for it)")
    if ra is not None and not -MAX_RA_OFFSET <= ra < 0:
        raise Refused(f"{where}: return address at CFA{ra:+d} (v1 holds 4, 8 or 12 below the CFA)")
    return V1Row(row.address - start, row.cfa_offset, 0 if ra == was else -ra)


def encode_v1(functions: Sequence[FunctionCfi], text_base: int) -> V1Encoded:
    """The v1 blob for `functions` (sorted or not; they must not overlap)."""
    kept: list[V1Function] = []
    refused: list[tuple[str, str]] = []
    frameless: list[str] = []
    for function in sorted(functions, key=lambda f: f.start):
        if function.start < text_base:
            raise EncodeError(f"function {function.name} at {function.start:#x} lies below the text base {text_base:#x}")
        try:
            rows = v1_rows(function)
        except Refused as why:
            refused.append((function.name, str(why)))
            continue
        if rows:
            kept.append(V1Function(function.start - text_base, function.end - text_base, function.name, rows))
        else:
            frameless.append(function.name)
    entries, data = _index(kept)
    if entries and entries[-1][0] > 0xFFFFFFFF:
        raise TableOverflow("v1 function offsets have 32 bits")
    blob = struct.pack(f"<I{len(entries)}I{len(entries)}H{len(data)}H", len(entries),
                       *(start for start, _ in entries), *(index for _, index in entries), *data)
    return V1Encoded(blob, tuple(kept), tuple(refused), tuple(frameless), len(entries))


def _index(kept: Sequence[V1Function]) -> tuple[list[tuple[int, int]], list[int]]:
    """UNW_INDEX entries (start, index) and UNW_DATA: a CANT_UNWIND entry 2
    bytes past a function's end where more than 4 bytes lie before the
    next (padding is not worth one), and after the last."""
    data: list[int] = []
    index_of: dict[tuple[int, ...], int] = {}  # identical function data is stored once
    entries: list[tuple[int, int]] = []
    for number, function in enumerate(kept):
        before = kept[number - 1] if number else None
        if before is not None and function.start < before.end:
            raise EncodeError(f"functions overlap: {before.name} and {function.name}")
        if before is not None and function.start - before.end > CANT_UNWIND_GAP:
            entries.append((before.end + 2, CANT_UNWIND))
        words = (len(function.rows), *(w for row in function.rows for w in row.packed()))
        index = index_of.get(words)
        if index is None:
            index = index_of[words] = len(data)
            if index >= CANT_UNWIND:
                raise TableOverflow(f"v1 UNW_DATA passed {CANT_UNWIND} half-words at {function.name}")
            data.extend(words)
        entries.append((function.start, index))
    if kept:
        entries.append((kept[-1].end + 2, CANT_UNWIND))
    return entries, data


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
    def from_blob(cls, blob: bytes) -> V1Table:
        if len(blob) < 4:
            raise CorruptTable("header", f"{len(blob)} bytes; the entry count needs 4", 0, "v1")
        (count,) = struct.unpack_from("<I", blob)
        index_bytes = 6 * count
        if 4 + index_bytes > len(blob):
            raise CorruptTable("header", f"{count} index entries need {index_bytes} bytes; "
                               f"the blob has {len(blob) - 4} after the header", 0, "v1")
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

    def segments(self) -> Iterator[tuple[int, tuple[int, int] | None]]:
        """What `lookup` finds, offset by offset: (first offset, (CFA offset,
        RA offset) or None) in increasing order, each holding up to the next
        one (none before the first function)."""
        for position, start in enumerate(self.starts):
            high = self.starts[position + 1] if position + 1 < len(self.starts) else None
            yield start, None  # a function's very start has nothing
            rows = self.rows[position]
            if rows is None or (high is not None and start + 1 >= high):
                continue
            yield start + 1, (0, 0)  # before its first row
            ra = 0
            for row_offset, row_cfa, row_ra in rows:
                at = max(start + 1, start + row_offset)
                if high is not None and at >= high:
                    break
                ra = row_ra or ra
                yield at, (row_cfa, ra)


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


def dump_v1(table: V1Table, text_base: int | None) -> str:
    """A stable, readable listing of a v1 blob."""
    lines = [f"v1 unwind info, {base_line(text_base)}", f"index entries: {len(table.starts)}"]
    text_base = text_base or 0
    for position, (start, rows) in enumerate(zip(table.starts, table.rows)):
        if rows is None:
            lines.append(f"  entry {position} at {text_base + start:#x}: CANT_UNWIND")
            continue
        lines.append(f"  entry {position} at {text_base + start:#x}: {len(rows)} rows")
        for offset, cfa, ra in rows:
            where = f"return address at CFA - {ra}" if ra else "return address as the row before"
            lines.append(f"    +{offset:#x}: CFA = sp + {cfa}, {where}")
    return "\n".join(lines) + "\n"
