"""Chrome's v1 unwinder (CFIBacktraceAndroid, 2018) over a v1 blob.

One step: caller sp = sp + CFA offset, caller pc = [caller sp - RA offset].
Where the table has nothing (a function's first instruction, CANT_UNWIND
ranges) only the innermost frame can go on, on the assumption Chrome made:
the pc is at a function's entry, so the return address is in lr and sp is
the caller's. No callee-saved register is restored: the verifier checks v1
on pc and sp only (`restores`).
"""

from __future__ import annotations

from harness.errors import UnwindFailure
from harness.frame import LR, PC, SP, Frame, Stack
from harness.v1 import V1Table
from harness.walk import PC_SP_ONLY, check_caller


class V1Unwinder:
    restores = PC_SP_ONLY

    def __init__(self, table: V1Table, text_base: int, name: str = "v1"):
        self.table = table
        self.text_base = text_base
        self.name = name

    def step(self, frame: Frame, stack: Stack, innermost: bool) -> Frame:
        pc = frame.pc if innermost else frame.pc - 1
        found = self.table.lookup(pc - self.text_base) if pc >= self.text_base else None
        regs = list(frame.r)
        if found is None:
            if not innermost:
                raise UnwindFailure("no_info", f"v1 has no row for pc {pc:#x}")
            regs[PC] = frame.r[LR] & ~1
        else:
            cfa_offset, ra_offset = found
            regs[SP] = frame.sp + cfa_offset
            regs[PC] = stack.read_u32(regs[SP] - ra_offset) & ~1
        caller = Frame(r=tuple(regs), d=frame.d)
        check_caller(frame, caller, innermost)
        return caller
