"""The vmkunwind walk (seed 002, adapted to ARM32: harness.formats.vmkunwind)
over a vmkunwind blob built from the program's complete CFI.

One step: CFA = sp or r7 + offset, caller sp = CFA, caller r7 from its slot
(or unchanged), caller pc from lr's slot (or lr). Nothing else is restored,
as in ESXi, so the verifier checks pc, sp and r7 (`restores`). A caller's pc
is looked up one byte back, in its call.
"""

from __future__ import annotations

from functools import cached_property, lru_cache

from harness.formats.vmkunwind import FP, VmkRow, VmkTable
from harness.registers import PC, SP
from harness.unwind.rule import Rule, RuleRange, step_by_rule
from harness.unwind.rule_map import RuleMap, partition_of, rule_maps
from harness.unwind.walk import Restores, Unwinder


class VmkunwindUnwinder(Unwinder):
    restores = Restores((FP,), vfp=False)

    def __init__(self, table: VmkTable, text_base: int, name: str = "vmkunwind"):
        self.table = table
        self.text_base = text_base
        self.name = name

    step = step_by_rule  # its rule's (harness.unwind.rule.apply): a load outside the stack fails as a read there

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules: each row's."""
        return rule_maps(*partition_of(self.table.segments(), self.text_base), _rule_of_row,
                         "vmkunwind has no row for pc {pc:#x}")

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


@lru_cache(maxsize=None)
def _rule_of_row(row: VmkRow) -> Rule:
    """The kernel's form of a row: base sp or r7 plus the CFA offset, loads
    below it, caller sp = CFA."""
    loads = (((FP, -4 * row.r7_slot),) if row.r7_slot else ()) + (((PC, -4 * row.lr_slot),) if row.lr_slot else ())
    return Rule(base=FP if row.base_r7 else SP, offset=row.cfa_offset, loads=loads, pc_from_lr=not row.lr_slot)
