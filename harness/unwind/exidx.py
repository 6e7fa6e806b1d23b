"""The ELF's own `.ARM.exidx` tables, run as a stack unwinder.

EXIDX describes a function's body state only (what a throw from a call site
needs), so it is expected to be wrong in prologues and epilogues.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Sequence

from harness.errors import LookupFailure, UnwindFailure
from harness.formats import ehabi
from harness.formats.arm_exidx import ExidxEntry, parse_sections, require_exidx_sections
from harness.formats.elf import ElfImage
from harness.program import ExidxSections
from harness.unwind.ehabi_run import caller_by_run, rule_of_run
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import EVERYWHERE, NOWHERE, RuleRange, keeps_last_range, ranged


class ExidxUnwinder:
    def __init__(self, entries: Sequence[ExidxEntry], name: str = "exidx",
                 end: int | None = None):
        """`end`: where the last entry's function ends (unbounded if None)."""
        self.entries = tuple(sorted(entries, key=lambda e: e.start))
        self.starts = [e.start for e in self.entries]
        self.end = end
        self.name = name

    def entry_for(self, pc: int) -> ExidxEntry:
        return self.entry_range(pc)[0]

    def entry_range(self, pc: int) -> tuple[ExidxEntry, int, int]:
        """The entry for pc, and the pcs [low, high) it covers."""
        index = bisect_right(self.starts, pc) - 1
        last = index == len(self.entries) - 1
        if index < 0 or (last and self.end is not None and pc >= self.end):
            low, high = (NOWHERE, self.starts[0] if self.starts else EVERYWHERE) if index < 0 \
                else (self.end, EVERYWHERE)
            raise LookupFailure("no_info", "no .ARM.exidx entry covers pc {pc:#x}", pc, low, high)
        high = self.starts[index + 1] if not last else EVERYWHERE if self.end is None else self.end
        return self.entries[index], self.starts[index], high

    def ops_range(self, lookup_pc: int) -> tuple[tuple[ehabi.Op, ...], int, int]:
        entry, low, high = self.entry_range(lookup_pc)
        if entry.kind == "cantunwind":
            raise LookupFailure("no_info", "EXIDX_CANTUNWIND", lookup_pc, low, high)
        if entry.problem is not None:  # this function's entry only: the rest of the table stands
            raise UnwindFailure("corrupt_table", f"unreadable entry: {entry.problem}")
        return entry.ops, low, high

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        # Return addresses are looked up one byte earlier, as in the siblings.
        lookup_pc = frame.pc if innermost else frame.pc - 1
        return caller_by_run(self.ops_range(lookup_pc)[0], frame, stack, innermost)

    @keeps_last_range
    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        lookup_pc = pc if innermost else pc - 1
        return ranged(lambda: self.ops_range(lookup_pc), rule_of_run, pc, lookup_pc)


def exidx_unwinder_for(sections: ExidxSections, name: str = "exidx") -> ExidxUnwinder:
    """An ExidxUnwinder from `.ARM.exidx` / `.ARM.extab` bytes (a Program's, or an ELF's)."""
    return ExidxUnwinder(parse_sections(sections), name, sections.end)


def exidx_unwinder(image_or_path: ElfImage | str, name: str = "exidx") -> ExidxUnwinder:
    """An ExidxUnwinder from an ELF's `.ARM.exidx` / `.ARM.extab`."""
    return exidx_unwinder_for(require_exidx_sections(image_or_path), name)
