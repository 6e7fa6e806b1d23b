"""The EHABI tables a compiler and linker write for the generated functions
(ARM IHI 0038), written here from the specification so that the ground truth
the harness is judged against owes nothing to the harness's own encoders.

`frame_instructions` turns a frame state (one CFI row: CFA = register +
offset, saved registers at CFA-relative slots, d registers as DWARF 256+n)
into the unwind instructions of section 10.3, table 4, that undo it; the
instructions are the shortest of the forms a compiler picks:

    00-3f / 40-7f   vsp = vsp +/- 4..0x100          9n      vsp = r[n]
    3f xx           vsp = vsp + 0x104..0x200        b2 u    vsp = vsp + 0x204 + (u << 2)
    b1 0m           pop r0-r3 under a mask          8m mm   pop r4-r15 under a mask
    a0+n / a8+n     pop r4-r[4+n] (and lr)          b0      finish
    d0+n            pop d8-d[8+n]                   c9 / c8 pop d0-d15 / d16-d31 ranges

`write_exidx` lays out `.ARM.exidx` and `.ARM.extab` (sections 6-7) for
(function start, instructions) as a linker does: prel31 offsets, up to three
instruction bytes inline (personality 0, Su16), longer runs in `.ARM.extab`
(personality 1, Lu16) with identical entries shared, and a closing
EXIDX_CANTUNWIND entry at the end of the code.
"""

from __future__ import annotations

from typing import Sequence

from harness.errors import EncodeError, TableOverflow
from harness.program import CfiRow, ExidxSections
from harness.registers import DWARF_D0, LR, PC, SP

FINISH = 0xB0
EXIDX_CANTUNWIND = 1
EXIDX, EXTAB = ".ARM.exidx", ".ARM.extab"


class Inexpressible(Exception):
    """A frame state no sequence of EHABI instructions undoes: the function
    gets EXIDX_CANTUNWIND instead."""


# ------------------------------------------------------------ instructions


def _uleb128(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def vsp_add(amount: int) -> bytes:
    """vsp = vsp + amount (a multiple of 4), in the fewest bytes."""
    if amount < 0:  # 01xxxxxx subtracts 4..0x100; whole steps first
        steps = [0x100] * (-amount // 0x100) + ([-amount % 0x100] if -amount % 0x100 else [])
        return bytes(0x40 | (step - 4) >> 2 for step in steps)
    if amount == 0:
        return b""
    if amount <= 0x100:
        return bytes([(amount - 4) >> 2])
    if amount <= 0x200:  # two short adds, the first of 0x100
        return bytes([0x3F, (amount - 0x104) >> 2])
    return b"\xb2" + _uleb128((amount - 0x204) >> 2)


def pop_core(regs: list[int]) -> bytes:
    """Pop core registers `regs` (ascending) from consecutive words: r0-r3
    lie below r4-r15 and go first (b1); then r4-r[4+n] with or without lr
    (a0+n, a8+n) when the rest is such a run, else the 12-bit mask (8m mm)."""
    low = sum(1 << r for r in regs if r < 4)
    high = [r for r in regs if r >= 4]
    out = bytearray([0xB1, low]) if low else bytearray()
    if not high:
        return bytes(out)
    run = [r for r in high if r != LR]
    if 1 <= len(run) <= 8 and run == list(range(4, 4 + len(run))):
        out.append((0xA8 if LR in high else 0xA0) | (len(run) - 1))
    else:
        mask = sum(1 << (r - 4) for r in high)
        out += bytes([0x80 | mask >> 8, mask & 0xFF])
    return bytes(out)


def pop_vfp(first: int, count: int) -> bytes:
    """Pop d[first]..d[first+count-1] saved by VPUSH: d8-d15 runs from d8 as
    d0+n; others as c9 (d0-d15) or c8 (d16-d31), split where they cross d16."""
    last = first + count - 1
    if first < 16 <= last:
        return pop_vfp(first, 16 - first) + pop_vfp(16, last - 15)
    if first == 8:
        return bytes([0xD0 | (count - 1)])
    if first >= 16:
        return bytes([0xC8, (first - 16) << 4 | (count - 1)])
    return bytes([0xC9, first << 4 | (count - 1)])


def _bank(reg: int) -> str:
    """'core' (r0-r15) or 'vfp' (d0-d31 as DWARF 256-287)."""
    if 0 <= reg <= 15:
        return "core"
    if DWARF_D0 <= reg < DWARF_D0 + 32:
        return "vfp"
    raise Inexpressible(f"register {reg} is neither r0-r15 nor d0-d31")


def _runs(row: CfiRow) -> list[tuple[int, str, list[int]]]:
    """The saves as (first slot, bank, registers) runs that one pop each
    restores: consecutive slots, one bank, core registers ascending (any gap
    in numbers), d registers consecutive. Unaligned or overlapping slots
    cannot be popped."""
    runs: list[tuple[int, str, list[int]]] = []
    end = None  # CFA-relative end of the last slot
    for offset, reg in sorted((offset, reg) for reg, offset in row.saved):
        bank = _bank(reg)
        name = f"d{reg - DWARF_D0}" if bank == "vfp" else f"r{reg}"
        if offset % 4:
            raise Inexpressible(f"{name} saved at unaligned CFA{offset:+d}")
        if end is not None and offset < end:
            raise Inexpressible(f"{name} at CFA{offset:+d} overlaps another save")
        last = runs[-1] if runs else None
        if (last is not None and offset == end and last[1] == bank
                and (reg == last[2][-1] + 1 if bank == "vfp" else reg > last[2][-1])):
            last[2].append(reg)
        else:
            runs.append((offset, bank, [reg]))
        end = offset + (8 if bank == "vfp" else 4)
    return runs


MAX_DOWN, MAX_UP = 0x1000, 1 << 32  # bytes vsp may move down or up: beyond, no frame


def _moved(amount: int) -> bytes:
    if not -MAX_DOWN <= amount <= MAX_UP:
        raise Inexpressible(f"vsp would move {amount:+d} bytes")
    return vsp_add(amount)


def frame_instructions(row: CfiRow) -> bytes:
    """The instructions that undo the frame `row` describes, ending in
    finish; Inexpressible if EHABI has none."""
    if row.cfa_offset % 4:
        raise Inexpressible(f"CFA offset {row.cfa_offset} is not a multiple of 4")
    out = bytearray()
    if row.cfa_reg != SP:
        if not 0 <= row.cfa_reg <= 15 or row.cfa_reg == PC:
            raise Inexpressible(f"CFA through r{row.cfa_reg}")
        out.append(0x90 | row.cfa_reg)
    vsp = -row.cfa_offset  # CFA-relative: vsp = CFA - offset to begin with
    for slot, bank, regs in _runs(row):
        out += _moved(slot - vsp)
        if bank == "vfp":
            out += pop_vfp(regs[0] - DWARF_D0, len(regs))
            vsp = slot + 8 * len(regs)
        else:
            out += pop_core(regs)
            vsp = slot + 4 * len(regs)
    out += _moved(-vsp)  # up to the CFA: the caller's sp
    out.append(FINISH)
    return bytes(out)


# ------------------------------------------------------- instruction bounds


def _operand_check(op: int, operand: int) -> str | None:
    """Why the two-byte instruction `op operand` is spare, if it is."""
    if op == 0xB1 and (operand == 0 or operand & 0xF0):
        return f"spare encoding b1 {operand:02x}"
    if op == 0xB3 and (operand >> 4) + (operand & 0x0F) + 1 > 16:
        return f"b3 {operand:02x} names registers past d15"
    if op == 0xC8 and 16 + (operand >> 4) + (operand & 0x0F) + 1 > 32:
        return f"c8 {operand:02x} names registers past d31"
    return None


def _instruction_length(run: bytes, at: int) -> int:
    """Bytes of the instruction at `at`; ValueError saying why for one that is
    spare, reserved, an Intel WMMX pop (never in these tables) or cut short."""
    op = run[at]
    if op in (0x9D, 0x9F):
        raise ValueError(f"reserved instruction {op:#04x} (vsp = r{op & 0x0F}) at byte {at}")
    if 0xB4 <= op <= 0xB7 or 0xCA <= op <= 0xCF or op >= 0xD8:
        raise ValueError(f"spare encoding {op:#04x} at byte {at}")
    if 0xC0 <= op <= 0xC7:
        raise ValueError(f"Intel Wireless MMX pop {op:#04x} at byte {at}")
    if op == 0xB2:
        end = at + 1
        while end < len(run) and run[end] & 0x80:
            end += 1
        if end >= len(run):
            raise ValueError(f"unterminated ULEB128 after 0xb2 at byte {at}")
        return end + 1 - at
    if 0x80 <= op <= 0x8F or op in (0xB1, 0xB3, 0xC8, 0xC9):
        if at + 1 >= len(run):
            raise ValueError(f"instruction {op:#04x} lacks its operand byte at byte {at}")
        why = _operand_check(op, run[at + 1])
        if why:
            raise ValueError(f"{why} at byte {at}")
        return 2
    return 1


def without_finish(instructions: bytes, start: int) -> bytes:
    """`instructions` (of the function at `start`) less their trailing finish
    instructions, which a compact model implies; a 0xb0 operand (b3 b0)
    stays. EncodeError if they do not decode."""
    starts, at = [], 0
    try:
        while at < len(instructions):
            starts.append(at)
            at += _instruction_length(instructions, at)
    except ValueError as e:
        raise EncodeError(f"function at {start:#x}: undecodable instructions "
                          f"{instructions.hex()}: {e}") from None
    while starts and instructions[starts[-1]:] == bytes([FINISH]):
        instructions = instructions[:starts.pop()]
    return instructions


# ---------------------------------------------------------------- sections


def prel31_field(target: int, address: int, section: str, offset: int) -> int:
    """The prel31 field stored at `address` (byte `offset` of `section`) that
    points at `target`; TableOverflow if the distance needs more than 31 bits."""
    distance = target - address
    if not -(1 << 30) <= distance < 1 << 30:
        raise TableOverflow(f"{section} byte {offset}: prel31 offset from {address:#x} to "
                            f"{target:#x} ({distance:+#x}) does not fit 31 bits signed")
    return distance & 0x7FFFFFFF


def lu16(instructions: bytes, start: int) -> bytes:
    """The `.ARM.extab` entry (personality 1, Lu16) for more than three
    instruction bytes: 0x81, the count of extra words, the first two bytes;
    the rest in the extra words, most significant byte first, padded with
    finish; then an empty descriptor list (a zero word), as assemblers emit."""
    rest = instructions[2:] + bytes([FINISH]) * (-len(instructions[2:]) % 4)
    count = len(rest) // 4
    if count > 0xFF:
        raise TableOverflow(f"function at {start:#x}: {len(instructions)} instruction bytes need "
                            f"{count} extra words; Lu16 counts at most 255")
    words = [0x81 << 24 | count << 16 | int.from_bytes(instructions[:2], "big")]
    words += [int.from_bytes(rest[i : i + 4], "big") for i in range(0, len(rest), 4)]
    return b"".join(w.to_bytes(4, "little") for w in words + [0])


def _check_layout(starts: list[int], exidx_address: int, extab_address: int) -> None:
    for name, address in ((EXIDX, exidx_address), (EXTAB, extab_address)):
        if address % 4:
            raise EncodeError(f"{name} address {address:#x} is not 4-aligned")
    for previous, start in zip([None] + starts, starts):
        if start % 2:
            raise EncodeError(f"function start {start:#x} is odd (give it without the Thumb bit)")
        if previous is not None and start <= previous:
            raise EncodeError(f"function start {start:#x} does not follow {previous:#x}: "
                              "starts must ascend, and `end` follow them")


def write_exidx(functions: Sequence[tuple[int, bytes | None]], exidx_address: int,
                extab_address: int, end: int) -> ExidxSections:
    """`.ARM.exidx` / `.ARM.extab` for (start, instructions, or None for
    EXIDX_CANTUNWIND) sorted by start, closed by an EXIDX_CANTUNWIND entry at
    `end` so that the last function is bounded."""
    rows = [*functions, (end, None)]
    _check_layout([start for start, _ in rows], exidx_address, extab_address)
    exidx, extab = bytearray(), bytearray()
    shared: dict[bytes, int] = {}  # extab entry -> its offset in .ARM.extab
    for index, (start, instructions) in enumerate(rows):
        offset = 8 * index
        second = EXIDX_CANTUNWIND
        if instructions is not None:
            body = without_finish(instructions, start)
            if len(body) <= 3:  # Su16 inline: 0x80, three bytes padded with finish
                second = 0x80 << 24 | int.from_bytes(body + bytes([FINISH]) * (3 - len(body)), "big")
            else:
                entry = lu16(body, start)
                if entry not in shared:
                    shared[entry] = len(extab)
                    extab += entry
                second = prel31_field(extab_address + shared[entry],
                                      exidx_address + offset + 4, EXIDX, offset + 4)
        exidx += prel31_field(start, exidx_address + offset, EXIDX, offset).to_bytes(4, "little")
        exidx += second.to_bytes(4, "little")
    if extab and (exidx_address < extab_address + len(extab)
                  and extab_address < exidx_address + len(exidx)):
        raise EncodeError(f"{EXIDX} [{exidx_address:#x}, +{len(exidx)}) and {EXTAB} "
                          f"[{extab_address:#x}, +{len(extab)}) overlap")
    return ExidxSections(bytes(exidx), exidx_address, bytes(extab), extab_address, end)
