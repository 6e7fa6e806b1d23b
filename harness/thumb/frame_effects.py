"""What one Thumb-2 instruction does to a function's frame: the transfer
functions of the frame analysis (harness.thumb.frame_analysis).

`after(insn, state, code_at)` is the state after `insn` runs: pushes and
stores of registers still holding the caller's value are saves, pops and
loads from a save slot restore, sp moves by constants (an immediate, or a
register movw/movt set just before), is set from the frame pointer or a
copy of it, or by a computed amount (then only the frame pointer knows the
frame); r7 becomes the frame pointer, or moves by a constant (GCC's large
frames); in ARM code r11 does (`add fp, sp, #k` ... `sub sp, fp, #k`: GCC's
and Rust's ARM frames, glibc's assembly). Anything else that sets sp or the
frame pointer is Unknowable.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.program import TRACKED_REGS, CfiRow
from harness.registers import LR, PC, SP
from harness.thumb.disasm import Instruction, decode_before, decode_one
from harness.thumb.encoding import FRAME_POINTERS

FP = FRAME_POINTERS[0]  # r7, the Thumb frame pointer


def frame_pointer(arm: bool) -> int:
    """The frame pointer of code in that state: r7 in Thumb, r11 (fp) in ARM."""
    return FRAME_POINTERS[1] if arm else FRAME_POINTERS[0]
CALLEE_SAVED = frozenset(TRACKED_REGS)
# How far before `mov sp, rX` the copy `sub.w rX, r7, #k` is looked for: clang
# schedules the epilogue's arithmetic between them (18 bytes in a VLA's
# function at -O2: tests/test_frame_analysis.py).
FRAME_POINTER_COPY_SPAN = 32
LOST_RETURN = "the return address is lost: lr was overwritten and saved nowhere"


class FrameState(NamedTuple):
    """The unwind state before an instruction (see the module docstring)."""

    depth: int | None = 0  # CFA - sp
    cfa_reg: int = SP
    fp_offset: int | None = None  # CFA - r7 (ARM: r11), while it holds sp + k from an `add r7, sp, #k`
    saved: tuple[tuple[int, int], ...] = ()  # (register, offset from the CFA), sorted
    clobbered: frozenset[int] = frozenset()  # callee-saved registers written: no longer the caller's value

    def row(self, address: int) -> CfiRow:
        if LR in self.clobbered and not _saved(self, LR):
            # a call overwrote lr, saved nowhere (libstdc++'s __cxa_end_cleanup:
            # `push {r1-r4}; bl ...; pop; bl _Unwind_Resume`): the caller is lost
            return CfiRow(address, problem=LOST_RETURN)
        offset = self.depth if self.cfa_reg == SP else self.fp_offset
        return CfiRow(address, self.cfa_reg, offset, self.saved)


# No frame known: the state past a refusal (paths that met with different
# frames, an instruction the analysis does not model). It flows on to
# everything after, so that no row is written from the other paths alone.
UNKNOWN = FrameState(depth=None, cfa_reg=-1)


def lost(state: FrameState) -> bool:
    """Is a caller's r4-r11 overwritten and saved nowhere?"""
    return state != UNKNOWN and bool(state.clobbered - {LR} - {reg for reg, _ in state.saved})


def torn_down(state: FrameState) -> bool:
    """The frame as the function found it (sp at the CFA, nothing saved):
    where a tail call may leave."""
    return state.depth == 0 and state.cfa_reg == SP and not state.saved


class Unknowable(Exception):
    """The state after an instruction cannot be known; says why."""


def after(insn: Instruction, state: FrameState, code_at) -> FrameState:
    """The frame state after `insn` runs: its effect, and then no save left
    below sp. A slot sp has moved above is garbage to an unwinder (Chrome's
    copies the stack from sp up, and a signal may overwrite it), so the save
    ends there: the register holds the caller's value itself, or else is
    lost (GCC's `push {r0-r4, lr}; ...; add sp, #20; ldr lr, [sp], #4` leaves
    r4 untouched below sp)."""
    return _released(_effect(insn, state, code_at))


def _released(state: FrameState) -> FrameState:
    if state.depth is None:
        return state
    for _, slot in state.saved:  # a loop, not all(): this runs after every instruction of every path
        if slot < -state.depth:
            return state._replace(saved=tuple((reg, slot) for reg, slot in state.saved if slot >= -state.depth))
    return state


def _effect(insn: Instruction, state: FrameState, code_at) -> FrameState:
    op, regs = insn.op, insn.regs
    if op == "push":
        if _sp_copies_before(insn, code_at).intersection(regs):
            # `mov ip, sp; push {ip, lr}`: a register dump (libgcc's
            # _Unwind_RaiseException hands it to the unwinder, which rewrites
            # the saved lr as it goes): no save in it can be trusted
            raise Unknowable(f"'{insn.text}' stores sp's value: a register dump a callee may rewrite")
        return _push(state, [(reg, 4) for reg in regs])
    if op == "vpush":
        return _push(state, [(reg, 8) for reg in regs])
    fp = frame_pointer(insn.arm)
    if op in ("pop", "vpop"):
        return _pop(state, regs, 4 if op == "pop" else 8, fp)
    if op in ("str", "strd", "strh", "strb") and insn.mem and insn.mem[0] == SP:
        return _store(insn, state)
    if op in ("ldr", "ldrd") and insn.mem and insn.mem[0] == SP:
        return _load(insn, state)
    if op in ("bl", "blx"):  # the callee returns with lr gone (and r0-r3, r12)
        return _clobber(state, (LR,))
    if SP in insn.writes:
        return _sp_written(insn, state, code_at)
    if op in ("add", "mov") and regs[:2] == (fp, SP) and state.depth is not None:
        # r7 = sp + k: the frame pointer, should sp later move by a computed
        # amount or be set from it; the CFA stays on sp while sp is known
        # (clang's frameless code uses r7 for other things too)
        return state._replace(fp_offset=state.depth - (insn.imm or 0),
                       clobbered=state.clobbered | {fp})
    if fp in insn.writes and state.fp_offset is not None:
        return _fp_written(insn, state, fp)
    return _clobber(state, [reg for reg in insn.writes if reg in CALLEE_SAVED])


def _saved(state: FrameState, reg: int) -> bool:
    for saved, _ in state.saved:
        if saved == reg:
            return True
    return False


def _clobber(state: FrameState, regs) -> FrameState:
    """`regs` written: those callee-saved no longer hold the caller's value
    (a save slot may still: `lost` tells)."""
    written = CALLEE_SAVED.intersection(regs)
    return state._replace(clobbered=state.clobbered | written) if written - state.clobbered else state


def _moved(state: FrameState, delta: int) -> FrameState:
    """sp moved down by `delta` bytes (up when negative)."""
    if state.depth is None:
        if state.cfa_reg in FRAME_POINTERS:
            # sp below a dynamic allocation moved by a constant (GCC's
            # stack-clash probes step an alloca down a page at a time): still
            # unknown, and r7 still holds the frame
            return state
        raise Unknowable("sp moves where its distance to the frame is unknown")
    depth = state.depth + delta
    if state.cfa_reg in FRAME_POINTERS and delta < 0:  # an epilogue: sp is known, the CFA goes back to it
        return state._replace(depth=depth, cfa_reg=SP)
    return state._replace(depth=depth)


def _push(state: FrameState, stored: list[tuple[int, int]]) -> FrameState:
    """Registers stored below sp, the first lowest, sp moved down past them.
    Where sp's distance to the CFA is unknown (the frame held by r7), no
    slot is known: nothing is saved, each register keeps its own value."""
    moved = _moved(state, sum(size for _, size in stored))
    if moved.depth is None:
        return moved
    saved = dict(state.saved)
    slot = -moved.depth
    for reg, size in stored:
        if reg in CALLEE_SAVED and reg not in state.clobbered and reg not in saved:
            saved[reg] = slot
        slot += size
    return moved._replace(saved=tuple(sorted(saved.items())))


def _pop(state: FrameState, regs: tuple[int, ...], size: int, fp: int) -> FrameState:
    """Registers loaded from sp up, sp moved up past them: a register loaded
    from its own save slot holds the caller's value again. The CFA is
    defined through sp from here (r7 may be among them)."""
    if state.depth is None:
        raise Unknowable("a pop where sp's distance to the frame is unknown")
    saved = dict(state.saved)
    clobbered = set(state.clobbered)
    for index, reg in enumerate(regs):
        slot = -state.depth + size * index
        if reg == PC:
            continue
        if saved.get(reg) == slot:
            del saved[reg]
            clobbered.discard(reg)
        elif reg in CALLEE_SAVED:
            saved.pop(reg, None)
            clobbered.add(reg)
    return FrameState(state.depth - size * len(regs), SP, None if fp in regs else state.fp_offset,
                      tuple(sorted(saved.items())), frozenset(clobbered))


def _store(insn: Instruction, state: FrameState) -> FrameState:
    """str/strd/strh/strb to the stack: `str rX, [sp, #-4]!` pushes; a
    store of a register still holding the caller's value is a save; a store
    over a register's save slot ends that save (GCC's `push {r0-r6, lr}`
    only makes room, and the stack guard then lands in "r5's" slot)."""
    displacement, width = insn.mem[1], _STORE_WIDTH[insn.op]
    if insn.text.endswith("!"):  # pre-indexed: sp moves down first (glibc's `str r8, [sp, #-32]!` by more)
        if width < 4 or displacement > -width or displacement % 4:
            return _unknown_sp(insn, state)
        return _push(state, [(reg, 4) for reg in insn.regs[:width // 4]] + [(-1, -displacement - width)])
    if insn.post_index:
        raise Unknowable(f"'{insn.text}' moves sp after storing")
    if state.depth is None:
        return state
    low = -state.depth + displacement
    saved = {reg: slot for reg, slot in state.saved
             if slot + (8 if reg >= 256 else 4) <= low or slot >= low + width}  # d registers take 8 bytes
    for index, reg in enumerate(insn.regs[:width // 4]):
        if reg in CALLEE_SAVED and reg not in state.clobbered and reg not in saved:
            saved[reg] = -state.depth + displacement + 4 * index
    return state._replace(saved=tuple(sorted(saved.items())))


_STORE_WIDTH = {"str": 4, "strd": 8, "strh": 2, "strb": 1}


def _load(insn: Instruction, state: FrameState) -> FrameState:
    """ldr/ldrd from the stack: `ldr rX, [sp], #4` pops; a load from a
    register's save slot restores it."""
    count = 2 if insn.op == "ldrd" else 1
    loaded = insn.regs[:count]
    if insn.post_index:  # sp moves up after: by more than the load in glibc's `ldr r8, [sp], #32`
        if insn.imm is None or insn.imm < 4 * count or insn.imm % 4:
            return _unknown_sp(insn, state)
        popped = _pop(state, loaded, 4, frame_pointer(insn.arm))
        return _moved(popped, 4 * count - insn.imm) if insn.imm > 4 * count else popped
    if insn.text.endswith("!"):
        return _unknown_sp(insn, state)
    if state.depth is None:
        return _clobber(state, loaded)
    saved = dict(state.saved)
    clobbered = set(state.clobbered)
    for index, reg in enumerate(loaded):
        if saved.get(reg) == -state.depth + insn.mem[1] + 4 * index:
            del saved[reg]
            clobbered.discard(reg)
        elif reg in CALLEE_SAVED:
            clobbered.add(reg)
    return state._replace(saved=tuple(sorted(saved.items())), clobbered=frozenset(clobbered))


def _sp_written(insn: Instruction, state: FrameState, code_at) -> FrameState:
    """Instructions that set sp: adjustments by constants (an immediate, or
    a register movw/movt just set), sp from the frame pointer, and sp moved
    by a register amount (a dynamic allocation, the CFA kept on r7)."""
    op, regs = insn.op, insn.regs
    sources = regs[1:] if regs[1:2] != (SP,) else regs[2:]
    if op in ("sub", "add") and regs[:1] == (SP,):
        amount = insn.imm if not sources else _constant_before(insn, sources, code_at)
        if amount is not None and len(sources) <= 1 and (not sources or insn.imm is None):
            return _moved(state, amount if op == "sub" else -amount)
    if op in ("mov", "sub", "add") and regs[:1] == (SP,) and sources == (frame_pointer(insn.arm),) \
            and state.fp_offset is not None:
        below = (insn.imm or 0) if op != "add" else -(insn.imm or 0)
        return state._replace(depth=state.fp_offset + below, cfa_reg=SP)
    if op == "mov" and len(sources) == 1 and state.fp_offset is not None:
        below = _frame_pointer_copy_before(insn, sources[0], code_at)  # clang: sub.w r4, r7, #8; mov sp, r4
        if below is not None:
            return state._replace(depth=state.fp_offset + below, cfa_reg=SP)
    return _unknown_sp(insn, state)


def _sp_copies_before(insn: Instruction, code_at) -> set[int]:
    """The registers a `mov rX, sp` among the few instructions straight
    before `insn` left holding sp's value (rX not written again since)."""
    copies, written = set(), set()
    for earlier in reversed(decode_before(code_at, insn.address, span=8, arm=insn.arm)):
        if earlier.transfers:
            break
        if earlier.op == "mov" and earlier.regs[1:] == (SP,) and earlier.regs[0] not in written:
            copies.add(earlier.regs[0])
        written.update(earlier.writes)
    return copies


def _frame_pointer_copy_before(insn: Instruction, reg: int, code_at) -> int | None:
    """k when the last instruction to write `reg`, among the few straight
    before `insn`, set it to r7 - k (clang schedules `sub.w r4, r7, #16`
    a few instructions ahead of `mov sp, r4`)."""
    for earlier in reversed(decode_before(code_at, insn.address, span=FRAME_POINTER_COPY_SPAN, arm=insn.arm)):
        if reg in earlier.writes:
            fp = frame_pointer(insn.arm)
            if earlier.op in ("sub", "add") and earlier.regs == (reg, fp) and earlier.imm is not None:
                return earlier.imm if earlier.op == "sub" else -earlier.imm
            return 0 if earlier.op == "mov" and earlier.regs == (reg, fp) else None
        if earlier.transfers:
            return None
    return None


def _constant_before(insn: Instruction, sources: tuple[int, ...], code_at) -> int | None:
    """The value a `movw rN, #lo; movt rN, #hi` (or a lone movw) right
    before `insn` put in its one source register rN, else None."""
    if len(sources) != 1:
        return None
    value = None
    for back in (8, 4):
        try:
            found = decode_one(code_at(insn.address - back, 4), insn.address - back, insn.arm)
        except KeyError:  # before the function's start: none of its code
            continue
        if found is None or found.size != 4 or found.regs[:1] != sources or found.imm is None:
            continue
        if found.op == "movw":
            value = found.imm
        elif found.op == "movt" and value is not None:
            value |= found.imm << 16
    return value


def _unknown_sp(insn: Instruction, state: FrameState) -> FrameState:
    """sp moved by an amount the code computes: known again only through
    the frame pointer, which the CFA is then defined by."""
    if state.fp_offset is not None:
        return state._replace(depth=None, cfa_reg=frame_pointer(insn.arm))
    raise Unknowable(f"'{insn.text}' sets sp in a way the analysis does not model")


def _fp_written(insn: Instruction, state: FrameState, fp: int) -> FrameState:
    """r7 (`fp`) written while it is the frame pointer: GCC moves it by a
    constant before `mov sp, r7` in large frames; anything else loses the frame."""
    if insn.op in ("add", "adds", "sub", "subs") and insn.imm is not None and all(r == fp for r in insn.regs):
        delta = insn.imm if insn.op.startswith("add") else -insn.imm
        return state._replace(fp_offset=state.fp_offset - delta)
    if state.cfa_reg == fp:
        raise Unknowable(f"'{insn.text}' overwrites the frame pointer the CFA is defined by")
    return state._replace(fp_offset=None)
