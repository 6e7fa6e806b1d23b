"""The reference: CFI rows interpreted directly, with no encoding in between."""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from typing import Sequence

from harness.errors import LookupFailure, UnwindFailure
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, PC, SP
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import EVERYWHERE, NOWHERE, Rule, RuleRange, ranged
from harness.unwind.walk import check_caller


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
            row = self.row_range(pc)[0]
            if self.cache_rows:
                self._rows[pc] = row
        return row

    def row_range(self, pc: int) -> tuple[CfiRow, int, int]:
        """The row for pc, and the pcs [low, high) that find the same row."""
        index = bisect_right(self.starts, pc) - 1
        if index < 0 or pc >= self.functions[index].end:
            following = self.starts[index + 1] if index + 1 < len(self.starts) else EVERYWHERE
            raise LookupFailure("no_info", "no CFI covers pc {pc:#x}", pc,
                                NOWHERE if index < 0 else self.functions[index].end, following)
        row, low, high = self.functions[index].row_range(pc)
        if index + 1 < len(self.starts):
            high = min(high, self.starts[index + 1])
        return row, low, high

    def usable_row(self, lookup_pc: int) -> CfiRow:
        return _usable(self.row_for(lookup_pc))

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
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

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        lookup_pc = pc if innermost else pc - 1

        def find():
            row, low, high = self.row_range(lookup_pc)
            return _usable(row), low, high
        return ranged(find, lambda row: _rule_of_row(row.cfa_reg, row.cfa_offset, row.saved), pc, lookup_pc)


def _usable(row: CfiRow) -> CfiRow:
    if row.problem:
        raise UnwindFailure("unsupported", f"CFI at {row.address:#x}: {row.problem}")
    return row


@lru_cache(maxsize=1 << 16)
def _rule_of_row(cfa_reg: int, cfa_offset: int, saved: tuple[tuple[int, int], ...]) -> Rule:
    """Registers at CFA + offset; pc from the lr column, sp = CFA (by the
    row's rules alone, which repeat from function to function)."""
    return Rule(base=cfa_reg, offset=cfa_offset,
                loads=tuple((reg, offset) for reg, offset in saved if reg < DWARF_D0),
                vfp_loads=tuple((reg - DWARF_D0, offset) for reg, offset in saved if reg >= DWARF_D0))
