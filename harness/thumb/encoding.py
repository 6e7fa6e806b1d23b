"""Facts about Thumb-2 encodings, read off the bits alone (ARM ARM A6/A8).

Ground truth (harness.verify.groundtruth), the epilogue simulator
(harness.unwind.v2_epilogue) and the compiled hook share them; each fact
names its C twin in harness/verify/csrc, which must say the same (tests
hold them together).
"""

from __future__ import annotations

from harness.registers import SP

FRAME_POINTERS = (7, 11)  # r7 (Thumb), r11 (ARM-style frames)


def instruction_size(code: bytes) -> int:
    """Size of the Thumb instruction starting `code`: 32-bit when the first
    half-word's top five bits are 0b11101, 0b11110 or 0b11111.
    C twin: trace.c: instruction_size.
    """
    return 4 if code[1] >> 3 in (0x1D, 0x1E, 0x1F) else 2


def call_length(code: bytes) -> int:
    """Length of the Thumb instruction starting `code` if it is a call, else 0.

    BL and BLX (immediate) are 32-bit: first half-word 11110xxx xxxxxxxx, second
    11x1xxxx xxxxxxxx (BL) or 11x0xxxx xxxxxxx0 (BLX). BLX register is 16-bit
    010001111mmmm000.
    C twin: trace.c: decoded() (call_length).
    """
    first = int.from_bytes(code[0:2], "little")
    if first & 0xFF87 == 0x4780:
        return 2
    if first & 0xF800 == 0xF000 and len(code) >= 4:
        second = int.from_bytes(code[2:4], "little")
        if second & 0xD000 == 0xD000 or second & 0xD001 == 0xC000:
            return 4
    return 0


def return_kind(code: bytes) -> bool:
    """Does the Thumb instruction starting `code` return, taking pc from lr
    or from the stack: bx lr (0x4770), mov pc, lr (0x46F7), pop {..., pc},
    ldmia.w sp!, {..., pc}, ldr.w pc, [sp], #4? (Ground truth's return rule:
    harness.verify.groundtruth.) C twin: trace.c: decoded() (returns).
    """
    first = int.from_bytes(code[0:2], "little")
    if first in (0x4770, 0x46F7) or first & 0xFF00 == 0xBD00:
        return True
    if len(code) < 4:
        return False
    second = int.from_bytes(code[2:4], "little")
    return (first == 0xE8BD and bool(second & 0x8000)) or (first == 0xF85D and second == 0xFB04)


def arm_call_length(code: bytes) -> int:
    """4 if the ARM-state instruction `code` (4 bytes) is a call: BL
    (cond 1011 imm24), BLX immediate (1111 101H imm24), BLX register
    (cond 0001 0010 1111 1111 1111 0011 Rm); else 0. ARM code is what PLT
    stubs, the kuser helpers and some hand-written library code run in.
    C twin: trace.c: decode_arm().
    """
    word = int.from_bytes(code[0:4], "little")
    cond = word >> 28
    if cond != 0xF and word & 0x0F000000 == 0x0B000000 or word & 0xFE000000 == 0xFA000000:
        return 4
    return 4 if cond != 0xF and word & 0x0FFFFFF0 == 0x012FFF30 else 0


def arm_return_kind(code: bytes) -> bool:
    """Does the ARM-state instruction `code` return: bx lr, mov pc, lr,
    ldr pc, [sp], #4, or ldmia sp!, {..., pc}? C twin: trace.c: decode_arm().
    """
    word = int.from_bytes(code[0:4], "little")
    if word >> 28 == 0xF:
        return False
    return word & 0x0FFFFFFF in (0x012FFF1E, 0x01A0F00E, 0x049DF004) or word & 0x0FFF8000 == 0x08BD8000


def it_block_length(code: bytes) -> int:
    """Instructions governed by the IT instruction starting `code`, else 0.
    IT is 10111111 cccc mmmm with mmmm != 0; the lowest set bit of the mask
    marks the last instruction of the block.
    C twin: trace.c: decoded() (it_length).
    """
    first = int.from_bytes(code[0:2], "little")
    mask = first & 0xF
    if first & 0xFF00 != 0xBF00 or mask == 0:
        return 0
    return 4 - ((mask & -mask).bit_length() - 1)


def with_it_state(cpsr: int, state: int) -> int:
    """`cpsr` with ITSTATE replaced: IT[1:0] live in bits 26:25, IT[7:2] in 15:10.
    C twin: trace.c: with_it_state.
    """
    return (cpsr & ~0x0600FC00) | ((state & 0x3) << 25) | ((state >> 2) << 10)


def it_advance(state: int) -> int:
    """ITSTATE for the next instruction of an IT block (ITAdvance; 0 past
    its last). C twin: trace.c: entered()."""
    return 0 if state & 0x7 == 0 else (state & 0xE0) | ((state << 1) & 0x1F)


def it_state(cpsr: int) -> int:
    """ITSTATE (IT[7:0]) from CPSR: IT[7:2] = cpsr[15:10], IT[1:0] = cpsr[26:25].
    C twin: rules.c: it_state."""
    return ((cpsr >> 8) & 0xFC) | ((cpsr >> 25) & 0x3)


def condition_holds(cond: int, cpsr: int) -> bool:
    n, z, c, v = (cpsr >> 31) & 1, (cpsr >> 30) & 1, (cpsr >> 29) & 1, (cpsr >> 28) & 1
    base = {
        0: z, 1: z, 2: c, 3: c, 4: n, 5: n, 6: v, 7: v,
        8: c and not z, 9: c and not z, 10: n == v, 11: n == v,
        12: not z and n == v, 13: not z and n == v, 14: True, 15: True,
    }[cond]
    return bool(base) if cond % 2 == 0 or cond >= 14 else not base


def executes(cond: int, cpsr: int) -> bool:
    """Does an instruction of condition `cond` (an ARM instruction's; 0xE,
    always, for Thumb) execute under `cpsr`? In an IT block the block's
    condition decides. Unicorn hooks an ARM instruction whose condition
    fails, and ground truth must not take its call. C twin: trace.c."""
    state = it_state(cpsr)
    return condition_holds(state >> 4 if state else cond, cpsr)


def may_start_epilogue(code: bytes) -> bool:
    """False only for bytes that cannot start an instruction `plan` takes, so
    that `plan` declines at once: a superset, by encoding, of the
    instructions `classify` accepts (tests/test_epilogue.py checks every
    16-bit encoding and random 32-bit ones). A pure function of up to four
    bytes, whatever their address; too few bytes for an instruction say True.
    C twin: sources.c: may_start_epilogue."""
    if len(code) < 2:
        return True
    first = code[0] | code[1] << 8
    if first >> 11 not in (0x1D, 0x1E, 0x1F):  # a 16-bit instruction
        return (first & 0xFE00 == 0xBC00  # pop
                or first & 0xFF80 == 0xB000  # add sp, sp, #imm
                or first & 0xFF87 in (0x4485, 0x4685)  # add sp, rm / mov sp, rm
                or first & 0xFF80 == 0x4700  # bx lr, bx rm
                or first & 0xF800 == 0xE000  # b
                or first & 0xFF00 == 0x3700  # adds r7, #imm8
                or first & 0xFE3F == 0x1C3F)  # adds r7, r7, #imm3
    if len(code) < 4:
        return True
    second = code[2] | code[3] << 8
    return (first & 0xFFDF == 0xE89D  # ldm sp{!}, pop.w
            or first == 0xF85D and second & 0x0FFF == 0x0B04  # ldr rt, [sp], #4
            or first & 0xFFBF == 0xECBD  # vpop
            or first & 0xF800 == 0xF000 and second & 0xD000 == 0x9000  # b.w
            or not second & 0x8000 and _data_processing_teardown(first, (second >> 8) & 0xF))


def _data_processing_teardown(first: int, rd: int) -> bool:
    """32-bit data processing into sp, r7 or r11 that `classify` may accept:
    add to sp, sub from r7/r11 into sp, mov r7/r11 into sp, or add an
    immediate to r7/r11 in place (`first` is the first half-word)."""
    rn = first & 0xF
    add_immediate = first & 0xFBE0 == 0xF100 or first & 0xFBF0 == 0xF200  # add.w / addw
    if rd == SP:
        return (add_immediate or first & 0xFFE0 == 0xEB00  # add.w (register)
                or (first & 0xFBE0 == 0xF1A0 or first & 0xFBF0 == 0xF2A0) and rn in FRAME_POINTERS  # sub
                or first & 0xFFEF == 0xEA4F)  # mov.w sp, rm
    return rd in FRAME_POINTERS and add_immediate and rn == rd
