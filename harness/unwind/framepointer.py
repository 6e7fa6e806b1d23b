"""Frame-pointer chain walking for Thumb code (the baseline without tables).

Assumes clang's Thumb frame record: `push {..., r7, lr}; add r7, sp, #k`
leaves r7 pointing at the saved r7, with the saved lr just above it:

    fp + 4: saved lr (the return address into the caller)
    fp + 0: saved r7 (the caller's frame pointer)

so one step is: caller fp = [fp], caller pc = [fp + 4] & ~1, caller sp = fp + 8.
Only r7 is recovered; r4-r6 and r8-r11 are copied through unchanged, because a
frame record says nothing about where they were saved (the weakness this
unwinder exists to measure). GCC's Thumb frame pointer points at the bottom of
the frame instead, with no {r7, lr} record, so GCC code is not walkable here.

Leaf heuristic (innermost frame only), after the seed "Stack traces on ARM":
a function that has not pushed a frame record (a leaf, or any function still
in its prologue) still holds its caller's r7, and its return address is in lr.
The seed tells a saved frame pointer from a return address by comparing the
word with the frame pointer: a saved fp lies higher up the stack, so it is
bigger than fp; a return address (code) is smaller. Here: if r7 does not point
into the stack at or above sp, or the word it points at is neither 0 (the end
of the chain) nor an address above r7, r7 is not this frame's record, so the
frame is taken as a leaf: pc = lr, sp unchanged. A leaf whose r7 still points
at a valid caller record is not detected (the caller frame is then skipped).
"""

from __future__ import annotations

from functools import lru_cache

from harness.registers import PC
from harness.unwind.rule import EVERYWHERE, NOWHERE, Rule, RuleRange, step_by_rule
from harness.unwind.rule_map import RuleMap, everywhere
from harness.unwind.walk import Restores, Unwinder


class FramePointerUnwinder(Unwinder):
    def __init__(self, fp_reg: int = 7, name: str = "framepointer"):
        self.fp_reg = fp_reg
        self.name = name
        self.restores = Restores((fp_reg,), vfp=False)  # checked on pc, sp and the chain register
        self._ranges = tuple(RuleRange(_record_rule(fp_reg, innermost), NOWHERE, EVERYWHERE)
                             for innermost in (False, True))

    step = step_by_rule  # its rule's (harness.unwind.rule.apply), which never defers

    @property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """The same record step at every pc: the guards are that a record fits
        at fp (aligned, at or above sp, inside the stack), and at the innermost
        frame the seed's test picks record or leaf."""
        return everywhere(_record_rule(self.fp_reg, False), _record_rule(self.fp_reg, True))

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self._ranges[innermost]  # rule_maps' (made once: the step looks it up at every frame)


def record_problem(fp: int, sp: int, low: int, high: int) -> tuple[str, str]:
    """Why no {fp, lr} record can start at fp, in a frame at sp of the stack [low, high)."""
    if fp % 4:
        return "bad_read", f"frame pointer {fp:#x} is not 4-byte aligned"
    return "bad_read", f"frame pointer {fp:#x} is outside the stack [{max(sp, low):#x}, {high:#x})"


@lru_cache(maxsize=None)
def _record_rule(fp: int, innermost: bool) -> Rule:
    return Rule(base=fp, loads=((fp, 0), (PC, 4)), end=8, bounds=(0, 8), pc_from_lr=False,
                aligned=True, above_sp=True, leaf_unless_record=innermost,
                guard_failure=None if innermost else record_problem, guard_kind=None if innermost else "bad_read")
