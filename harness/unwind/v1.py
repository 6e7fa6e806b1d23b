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

from functools import cached_property, lru_cache, partial

from harness.formats.chrome_v1 import V1Table
from harness.registers import PC
from harness.unwind.frame import StackReader
from harness.unwind.rule import LEAF, Rule, RuleRange, replayed_failure, step_by_rule
from harness.unwind.rule_map import RuleMap, partition_of, rule_maps
from harness.unwind.walk import PC_SP_ONLY, Unwinder


class V1Unwinder(Unwinder):
    restores = PC_SP_ONLY

    def __init__(self, table: V1Table, text_base: int, name: str = "v1"):
        self.table = table
        self.text_base = text_base
        self.name = name

    step = step_by_rule  # its rule's (harness.unwind.rule.apply), which never defers

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules, a caller's pc looked up as it is;
        where the table has nothing, the innermost frame takes pc from lr."""
        return rule_maps(*partition_of(self.table.segments(), self.text_base), _rule_of_row,
                         "v1 has no row for pc {pc:#x}", caller_shift=0,
                         innermost_nothing=LEAF)

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


@lru_cache(maxsize=None)
def _rule_of_row(found: tuple[int, int] | None) -> Rule:
    """sp += CFA offset, pc = [sp - RA offset]; with no row, pc = lr.
    Where the return address lies outside the stack, the rule fails as
    a read there does, in its words (a guard: it never defers)."""
    if found is None:
        return LEAF
    cfa_offset, ra_offset = found
    return Rule(offset=cfa_offset, loads=((PC, -ra_offset),), pc_from_lr=False, bounds=(-ra_offset, 4 - ra_offset),
                guard_failure=replayed_failure(partial(_read_return_address, ra_offset), "a v1 rule"),
                guard_kind="bad_read")


def _read_return_address(ra_offset: int, base: int, sp: int, stack: StackReader) -> int:
    return stack.read_u32(base - ra_offset)
