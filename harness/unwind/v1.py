"""Chrome's v1 unwinder (CFIBacktraceAndroid::Unwind,
base/trace_event/cfi_backtrace_android.cc) over a v1 blob.

One step: caller sp = sp + CFA offset, caller pc = [caller sp - RA offset].
Where the table has nothing (a function's first instruction, CANT_UNWIND
ranges) only the innermost frame can go on, on the assumption Chrome made:
the pc is at a function's entry, so the return address is in lr and sp is
the caller's. No callee-saved register is restored: the verifier checks v1
on pc and sp only (`restores`).
"""

from __future__ import annotations

from functools import lru_cache

from harness.errors import LookupFailure
from harness.formats.chrome_v1 import V1Table
from harness.registers import LR, PC, SP
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import EVERYWHERE, LEAF, NOWHERE, Rule, RuleRange, ranged
from harness.unwind.walk import PC_SP_ONLY, check_caller


class V1Unwinder:
    restores = PC_SP_ONLY

    def __init__(self, table: V1Table, text_base: int, name: str = "v1"):
        self.table = table
        self.text_base = text_base
        self.name = name

    def row_range(self, pc: int, innermost: bool) -> tuple[tuple[int, int] | None, int, int]:
        """(CFA offset, RA offset) for the frame at pc (None: take pc from
        lr), and the lookup pcs [low, high) that find the same. A caller's
        pc is looked up as it is (Chrome's Unwind does not step back into
        the call)."""
        if pc >= self.text_base:
            found, low, high = self.table.lookup_range(pc - self.text_base)
            low = self.text_base + (0 if low is None else max(low, 0))
            high = EVERYWHERE if high is None else self.text_base + high
        else:
            found, low, high = None, NOWHERE, self.text_base
        if found is None and not innermost:
            raise LookupFailure("no_info", "v1 has no row for pc {pc:#x}", pc, low, high)
        return found, low, high

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        found = self.row_range(frame.pc, innermost)[0]
        regs = list(frame.r)
        if found is None:
            regs[PC] = frame.r[LR] & ~1
        else:
            cfa_offset, ra_offset = found
            regs[SP] = frame.sp + cfa_offset
            regs[PC] = stack.read_u32(regs[SP] - ra_offset) & ~1
        caller = Frame(r=tuple(regs), d=frame.d)
        check_caller(frame, caller, innermost)
        return caller

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return ranged(lambda: self.row_range(pc, innermost), _rule_of_row, pc, pc)  # looked up as it is


@lru_cache(maxsize=None)
def _rule_of_row(found: tuple[int, int] | None) -> Rule:
    """sp += CFA offset, pc = [sp - RA offset]; with no row, pc = lr."""
    if found is None:
        return LEAF
    cfa_offset, ra_offset = found
    return Rule(offset=cfa_offset, loads=((PC, -ra_offset),), pc_from_lr=False)
