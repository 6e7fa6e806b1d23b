"""The reference: CFI rows interpreted directly, with no encoding in between."""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from typing import Sequence

from harness.cfi import CfiRow, FunctionCfi
from harness.errors import UnwindFailure
from harness.frame import DWARF_D0, LR, PC, SP, Frame, Stack
from harness.rule import Rule, rule_from
from harness.walk import check_caller


class DwarfUnwinder:
    def __init__(self, functions: Sequence[FunctionCfi], name: str = "dwarf", cache_rows: bool = True):
        self.name = name
        self.cache_rows = cache_rows  # keep each pc's row (off: find it every time)
        self.functions = sorted(functions, key=lambda f: f.start)
        self.starts = [f.start for f in self.functions]
        self._rows: dict[int, CfiRow] = {}

    def row_for(self, pc: int) -> CfiRow:
        row = self._rows.get(pc)
        if row is None:
            index = bisect_right(self.starts, pc) - 1
            if index < 0 or pc >= self.functions[index].end:
                raise UnwindFailure("no_info", f"no CFI covers pc {pc:#x}")
            row = self.functions[index].row_at(pc)
            if self.cache_rows:
                self._rows[pc] = row
        return row

    def usable_row(self, lookup_pc: int) -> CfiRow:
        row = self.row_for(lookup_pc)
        if row.problem:
            raise UnwindFailure("unsupported", f"CFI at {row.address:#x}: {row.problem}")
        return row

    def step(self, frame: Frame, stack: Stack, innermost: bool) -> Frame:
        row = self.usable_row(frame.pc if innermost else frame.pc - 1)
        cfa = frame.r[row.cfa_reg] + row.cfa_offset
        regs = list(frame.r)
        dregs = list(frame.d)
        for reg, offset in row.saved:
            if reg >= DWARF_D0:
                dregs[reg - DWARF_D0] = stack.read_u64(cfa + offset)
            else:
                regs[reg] = stack.read_u32(cfa + offset)
        regs[PC] = regs[LR] & ~1  # the return address column is lr
        regs[SP] = cfa
        caller = Frame(r=tuple(regs), d=tuple(dregs))
        check_caller(frame, caller, innermost)
        return caller

    def rule_at(self, pc: int, innermost: bool) -> Rule | None:
        return rule_from(lambda: self.usable_row(pc if innermost else pc - 1), _rule_of_row)


@lru_cache(maxsize=None)
def _rule_of_row(row: CfiRow) -> Rule:
    """Registers at CFA + offset; pc from the lr column, sp = CFA."""
    return Rule(base=row.cfa_reg, offset=row.cfa_offset,
                loads=tuple((reg, offset) for reg, offset in row.saved if reg < DWARF_D0),
                vfp_loads=tuple((reg - DWARF_D0, offset) for reg, offset in row.saved if reg >= DWARF_D0))
