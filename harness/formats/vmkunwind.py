"""vmkunwind tables, adapted to ARM32 Thumb: encoder, reader and dump.

VMware built vmkunwind for ESXi (seed 002): a table made at build time
from `.eh_frame` mapping every code address, epilogues included, to a
triple (frame-pointer offset, frame-pointer-relative flag, CFA offset),
for stack walks that restore nothing but the frame pointer. On x86-64 the
return address always sits just below the CFA; on ARM it may still be in
lr, so the ARM32 triple grows a fourth field. A row here:

    CFA      = (r7 if `base_r7` else sp) + cfa_offset
    caller r7 = [CFA - 4 * r7_slot]   (r7_slot 0: r7 unchanged)
    caller pc = [CFA - 4 * lr_slot]   (lr_slot 0: the return address is still in lr)
    caller sp = CFA

A blob is, little-endian (our layout; the seed gives no byte layout):

    uint32  N ranges, uint32 M rows
    N uint32 range starts (offsets from the text base, ascending)
    N uint16 row indices (0xFFFF: no row from this start on), padded to 4 bytes
    M rows of a uint32 (bit 31 base_r7, bits 0-30 cfa_offset) and two uint16
    (r7_slot, lr_slot)

Each distinct row is stored once. A CFI row the triple cannot express (a
CFA through another register, a save that is not a word below the CFA, a
rule the CFI reader flagged) gets no row: that address range alone has no
information, and the encoder says which and why.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from harness.errors import CorruptTable, TableOverflow
from harness.formats.chrome_v2.dump import base_line
from harness.formats.row_ranges import Ranges, row_ranges
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, SP

FP = 7  # the Thumb frame pointer
NO_ROW = 0xFFFF
MAX_CFA_OFFSET = 0x7FFFFFFC
MAX_SLOT = 0xFFFF
ROW_BYTES = 8


class VmkRow(NamedTuple):
    """One address range's rule (see the module)."""

    base_r7: bool
    cfa_offset: int
    r7_slot: int  # 0: r7 not saved
    lr_slot: int  # 0: the return address is in lr

    def packed(self) -> bytes:
        return struct.pack("<IHH", self.base_r7 << 31 | self.cfa_offset, self.r7_slot, self.lr_slot)

    @classmethod
    def unpacked(cls, data: bytes, at: int) -> VmkRow:
        word, r7_slot, lr_slot = struct.unpack_from("<IHH", data, at)
        return cls(bool(word >> 31), word & 0x7FFFFFFF, r7_slot, lr_slot)

    def describe(self) -> str:
        r7 = f"r7 = [CFA - {4 * self.r7_slot}]" if self.r7_slot else "r7 unchanged"
        pc = f"pc = [CFA - {4 * self.lr_slot}]" if self.lr_slot else "pc = lr"
        return f"CFA = {'r7' if self.base_r7 else 'sp'} + {self.cfa_offset}, {r7}, {pc}"


class Inexpressible(Exception):
    """A CFI row the vmkunwind triple cannot express."""


def vmk_row(row: CfiRow) -> VmkRow:
    """The triple for one CFI row's state, or Inexpressible saying why."""
    if row.problem:
        raise Inexpressible(row.problem)
    if row.cfa_reg not in (SP, FP):
        raise Inexpressible(f"CFA through r{row.cfa_reg} (vmkunwind takes sp or r7)")
    if not 0 <= row.cfa_offset <= MAX_CFA_OFFSET or row.cfa_offset % 4:
        raise Inexpressible(f"CFA offset {row.cfa_offset} (a multiple of 4 up to {MAX_CFA_OFFSET})")
    saved = dict(row.saved)
    return VmkRow(row.cfa_reg == FP, row.cfa_offset, _slot(saved.get(FP), "r7"), _slot(saved.get(LR), "lr"))


def _slot(offset: int | None, name: str) -> int:
    if offset is None:
        return 0
    if offset >= 0 or offset % 4 or -offset > 4 * MAX_SLOT:
        raise Inexpressible(f"{name} saved at CFA{offset:+d} (a word 4 to {4 * MAX_SLOT} bytes below the CFA)")
    return -offset // 4


class VmkEncoded(NamedTuple):
    blob: bytes
    ranges: int
    rows: int
    refused: tuple[tuple[str, str], ...]  # (function, "address: why") per row without a triple


def encode_vmkunwind(functions: Sequence[FunctionCfi], text_base: int) -> VmkEncoded:
    """The vmkunwind blob for `functions` (they must not overlap)."""
    ranges, refused = row_ranges(functions, text_base, lambda row: vmk_row(row).packed(), Inexpressible)
    return _serialize(ranges, refused)


def _serialize(ranges: Ranges, refused: tuple[tuple[str, str], ...]) -> VmkEncoded:
    words = list(dict.fromkeys(word for _, word in ranges if word is not None))
    if len(words) >= NO_ROW:
        raise TableOverflow(f"{len(words)} distinct vmkunwind rows; the 16-bit index holds {NO_ROW - 1}")
    if ranges and ranges[-1][0] > 0xFFFFFFFF:
        raise TableOverflow("vmkunwind range starts have 32 bits")
    index = {word: number for number, word in enumerate(words)}
    count = len(ranges)
    blob = struct.pack(f"<II{count}I{count}H", count, len(words), *(start for start, _ in ranges),
                       *(NO_ROW if word is None else index[word] for _, word in ranges))
    blob += bytes(-len(blob) % 4) + b"".join(words)
    return VmkEncoded(blob, count, len(words), refused)


class VmkTable:
    """A validated vmkunwind blob."""

    def __init__(self, starts: Sequence[int], rows: Sequence[VmkRow | None]):
        self.starts = tuple(starts)
        self.rows = tuple(rows)

    @classmethod
    def from_blob(cls, blob: bytes) -> VmkTable:
        if len(blob) < 8:
            raise CorruptTable("header", f"{len(blob)} bytes; the two counts need 8", 0, "vmkunwind")
        count, distinct = struct.unpack_from("<II", blob)
        index_end = 8 + 6 * count
        rows_at = index_end + (-index_end % 4)
        if rows_at + ROW_BYTES * distinct != len(blob):
            raise CorruptTable("header", f"{count} ranges and {distinct} rows take {rows_at + ROW_BYTES * distinct} "
                               f"bytes; the blob has {len(blob)}", 0, "vmkunwind")
        starts = struct.unpack_from(f"<{count}I", blob, 8)
        indices = struct.unpack_from(f"<{count}H", blob, 8 + 4 * count)
        for position in range(1, count):
            if starts[position] <= starts[position - 1]:
                raise CorruptTable("ranges", f"range start {starts[position]:#x} does not ascend",
                                   8 + 4 * position, "vmkunwind")
        for position, row_index in enumerate(indices):
            if row_index != NO_ROW and row_index >= distinct:
                raise CorruptTable("ranges", f"range {position} names row {row_index} of {distinct}",
                                   8 + 4 * count + 2 * position, "vmkunwind")
        rows = [VmkRow.unpacked(blob, rows_at + ROW_BYTES * number) for number in range(distinct)]
        return cls(starts, [None if i == NO_ROW else rows[i] for i in indices])

    def segments(self) -> Iterator[tuple[int, object]]:
        """What `lookup_range` finds, offset by offset: (first offset, what it
        finds or None) in increasing order, each holding up to the next one
        (none before the first)."""
        return zip(self.starts, self.rows)

    def lookup_range(self, offset: int) -> tuple[VmkRow | None, int | None, int | None]:
        """The row for `offset` (None: no information) and the offsets
        [low, high) that find the same (None: without bound that side)."""
        position = bisect_right(self.starts, offset) - 1
        high = self.starts[position + 1] if position + 1 < len(self.starts) else None
        if position < 0:
            return None, None, high
        return self.rows[position], self.starts[position], high


def dump_vmkunwind(table: VmkTable, text_base: int | None) -> str:
    """A stable, readable listing of a vmkunwind blob."""
    lines = [f"vmkunwind, {base_line(text_base)}", f"ranges: {len(table.starts)}, "
             f"distinct rows: {len({row for row in table.rows if row is not None})}"]
    for start, row in zip(table.starts, table.rows):
        lines.append(f"  {(text_base or 0) + start:#x}: {row.describe() if row else 'no row'}")
    return "\n".join(lines) + "\n"
