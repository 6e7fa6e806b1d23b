"""Saves of registers a function never writes, dropped from its rows.

A register the function never writes holds the caller's value at every
instruction, so an unwinder needs no save for it, and its slot may be the
function's to use: GCC at -Os opens with `push {r0-r6, lr}` to make room
and hands a callee the slots of r4-r6 as a local object, which the callee
then overwrites (csmith seed 278). Reading such a register from its slot
would give the callee's data back as the caller's register.

"Never writes" is decided from the code, not from capstone's account of
what each instruction writes, which misses some (`mrc p15, 0, r5, c13, c0,
3` is reported as reading r5): a register r4-r11 keeps its save when some
path's state has it overwritten, or when any instruction names it other
than to save it to, or restore it from, the stack through sp, whether on a
path or in the code no path reaches, read in order (a landing pad the
analysis could not follow writes too). lr and d8-d15 keep their saves
always.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator

from harness.registers import CALLEE_SAVED, SP
from harness.thumb.disasm import Instruction, decode_one
from harness.thumb.frame_effects import FrameState

# What saves or restores a register through sp: frame_effects follows these
# exactly (a load from another slot overwrites the register in `clobbered`).
_STACK_TRANSFERS = frozenset(("push", "pop"))
_SP_TRANSFERS = frozenset(("str", "strd", "strh", "strb", "ldr", "ldrd"))


def kept_saves(states: Iterable[FrameState], decoded: Iterable[Instruction], start: int, end: int,
               code_at: Callable[[int, int], bytes], arm: bool, data: Container[int],
               reached: dict[int, int]) -> frozenset[int]:
    """The registers whose saves the rows keep: of those `states` save, all
    but r4-r11 never written (see the module). `decoded`: the instructions
    on the paths, `reached` their sizes by address; `data`: the bytes of
    [start, end) known to be data."""
    saved, clobbered = set(), set()
    for state in states:
        clobbered.update(state.clobbered)
        saved.update(reg for reg, _ in state.saved)
    candidates = saved.intersection(CALLEE_SAVED) - clobbered
    for insns in (decoded, _unreached(start, end, code_at, arm, data, reached)):
        for insn in insns:
            if not candidates:
                return frozenset(saved)
            if not _transfers_through_sp(insn):
                candidates.difference_update(insn.regs)
                if insn.mem:
                    candidates.discard(insn.mem[0])
    return frozenset(saved - candidates)


def dropped(state: FrameState, kept: frozenset[int]) -> FrameState:
    """`state` with saves only of the registers `kept`."""
    if all(reg in kept for reg, _ in state.saved):
        return state
    return state._replace(saved=tuple((reg, slot) for reg, slot in state.saved if reg in kept))


def _transfers_through_sp(insn: Instruction) -> bool:
    return insn.op in _STACK_TRANSFERS or (insn.op in _SP_TRANSFERS and insn.mem is not None and insn.mem[0] == SP)


def _unreached(start: int, end: int, code_at: Callable[[int, int], bytes], arm: bool,
               data: Container[int], reached: dict[int, int]) -> Iterator[Instruction]:
    """The function's code no path reaches, read in order from each gap
    the paths leave, stepping over undecodable bytes and what the analysis
    knows as data (a literal pool's words decode as instructions that name
    registers)."""
    step, at = 4 if arm else 2, start
    while at < end:
        if at in reached:
            at += reached[at]
            continue
        insn = decode_one(code_at(at, min(4, end - at)), at, arm)
        if insn is None or any(byte in data for byte in range(at, at + insn.size)):
            at += step
        else:
            yield insn
            at += insn.size
