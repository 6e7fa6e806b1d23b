"""The frame state a generator tracks while it emits instructions, and the
effect of each frame-changing instruction on it.

This is how the generators derive DWARF-style CFI from the instructions they
chose, independently of the v2 code under test: CFA = cfa_reg + cfa_offset,
`depth` = CFA - sp (None once sp moved by a register amount), `saved` maps a
register to its slot as an offset from the CFA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.program import TRACKED_REGS, CfiRow
from harness.registers import DWARF_D0, SP

FP = 7  # Thumb frame pointer


@dataclass(frozen=True)
class FrameState:
    depth: int | None = 0
    cfa_reg: int = SP
    cfa_offset: int = 0
    saved: tuple[tuple[int, int], ...] = ()

    def row(self, address: int) -> CfiRow:
        return CfiRow(address, self.cfa_reg, self.cfa_offset, self.saved)

    def _moved(self, delta: int) -> "FrameState":
        """sp moved down by `delta` bytes (negative: up)."""
        depth = self.depth + delta
        offset = depth if self.cfa_reg == SP else self.cfa_offset
        return replace(self, depth=depth, cfa_offset=offset)

    def _save(self, slots: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
        saved = dict(self.saved)
        saved.update((reg, offset) for reg, offset in slots if reg in TRACKED_REGS)
        return tuple(sorted(saved.items()))

    def _restore(self, regs) -> tuple[tuple[int, int], ...]:
        return tuple((r, o) for r, o in self.saved if r not in regs)


# ---------------------------------------------------------------- effects
# Each takes the state before an instruction and returns the state after it.


def push(regs: tuple[int, ...]):
    def effect(state: FrameState) -> FrameState:
        moved = state._moved(4 * len(regs))
        bottom = -moved.depth
        return replace(moved, saved=moved._save([(r, bottom + 4 * i) for i, r in enumerate(sorted(regs))]))

    return effect


def pop(regs: tuple[int, ...]):
    def effect(state: FrameState) -> FrameState:
        return _sp_based(replace(state._moved(-4 * len(regs)), saved=state._restore(regs)))

    return effect


def vpush(first: int, count: int):
    def effect(state: FrameState) -> FrameState:
        moved = state._moved(8 * count)
        bottom = -moved.depth
        slots = [(DWARF_D0 + first + i, bottom + 8 * i) for i in range(count)]
        return replace(moved, saved=moved._save(slots))

    return effect


def vpop(first: int, count: int):
    regs = tuple(DWARF_D0 + first + i for i in range(count))

    def effect(state: FrameState) -> FrameState:
        return _sp_based(replace(state._moved(-8 * count), saved=state._restore(regs)))

    return effect


def sub_sp(amount: int):
    return lambda state: state._moved(amount)


def add_sp(amount: int):
    return lambda state: _sp_based(state._moved(-amount))


def set_frame_pointer(offset: int):
    """add r7, sp, #offset: the CFA is now defined through r7."""

    def effect(state: FrameState) -> FrameState:
        return replace(state, cfa_reg=FP, cfa_offset=state.depth - offset)

    return effect


def dynamic_alloc(state: FrameState) -> FrameState:
    """sub sp, sp, rN: the depth is no longer known; the CFA must use r7."""
    assert state.cfa_reg == FP, "dynamic allocation needs the CFA in the frame pointer"
    return replace(state, depth=None)


def sp_from_frame_pointer(below: int):
    """mov sp, r7 (below = 0) or sub sp, r7, #below."""

    def effect(state: FrameState) -> FrameState:
        depth = state.cfa_offset + below
        return FrameState(depth, SP, depth, state.saved)

    return effect


def _sp_based(state: FrameState) -> FrameState:
    """Epilogues define the CFA through sp again as soon as sp is known (r7 may
    be popped next), as GCC does."""
    if state.cfa_reg == FP and state.depth is not None:
        return replace(state, cfa_reg=SP, cfa_offset=state.depth)
    return state
