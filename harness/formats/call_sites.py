"""Return addresses a stack scanner accepts: every address just after a
call instruction in a module's code, as lr would hold it (Thumb bit set for
Thumb code). The table of the `scan` unwinder (harness.unwind.scan).

A scanner (LUL's and Breakpad's last resort, seed 001) reads the words up
the stack and takes one as the next return address only if the instruction
before it is a call. Checking the code at run time and looking the word up
here are the same test: the table holds every address a where the bytes
before a decode as BL or BLX (immediate, 32 bits) or BLX register (16 bits)
in Thumb code, or as BL or BLX in ARM code (word aligned), wherever those
bytes are: a literal pool that happens to look like a call counts, as it
does for a scanner.

A blob is, little-endian: uint32 N, then N uint32 return addresses as
offsets from the text base (bit 0 set for Thumb), ascending.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from harness.errors import CorruptTable, TableOverflow
from harness.formats.chrome_v2.dump import base_line
from harness.program import CodeMap
from harness.thumb.encoding import arm_call_length, call_length

Ranges = Sequence[tuple[int, int]]  # [start, end) address ranges


# Where a Thumb call may start (its high bytes: F0-F7 then C0 and up for
# BL and BLX, 47 for BLX register): a superset of call_length's, so that
# the regular expression engine skips the rest of the code in C.
_MAY_CALL = re.compile(rb"(?=[\x00-\xff](?:[\xf0-\xf7][\x00-\xff][\xc0-\xff]|\x47))", re.DOTALL)


def return_addresses(code_at: Callable[[int, int], bytes], thumb: Ranges, arm: Ranges = ()) -> list[int]:
    """Every return address a call in the given code leaves in lr, sorted."""
    found: set[int] = set()
    for start, end in thumb:
        code = code_at(start, end - start)
        for match in _MAY_CALL.finditer(code):
            at = match.start()
            length = call_length(code[at:at + 4]) if at % 2 == 0 else 0
            if length:
                found.add(start + at + length + 1)
    for start, end in arm:
        code = code_at(start, end - start)
        for at in range(-start % 4, len(code) - 3, 4):
            if arm_call_length(code[at:at + 4]):
                found.add(start + at + 4)
    return sorted(found)


def mapped_return_addresses(code_map: CodeMap, code_at: Callable[[int, int], bytes]) -> list[int]:
    """`return_addresses` over a module's executable sections: ARM where
    its symbols say so, Thumb elsewhere."""
    arm = sorted((start, end) for start, end, _ in code_map.arm_spans)
    thumb = []
    for low, high in code_map.ranges:
        at = low
        for start, end in arm:
            if start < high and end > at:
                if start > at:
                    thumb.append((at, start))
                at = max(at, end)
        if at < high:
            thumb.append((at, high))
    return return_addresses(code_at, thumb, arm)


def encode_call_sites(addresses: Iterable[int], text_base: int) -> bytes:
    offsets = sorted({address - text_base for address in addresses})
    if offsets and (offsets[0] < 0 or offsets[-1] > 0xFFFFFFFF):
        raise TableOverflow("call-site offsets must lie in the 32 bits above the text base")
    return struct.pack(f"<I{len(offsets)}I", len(offsets), *offsets)


class CallSites:
    """A validated call-site blob: `holds(offset)` says whether a word (as an
    offset from the text base) is a return address."""

    def __init__(self, offsets: Sequence[int]):
        self.offsets = tuple(offsets)

    @classmethod
    def from_blob(cls, blob: bytes) -> CallSites:
        if len(blob) < 4:
            raise CorruptTable("header", f"{len(blob)} bytes; the count needs 4", 0, "call-site")
        (count,) = struct.unpack_from("<I", blob)
        if 4 + 4 * count != len(blob):
            raise CorruptTable("header", f"{count} addresses take {4 + 4 * count} bytes; the blob has {len(blob)}",
                               0, "call-site")
        offsets = struct.unpack_from(f"<{count}I", blob, 4)
        for position in range(1, count):
            if offsets[position] <= offsets[position - 1]:
                raise CorruptTable("addresses", f"{offsets[position]:#x} does not ascend", 4 + 4 * position,
                                   "call-site")
        return cls(offsets)

    def holds(self, offset: int) -> bool:
        at = bisect_left(self.offsets, offset)
        return at < len(self.offsets) and self.offsets[at] == offset


def dump_call_sites(table: CallSites, text_base: int | None) -> str:
    lines = [f"call sites, {base_line(text_base)}", f"return addresses: {len(table.offsets)}"]
    lines += [f"  {(text_base or 0) + offset:#x}" for offset in table.offsets]
    return "\n".join(lines) + "\n"
