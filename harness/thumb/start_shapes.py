"""What code looks like where a function starts: the padding before it,
ARM or Thumb where nothing says which, and a prologue that pushes lr
(harness.thumb.discovery tells starts by these)."""

from __future__ import annotations

from harness.registers import LR, SP
from harness.thumb.disasm import decode_one
from harness.thumb.native import ProgramCode


def looks_arm(code_at, address: int, always: int = 3) -> bool:
    """Is the code at a start of unknown state ARM code: word-aligned, its
    first three words ARM instructions, the first `always` of them ones that
    always execute (condition AL)? Thumb code reads so only where each
    second half-word is an unconditional `b.n` or opens a 32-bit
    instruction of a few classes (floating point, most of all: those read
    as coprocessor instructions in ARM state)."""
    if address % 4:
        return False
    words = code_at(address, 12)
    if len(words) < 12 or any(words[k] >> 4 != 0xE for k in (3, 7, 11)[:always]):
        return False
    decoded = [decode_one(words[k:k + 4], address + k, True) for k in (0, 4, 8)]
    return all(insn is not None and not insn.op.startswith(COPROCESSOR) for insn in decoded)


# ARM's reading of Thumb floating-point code: instructions rare at an ARM function's start
COPROCESSOR = ("v", "stc", "ldc", "mcr", "mrc", "cdp")


# `nop`, `nop.w`, zeros; ARM `nop`, `mov r0, r0`, zeros
PADDING = {False: (b"\x00\xbf", b"\x00\x00", b"\xaf\xf3\x00\x80"),
           True: (b"\x00\xf0\x20\xe3", b"\x00\x00\xa0\xe1", b"\x00" * 4)}


def past_padding(code_at, low: int, high: int, arm: bool) -> int:
    """The first address of [low, high) past the padding there (or high)."""
    while low < high:
        if code_at(low, 2) in PADDING[arm]:
            low += 2
        elif code_at(low, 4) in PADDING[arm]:
            low += 4
        else:
            break
    return low


def pushes_lr(code_at, address: int, end: int, arm: bool) -> bool:
    """Does the code at `address` push lr among its first few instructions,
    before any other branch or change of sp (GCC schedules a `movs` or two
    ahead of the push; a shrink-wrapped function compares first and
    returns as a leaf where it has nothing to do)? Over a program's code,
    the compiled twin answers (asked after every call of every function
    analysed: Chrome's million)."""
    if isinstance(code_at, ProgramCode) and code_at.native is not None:
        return code_at.native.pushes_lr(address, end, arm)
    for _ in range(6):
        insn = decode_one(code_at(address, 4), address, arm) if address < end else None
        if insn is None or insn.op.startswith("it") or insn.transfers and not _to_leaf_return(code_at, insn, end, arm):
            return False
        if SP in insn.writes or insn.op == "push":
            return insn.op == "push" and LR in insn.regs
        address += insn.size
    return False


def _to_leaf_return(code_at, branch, end: int, arm: bool) -> bool:
    """Is `branch` a conditional one forward to a `bx lr` among the next
    few instructions there, with no other branch or change of sp?"""
    if branch.op not in ("b", "cbz", "cbnz") or not (branch.conditional or branch.op != "b") \
            or not branch.address < branch.imm < end:
        return False
    address = branch.imm
    for _ in range(3):
        insn = decode_one(code_at(address, 4), address, arm)
        if insn is None or SP in insn.writes or insn.transfers:
            return insn is not None and insn.op == "bx" and insn.regs == (LR,)
        address += insn.size
    return False
