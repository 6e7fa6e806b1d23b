"""The ELF's own `.ARM.exidx` tables, run as a stack unwinder.

EXIDX describes a function's body state only (what a throw from a call site
needs), so it is expected to be wrong in prologues and epilogues.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import cached_property
from typing import Iterator, Sequence

from harness.errors import UnwindFailure
from harness.formats import ehabi
from harness.formats.arm_exidx import ExidxEntry, parse_sections, require_exidx_sections
from harness.formats.elf import ElfImage
from harness.program import ExidxSections
from harness.unwind.ehabi_run import caller_by_run, rule_of_run
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import Rule, RuleRange, failing
from harness.unwind.rule_map import RuleMap, partition_of, rule_maps
from harness.unwind.walk import Unwinder


class ExidxUnwinder(Unwinder):
    def __init__(self, entries: Sequence[ExidxEntry], name: str = "exidx",
                 end: int | None = None):
        """`end`: where the last entry's function ends (unbounded if None)."""
        self.entries = tuple(sorted(entries, key=lambda e: e.start))
        self.starts = [e.start for e in self.entries]
        self.end = end
        self.name = name

    def entry_for(self, pc: int) -> ExidxEntry:
        """The entry for pc: the last starting at or below it (up to `end`)."""
        index = bisect_right(self.starts, pc) - 1
        if index < 0 or (index == len(self.entries) - 1 and self.end is not None and pc >= self.end):
            raise UnwindFailure("no_info", f"no .ARM.exidx entry covers pc {pc:#x}")
        return self.entries[index]

    def ops_for(self, lookup_pc: int) -> tuple[ehabi.Op, ...]:
        entry = self.entry_for(lookup_pc)
        if entry.kind == "cantunwind":
            raise UnwindFailure("no_info", "EXIDX_CANTUNWIND")
        if entry.problem is not None:  # this function's entry only: the rest of the table stands
            raise UnwindFailure("corrupt_table", f"unreadable entry: {entry.problem}")
        return entry.ops

    # Its own step (the EHABI interpreter): a run no rule states (rule_of_run's None) only it can follow.
    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        # Return addresses are looked up one byte earlier, as in the siblings.
        lookup_pc = frame.pc if innermost else frame.pc - 1
        return caller_by_run(self.ops_for(lookup_pc), frame, stack, innermost)

    def segments(self) -> Iterator[tuple[int, int | None]]:
        """What `entry_for` finds, pc by pc: (first pc, entry index or
        None) in increasing order, each holding up to the next one."""
        yield from ((entry.start, index) for index, entry in enumerate(self.entries))
        if self.entries and self.end is not None:
            yield max(self.end, self.entries[-1].start), None

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules: each entry's."""
        partition, indices = partition_of(self.segments())
        return rule_maps(partition, [_content(self.entries[index]) for index in indices], _rule_of_content,
                         "no .ARM.exidx entry covers pc {pc:#x}")

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


def _content(entry: ExidxEntry) -> tuple:
    """What an entry's rule depends on (`ops_for`'s order of checks)."""
    if entry.kind == "cantunwind":
        return ("cantunwind",)
    if entry.problem is not None:
        return ("unreadable", entry.problem)
    return ("ops", entry.ops)


def _rule_of_content(content: tuple) -> Rule | None:
    if content[0] == "cantunwind":
        return failing("no_info", "EXIDX_CANTUNWIND")
    if content[0] == "unreadable":
        return failing("corrupt_table", f"unreadable entry: {content[1]}")
    return rule_of_run(content[1])


def exidx_unwinder_for(sections: ExidxSections, name: str = "exidx") -> ExidxUnwinder:
    """An ExidxUnwinder from `.ARM.exidx` / `.ARM.extab` bytes (a Program's, or an ELF's)."""
    return ExidxUnwinder(parse_sections(sections), name, sections.end)


def exidx_unwinder(image_or_path: ElfImage | str, name: str = "exidx") -> ExidxUnwinder:
    """An ExidxUnwinder from an ELF's `.ARM.exidx` / `.ARM.extab`."""
    return exidx_unwinder_for(require_exidx_sections(image_or_path), name)
