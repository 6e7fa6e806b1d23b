"""Quicken Unwind Tables (QUT), WeChat's tables for fast ARM32 backtraces
(seed 003; Tencent Matrix's libwechatbacktrace): instruction set, encoder
from CFI rows or EXIDX entries, reader, dump.

QUT keeps only what a backtrace needs: the CFA ("vsp"), lr, the frame
pointers r7 (Thumb) and r11 (ARM), r10 (ART's JNI frames) and r4 (ART's dex
pc). A run of EHABI or DWARF arithmetic collapses into one vsp rule and one
load per register, each as an offset below the final vsp. The ARM32
instruction bytes, as Matrix's encoder documents them:

    00nnnnnn            vsp += n << 2
    01nnnnnn            vsp -= n << 2
    10000000 / 10000010 vsp = r7 / r11
    10000001 / 10000011 vsp = r7 / r11 + 8, lr = [vsp - 4], r7 / r11 = [vsp - 8]  (a frame record)
    10000100            vsp = sp
    10000101 0nnnnnnn   vsp = r7 + (n << 2)       10000110 0nnnnnnn: the same from r11
    10010101 0nnnnnnn   vsp = r10 + (n << 2)      (ART's JNI frames)
    10010110 SLEB128    vsp = the value
    10010111            dex pc = r4               (ART; no effect on the frame)
    10011001            end of the instructions
    10011111            finish: the outermost frame
    1010nnnn 1011nnnn 1100nnnn 1101nnnn 1110nnnn
                        r4, r7, r10, r11, lr = [vsp - (n << 2)]
    11111001 ... 11111110 SLEB128
                        r7, r10, r11, sp, lr, pc = [vsp - value]
    11111111 SLEB128    vsp += value
    (anything else is reserved)

After the run, caller sp = vsp (unless sp was loaded) and caller pc = lr
(unless pc was). The table (our layout, after Matrix's quidx and qutbl,
which are laid out like EXIDX): uint32 N, then N entries of (uint32 start
offset from the text base, uint32 data), then the instruction bytes. Data 1
means no entry from this start on; bit 31 set holds up to three instruction
bytes inline (bits 23-16 first, padded with end); otherwise it is the byte
offset of the entry's run in the instruction bytes (each run ends with end,
and is stored once).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from harness.errors import CorruptTable, TableOverflow
from harness.formats import ehabi
from harness.formats.chrome_v2.dump import base_line
from harness.formats.row_ranges import Ranges, add_range, row_ranges
from harness.program import CfiRow, FunctionCfi
from harness.registers import LR, PC, SP

END, FINISH, NO_ENTRY, INLINE = 0x99, 0x9F, 1, 1 << 31
KEPT = (4, 7, 10, 11, LR)  # what QUT restores besides sp and pc
SHORT_LOAD = {4: 0xA0, 7: 0xB0, 10: 0xC0, 11: 0xD0, LR: 0xE0}  # 1xxxnnnn: r = [vsp - (n << 2)]
LONG_LOAD = {7: 0xF9, 10: 0xFA, 11: 0xFB, SP: 0xFC, LR: 0xFD, PC: 0xFE}  # + SLEB128
SET_VSP = {7: 0x80, 11: 0x82, SP: 0x84}
SET_VSP_PLUS = {7: 0x85, 11: 0x86, 10: 0x95}  # + 0nnnnnnn
FRAME_RECORD = {7: 0x81, 11: 0x83}


class SetVsp(NamedTuple):
    reg: int
    offset: int = 0  # vsp = r[reg] + offset


class FrameRecord(NamedTuple):
    reg: int  # vsp = r[reg] + 8, lr = [vsp - 4], r[reg] = [vsp - 8]


class VspAdd(NamedTuple):
    amount: int


class VspSet(NamedTuple):
    value: int


class Load(NamedTuple):
    reg: int
    below: int  # r[reg] = [vsp - below]


class Mark(NamedTuple):
    what: str  # "end", "finish" or "dex pc"


Op = SetVsp | FrameRecord | VspAdd | VspSet | Load | Mark


# ------------------------------------------------------------------ decoding


def _sleb(data: bytes, at: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 28:
            raise CorruptTable(where, "SLEB128 operand runs past the run", at, "qut")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        shift, at = shift + 7, at + 1
        if not byte & 0x80:
            return (value - (1 << shift) if byte & 0x40 else value), at


def _operand(data: bytes, at: int, where: str) -> int:
    if at >= len(data) or data[at] & 0x80:
        raise CorruptTable(where, "operand byte missing or above 0x7f", at, "qut")
    return data[at] << 2


def decode_run(data: bytes, at: int, where: str = "run") -> tuple[Op, ...]:
    """The ops from byte `at` to the end mark (CorruptTable naming the byte
    if a byte is reserved, an operand runs out, or no end comes)."""
    ops: list[Op] = []
    regs_by_short = {prefix: reg for reg, prefix in SHORT_LOAD.items()}
    while at < len(data):
        byte, at = data[at], at + 1
        if byte < 0x40:  # 00nnnnnn
            ops.append(VspAdd(byte << 2))
        elif byte < 0x80:  # 01nnnnnn
            ops.append(VspAdd(-((byte & 0x3F) << 2)))
        elif byte in SET_VSP.values():
            ops.append(SetVsp(next(r for r, b in SET_VSP.items() if b == byte)))
        elif byte in FRAME_RECORD.values():
            ops.append(FrameRecord(next(r for r, b in FRAME_RECORD.items() if b == byte)))
        elif byte in SET_VSP_PLUS.values():
            ops.append(SetVsp(next(r for r, b in SET_VSP_PLUS.items() if b == byte), _operand(data, at, where)))
            at += 1
        elif byte == 0x96:
            value, at = _sleb(data, at, where)
            ops.append(VspSet(value))
        elif byte in (0x97, END, FINISH):
            ops.append(Mark({0x97: "dex pc", END: "end", FINISH: "finish"}[byte]))
            if byte != 0x97:
                return tuple(ops)
        elif byte & 0xF0 in regs_by_short:
            ops.append(Load(regs_by_short[byte & 0xF0], (byte & 0x0F) << 2))
        elif byte in LONG_LOAD.values() or byte == 0xFF:
            value, at = _sleb(data, at, where)
            reg = next((r for r, b in LONG_LOAD.items() if b == byte), None)
            ops.append(VspAdd(value) if reg is None else Load(reg, value))
        else:
            raise CorruptTable(where, f"reserved instruction byte {byte:#04x}", at - 1, "qut")
    raise CorruptTable(where, "no end of instructions (0x99) before the table ends", at, "qut")


# ------------------------------------------------------------------ encoding


class Inexpressible(Exception):
    """A frame state QUT's instructions cannot express."""


def state_run(cfa_reg: int, cfa_offset: int, saved: dict[int, int]) -> bytes:
    """The run for a frame whose CFA is r[cfa_reg] + cfa_offset and whose
    registers lie at CFA + saved[reg]: vsp rule, loads of KEPT, end."""
    if cfa_offset % 4:
        raise Inexpressible(f"CFA offset {cfa_offset} is not a multiple of 4")
    out = bytearray()
    loads = {reg: -offset for reg, offset in saved.items() if reg in KEPT or reg == PC}
    if cfa_reg in FRAME_RECORD and cfa_offset == 8 and loads.get(cfa_reg) == 8 and loads.get(LR) == 4:
        out.append(FRAME_RECORD[cfa_reg])
        del loads[cfa_reg], loads[LR]
    elif cfa_reg in SET_VSP_PLUS and 0 <= cfa_offset <= 0x1FC:
        out += bytes((SET_VSP_PLUS[cfa_reg], cfa_offset >> 2))
    elif cfa_reg in SET_VSP:
        out += (bytes((SET_VSP[cfa_reg],)) if cfa_reg != SP else b"") + _vsp_add(cfa_offset)
    else:
        raise Inexpressible(f"CFA r{cfa_reg}{cfa_offset:+d} (QUT sets vsp from sp, r7, r10 or r11)")
    for reg, below in sorted(loads.items()):
        if below % 4 or below <= 0:
            raise Inexpressible(f"r{reg} at CFA{-below:+d} (a word below the CFA)")
        if below <= 60 and reg in SHORT_LOAD:
            out.append(SHORT_LOAD[reg] | below >> 2)
        elif reg in LONG_LOAD:
            out += bytes((LONG_LOAD[reg],)) + _sleb_bytes(below)
        else:
            raise Inexpressible(f"r{reg} at CFA-{below} (QUT reaches r4 60 bytes below the CFA at most)")
    return bytes(out + bytes((END,)))


def _vsp_add(amount: int) -> bytes:
    if amount == 0:
        return b""
    if -0xFC <= amount <= 0xFC:
        return bytes(((amount >> 2) if amount > 0 else 0x40 | (-amount >> 2),))
    return b"\xff" + _sleb_bytes(amount)


def _sleb_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40):
            return bytes(out + bytes((byte,)))
        out.append(byte | 0x80)


def row_run(row: CfiRow) -> bytes:
    """The run for one CFI row."""
    if row.problem:
        raise Inexpressible(row.problem)
    return state_run(row.cfa_reg, row.cfa_offset, dict(row.saved))


def exidx_run(ops: Sequence[ehabi.Op]) -> bytes:
    """The run for an EHABI entry's ops, collapsed as Matrix's converter
    does: the vsp arithmetic to one rule, each pop to a load below it."""
    flat = ehabi.flatten(tuple(ops))
    if flat is None:
        raise Inexpressible("an EHABI run QUT cannot collapse (refuse, a popped sp, a later vsp = rN)")
    return state_run(flat.base, flat.end, {reg: offset - flat.end for reg, offset in flat.loads})


class QutEncoded(NamedTuple):
    blob: bytes
    entries: int
    source: str  # "CFI" or "EXIDX"
    refused: tuple[tuple[str, str], ...]  # (function or entry, why)


def encode_from_cfi(functions: Sequence[FunctionCfi], text_base: int) -> QutEncoded:
    """A QUT table with an entry per CFI row (equal neighbours merged)."""
    entries, refused = row_ranges(functions, text_base, row_run, Inexpressible)
    return QutEncoded(_serialize(entries), len(entries), "CFI", refused)


def encode_from_exidx(entries: Sequence, end: int | None, text_base: int) -> QutEncoded:
    """A QUT table with an entry per `.ARM.exidx` entry (arm_exidx.ExidxEntry);
    `end`: where the last entry's function ends."""
    found: Ranges = []
    refused: list[tuple[str, str]] = []
    for entry in sorted(entries, key=lambda e: e.start):
        run = None
        if entry.kind not in ("cantunwind", "unreadable") and entry.start >= text_base:
            try:
                run = exidx_run(entry.ops)
            except Inexpressible as why:
                refused.append((f"{entry.start:#x}", str(why)))
        if entry.start >= text_base:
            add_range(found, entry.start - text_base, run)
    if end is not None and end > text_base:
        add_range(found, end - text_base, None)
    return QutEncoded(_serialize(found), len(found), "EXIDX", tuple(refused))


def _serialize(entries: Ranges) -> bytes:
    table = bytearray()
    where: dict[bytes, int] = {}
    words = []
    for start, run in entries:
        if start > 0xFFFFFFFF:
            raise TableOverflow("QUT entry starts have 32 bits")
        if run is None:
            data = NO_ENTRY
        elif len(run) <= 3:
            padded = run + bytes((END,)) * (3 - len(run))
            data = INLINE | int.from_bytes(padded, "big")
        else:
            if run not in where:
                where[run] = len(table)
                table += run
            data = where[run]
            if data >= INLINE:
                raise TableOverflow("QUT instruction bytes passed 2 GiB")
        words += [start, data]
    return struct.pack(f"<I{len(words)}I", len(entries), *words) + bytes(table)


# ------------------------------------------------------------------ reading


class QutTable:
    """A validated QUT blob: entry starts and each entry's ops (None: no entry)."""

    def __init__(self, starts: Sequence[int], runs: Sequence[tuple[Op, ...] | None]):
        self.starts = tuple(starts)
        self.runs = tuple(runs)

    @classmethod
    def from_blob(cls, blob: bytes) -> QutTable:
        if len(blob) < 4:
            raise CorruptTable("header", f"{len(blob)} bytes; the entry count needs 4", 0, "qut")
        (count,) = struct.unpack_from("<I", blob)
        if 4 + 8 * count > len(blob):
            raise CorruptTable("header", f"{count} entries need {8 * count} bytes; the blob has "
                               f"{len(blob) - 4} after the count", 0, "qut")
        words = struct.unpack_from(f"<{2 * count}I", blob, 4)
        table = bytes(blob[4 + 8 * count:])
        starts, runs = [], []
        for number in range(count):
            start, data = words[2 * number], words[2 * number + 1]
            if starts and start <= starts[-1]:
                raise CorruptTable("index", f"entry start {start:#x} does not ascend", 4 + 8 * number, "qut")
            starts.append(start)
            where = f"entry {number} ({start:#x})"
            if data == NO_ENTRY:
                runs.append(None)
            elif data & INLINE:
                runs.append(decode_run((data & 0xFFFFFF).to_bytes(3, "big") + bytes((END,)), 0, where))
            elif data >= len(table):
                raise CorruptTable(where, f"run offset {data} is past the {len(table)} instruction bytes",
                                   8 + 8 * number, "qut")
            else:
                runs.append(decode_run(table, data, where))
        return cls(starts, runs)

    def segments(self) -> Iterator[tuple[int, object]]:
        """What `lookup_range` finds, offset by offset: (first offset, what it
        finds or None) in increasing order, each holding up to the next one
        (none before the first)."""
        return zip(self.starts, self.runs)

    def lookup_range(self, offset: int) -> tuple[tuple[Op, ...] | None, int | None, int | None]:
        """The ops for `offset` (None: no entry) and the offsets [low, high)
        that find the same (None: without bound that side)."""
        position = bisect_right(self.starts, offset) - 1
        high = self.starts[position + 1] if position + 1 < len(self.starts) else None
        if position < 0:
            return None, None, high
        return self.runs[position], self.starts[position], high


def describe(ops: Sequence[Op]) -> str:
    def one(op: Op) -> str:
        if isinstance(op, SetVsp):
            return f"vsp = {_reg(op.reg)}" + (f" + {op.offset}" if op.offset else "")
        if isinstance(op, FrameRecord):
            return f"vsp = {_reg(op.reg)} + 8, lr = [vsp - 4], {_reg(op.reg)} = [vsp - 8]"
        if isinstance(op, VspAdd):
            return f"vsp {'+' if op.amount >= 0 else '-'}= {abs(op.amount)}"
        if isinstance(op, VspSet):
            return f"vsp = {op.value:#x}"
        if isinstance(op, Load):
            return f"{_reg(op.reg)} = [vsp - {op.below}]"
        return op.what
    return "; ".join(one(op) for op in ops)


def _reg(reg: int) -> str:
    return {SP: "sp", LR: "lr", PC: "pc"}.get(reg, f"r{reg}")


def dump_qut(table: QutTable, text_base: int | None) -> str:
    """A stable, readable listing of a QUT blob."""
    lines = [f"QUT, {base_line(text_base)}", f"entries: {len(table.starts)}"]
    for start, ops in zip(table.starts, table.runs):
        lines.append(f"  {(text_base or 0) + start:#x}: {describe(ops) if ops is not None else 'no entry'}")
    return "\n".join(lines) + "\n"
