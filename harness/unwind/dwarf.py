"""The reference: CFI rows interpreted directly, with no encoding in between."""

from __future__ import annotations

from bisect import bisect_right
from functools import cached_property, lru_cache
from typing import Iterator, Sequence

from harness.errors import UnwindFailure
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0
from harness.unwind.rule import Rule, RuleRange, failing, step_by_rule
from harness.unwind.rule_map import RuleMap, partition_of, rule_maps
from harness.unwind.walk import Unwinder


class DwarfUnwinder(Unwinder):
    def __init__(self, functions: Sequence[FunctionCfi], name: str = "dwarf"):
        self.name = name
        self.functions = sorted(functions, key=lambda f: f.start)
        self.starts = [f.start for f in self.functions]

    def row_of(self, pc: int) -> CfiRow:
        """The row in force at pc (what `segments` lists, found pc by pc)."""
        index = bisect_right(self.starts, pc) - 1
        if index < 0 or pc >= self.functions[index].end:
            raise UnwindFailure("no_info", f"no CFI covers pc {pc:#x}")
        return self.functions[index].row_at(pc)

    # Its rule's (harness.unwind.rule.apply): a load outside the stack fails as a read there.
    # A row's core registers are read before its d registers, as `saved` is sorted by register.
    step = step_by_rule

    def segments(self) -> Iterator[tuple[int, CfiRow | None]]:
        """What `row_of` finds, pc by pc: (first pc, row or None) in
        increasing order, each holding up to the next one. A function's
        rows hold up to its end, or to the next function's start."""
        for index, function in enumerate(self.functions):
            end = function.end if index + 1 == len(self.starts) else min(function.end, self.starts[index + 1])
            if end <= function.start:
                continue  # the next function starts here too: it is found instead
            yield function.start, function.rows[0]
            for row in function.rows[1:]:
                if row.address >= end:
                    break
                yield max(row.address, function.start), row
            yield end, None

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules: each row's, by what it depends on
        (neighbouring rows alike hold as one; a tuple hashes in C, a row,
        a dataclass, in Python)."""
        contents = ((start, None if row is None else _content(row)) for start, row in self.segments())
        return rule_maps(*partition_of(contents), _rule_of_content, "no CFI covers pc {pc:#x}")

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


def _content(row: CfiRow) -> tuple:
    """What a row's rule depends on: its rules, or where it is and why it is unusable."""
    return ("unusable", row.address, row.problem) if row.problem else (row.cfa_reg, row.cfa_offset, row.saved)


def _rule_of_content(content: tuple) -> Rule:
    if content[0] == "unusable":
        return failing("unsupported", f"CFI at {content[1]:#x}: {content[2]}")
    return _rule_of_row(*content)


@lru_cache(maxsize=1 << 16)
def _rule_of_row(cfa_reg: int, cfa_offset: int, saved: tuple[tuple[int, int], ...]) -> Rule:
    """Registers at CFA + offset; pc from the lr column, sp = CFA (by the
    row's rules alone, which repeat from function to function)."""
    return Rule(base=cfa_reg, offset=cfa_offset,
                loads=tuple((reg, offset) for reg, offset in saved if reg < DWARF_D0),
                vfp_loads=tuple((reg - DWARF_D0, offset) for reg, offset in saved if reg >= DWARF_D0))
