"""Epilogues: what each teardown instruction does to the frame, and where
a function's epilogues are.

`classify` names what one instruction does to the frame if it belongs to an
epilogue; `find_epilogues` finds every unconditional epilogue of a function.
The runtime simulation (harness.unwind.v2_epilogue), the encode-time
synthesis (harness.formats.chrome_v2.synthesize) and the positions of
compiled code (harness.classify) all build on them.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Union

from harness.registers import DWARF_D0, LR, PC, SP
from harness.thumb.disasm import Instruction, decode_one, sweep
from harness.thumb.encoding import FRAME_POINTERS

LIMIT = 16  # instructions scanned for a return


# Each step is a NamedTuple, hashed and compared in C (plans are cached by
# their steps); its last field, `kind`, is its class's own constant, so that
# steps of two classes never compare equal as bare tuples would.


class Release(NamedTuple):
    """sp += amount, sp += r[reg], or sp = r[frame_pointer] - below."""

    amount: int = 0
    reg: int | None = None
    frame_pointer: int | None = None
    below: int = 0
    kind: str = "release"


class AdjustFramePointer(NamedTuple):
    """r7 += amount, as GCC does before `mov sp, r7` when a frame is large."""

    reg: int
    amount: int
    kind: str = "adjust_frame_pointer"


class Restore(NamedTuple):
    """pop / ldr rX, [sp], #4 / ldm sp!: core registers from the stack (pc: a return)."""

    regs: tuple[int, ...]
    kind: str = "restore"


class RestoreVfp(NamedTuple):
    first: int  # d register number
    count: int
    kind: str = "restore_vfp"


class ReturnToLr(NamedTuple):
    """bx lr."""

    kind: str = "return_to_lr"


class Branch(NamedTuple):
    """b / b.w: a tail call when it leaves the function; bx rN (not lr), a
    tail call through a register (target None), as clang ends
    `ldm sp!, {..., lr}; bx r1`."""

    target: int | None
    kind: str = "branch"


Step = Union[Release, AdjustFramePointer, Restore, RestoreVfp, ReturnToLr, Branch]


def classify(insn: Instruction) -> Step | None:
    """What `insn` does as an epilogue instruction, or None if it is none.
    C twin, for the encodings compilers end functions with: csrc/epilogue.c."""
    op, regs = insn.op, insn.regs
    if op == "add" and regs[:1] == (SP,):
        sources = regs[1:] if regs[1:2] != (SP,) else regs[2:]
        if insn.imm is not None and not sources:
            return Release(amount=insn.imm)
        if insn.imm is None and len(sources) == 1 and 0 <= sources[0] < SP:
            return Release(reg=sources[0])
    if op in ("add", "adds") and insn.imm is not None and regs[:1] in ((7,), (11,)) \
            and all(r == regs[0] for r in regs):
        return AdjustFramePointer(regs[0], insn.imm)
    if op == "mov" and len(regs) == 2 and regs[0] == SP and regs[1] in FRAME_POINTERS:
        return Release(frame_pointer=regs[1])
    if op == "sub" and len(regs) == 2 and regs[0] == SP and regs[1] in FRAME_POINTERS and insn.imm is not None:
        return Release(frame_pointer=regs[1], below=insn.imm)
    if op == "pop" and regs and all(0 <= r <= PC and r != SP for r in regs):
        return Restore(regs)
    if op in ("ldm", "ldmia") and regs[:1] == (SP,) and len(regs) > 1 and SP not in regs[1:]:
        return Restore(regs[1:])
    if op == "ldr" and insn.post_index and insn.mem == (SP, 0) and insn.imm == 4 and len(regs) == 1 \
            and 0 <= regs[0] <= PC and regs[0] != SP:
        return Restore(regs)
    if op == "vpop" and regs and all(r >= DWARF_D0 for r in regs) \
            and list(regs) == list(range(regs[0], regs[0] + len(regs))):
        return RestoreVfp(regs[0] - DWARF_D0, len(regs))
    if op == "bx" and regs == (LR,):
        return ReturnToLr()
    if op == "b" and insn.imm is not None and not insn.conditional:
        return Branch(insn.imm)
    if op == "bx" and len(regs) == 1 and 0 <= regs[0] < SP:
        return Branch(None)
    return None


# Registers an unwind recovers or depends on: an instruction writing none of
# them (and storing nothing, and not transferring control) cannot change the
# outcome of an epilogue it sits in.
UNWIND_REGISTERS = frozenset((*range(4, 16), *range(DWARF_D0 + 8, DWARF_D0 + 16)))
STORES = ("str", "stm", "push", "vst", "vpush")


def is_neutral(insn: Instruction) -> bool:
    """An instruction scheduled into an epilogue that does not affect it
    (GCC moves body work between `vpop` and `pop`, for example). Finding
    epilogues and synthesizing their rows step over these; the runtime
    simulation does not (it declines on anything but teardown)."""
    return not (
        insn.transfers
        or insn.op == "it" or insn.op.startswith("it")
        or insn.op.startswith(STORES)
        or UNWIND_REGISTERS.intersection(insn.writes)
        or -1 in insn.writes
    )


def ends_frame(step: Step) -> bool:
    return isinstance(step, (ReturnToLr, Branch)) or (isinstance(step, Restore) and PC in step.regs)


# Encodings that may end a frame (little-endian): pop {..., pc}, b (16-bit),
# bx lr or rN, pop.w/ldm sp! with pc, ldr pc, [sp], #4, b.w. Found by one
# regex scan, so only short windows before them are ever disassembled.
_MAY_END_FRAME = re.compile(
    rb"(?=[\x00-\xff][\xbd\xe0-\xe7]|[\x00-\x7f]\x47|\xbd\xe8[\x00-\xff][\x80-\xff]"
    rb"|\x5d\xf8\x04\xfb|[\x00-\xff][\xf0-\xf7][\x00-\xff][\x90-\x9f\xb0-\xbf])",
    re.DOTALL,
)


def _window_ending_at(code: bytes, start: int, offset: int) -> list[tuple[int, int, str]]:
    """Boundaries of up to LIMIT instructions before `offset`, ending with the
    one at `offset`; [] if no sweep lands on it. A window may start inside an
    instruction, so later starts are tried too."""
    for window in range(max(0, offset - 4 * LIMIT), offset + 1, 2):
        found = sweep(code[window : offset + 4], start + window)
        for index, (address, _, _) in enumerate(found):
            if address == start + offset:
                return found[: index + 1]
    return []


def _it_governing(window: list[tuple[int, int, str]], index: int) -> int | None:
    """The index of the IT that governs instruction `index`, or None (IT
    covers as many instructions as its mnemonic has letters after the I)."""
    for back in range(1, 5):
        if index - back < 0:
            return None
        mnemonic = window[index - back][2]
        if mnemonic.startswith("it"):
            return index - back if back <= len(mnemonic) - 1 else None
    return None


def find_epilogues(code: bytes, start: int, end: int, conditional: bool = False):
    """(prelude, instructions, steps) of every unconditional epilogue of the
    function [start, end) whose bytes are `code`: the instructions from its
    first teardown to its return or tail call, and up to four before it.
    Only instructions near a return are ever decoded.

    With `conditional`, also the epilogues that end an IT block whose
    instructions all share one condition (clang's `ittt cc; ...; ldmcc sp!,
    {r7, lr}; bcc.w f`: a tail call taken only when the condition holds).
    Their pcs are epilogue positions, but no single row describes them
    (the frame is torn down or not by the condition), so only the position
    finder asks for them."""
    for match in _MAY_END_FRAME.finditer(code):
        offset = match.start()
        if offset % 2:
            continue
        window = _window_ending_at(code, start, offset)
        if not window:
            continue
        block = _it_governing(window, len(window) - 1)
        if block is not None and not (conditional and _uniform_it(window, block, len(window) - 1)):
            continue
        last = decode_one(code[offset : offset + 4], start + offset)
        step = classify(last) if last else None
        if step is None or not ends_frame(step) or last.conditional:
            continue
        if isinstance(step, Branch) and step.target is not None and start <= step.target < end:
            continue  # a branch inside the function, not a tail call
        walked, index = _walk_back(code, start, window, block)
        if isinstance(step, Branch) and not walked:
            continue  # a plain branch out, with no frame to tear down here
        insns = [insn for insn, _ in walked] + [last]
        steps = [before for _, before in walked] + [step]
        prelude = [i for i in (_decoded(code, start, w) for w in window[max(0, index - 4) : index]) if i]
        yield prelude, insns, steps


def _walk_back(code: bytes, start: int, window: list[tuple[int, int, str]], block: int | None):
    """The teardown before the last instruction of `window`, as (instruction,
    step or None for neutral work) pairs, and the window index it starts at:
    teardown instructions and neutral ones scheduled between them, inside
    the IT `block` of the last instruction when there is one."""
    walked: list[tuple[Instruction, Step | None]] = []
    index = len(window) - 1
    while index > 0:
        insn = _decoded(code, start, window[index - 1])
        if insn is not None and block is not None and index - 1 == block:
            # The IT of this block: the teardown may go on in the block
            # before it, when that one ends here under the same condition
            # (clang: `itttt lt; ...; addlt sp, #4; itt lt; ldmlt ...; blt.w f`).
            earlier = _it_governing(window, block - 1)
            if earlier is None or not _uniform_it(window, earlier, block - 1) \
                    or _it_condition(code, start, window[earlier]) != _it_condition(code, start, window[block]):
                break
            walked.insert(0, (insn, None))
            block, index = earlier, index - 1
            continue
        if insn is None or insn.conditional or _it_governing(window, index - 1) != block:
            break
        before = classify(insn)
        if before is None and not is_neutral(insn) or before is not None and ends_frame(before):
            break
        walked.insert(0, (insn, before))
        index -= 1
    while walked and walked[0][1] is None:  # neutral work before the teardown is body
        walked.pop(0)
        index += 1
    return walked, index


def _uniform_it(window: list[tuple[int, int, str]], block: int, last: int) -> bool:
    """Whether the IT at `block` gives every instruction up to `last` the
    same condition (its mask is all "then") and `last` ends the block."""
    mnemonic = window[block][2]
    letters = mnemonic[1:].split(".")[0].split(" ")[0]
    return set(letters) == {"t"} and last - block == len(letters)


def _it_condition(code: bytes, start: int, boundary: tuple[int, int, str]) -> int:
    """The first condition of the IT instruction at `boundary` (bits 7:4)."""
    return code[boundary[0] - start] >> 4


def _decoded(code: bytes, start: int, boundary: tuple[int, int, str]):
    address, size, _ = boundary
    return decode_one(code[address - start : address - start + size], address)


