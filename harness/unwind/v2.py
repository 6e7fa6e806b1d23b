"""The v2 unwinder: look the pc up (a caller's one byte earlier, inside its
call), execute the run with every EHABI instruction the tables may hold
(VFP pops included), and apply the walk's guards (harness.unwind.walk:
the caller's sp 4-byte aligned and above the callee's, vsp within the
stack). Chrome's runtime differs, and `v2-chrome` (harness.unwind.v2_chrome)
is it: its opcode subset, 8-byte alignment, vsp never below the frame's sp."""

from __future__ import annotations

from functools import cached_property
from typing import Sequence

from harness.errors import UnwindFailure
from harness.formats import ehabi
from harness.formats.chrome_v2.reader import V2Reader
from harness.unwind.ehabi_run import caller_by_run, rule_of_run
from harness.unwind.frame import Frame, StackReader
from harness.unwind.modules import Covered, PerModule
from harness.unwind.rule import RuleRange
from harness.unwind.rule_map import RuleMap, partition_of, rule_maps
from harness.unwind.walk import Unwinder

Run = tuple[ehabi.Op, ...]


class PcCache:
    """Every pc's run, kept for good (the tables never change): what the harness uses."""

    def __init__(self) -> None:
        self.runs: dict[int, Run] = {}
        self.hits = self.misses = 0

    def get(self, pc: int) -> Run | None:
        return self.runs.get(pc)

    def put(self, pc: int, run: Run) -> None:
        self.runs[pc] = run


class DirectMappedCache(PcCache):
    """A small fixed cache, one slot per pc modulo its size (as in Valgrind's
    509-entry CFI cache): what an in-process profiler could afford."""

    def __init__(self, entries: int = 509) -> None:
        super().__init__()
        self.tags: list[int | None] = [None] * entries
        self.slots: list[Run | None] = [None] * entries

    def get(self, pc: int) -> Run | None:
        slot = pc % len(self.tags)
        if self.tags[slot] == pc:
            self.hits += 1
            return self.slots[slot]
        self.misses += 1
        return None

    def put(self, pc: int, run: Run) -> None:
        slot = pc % len(self.tags)
        self.tags[slot], self.slots[slot] = pc, run


class NoCache(PcCache):
    """Look every pc up in the tables (for measuring the lookup itself)."""

    def get(self, pc: int) -> Run | None:
        return None

    def put(self, pc: int, run: Run) -> None:
        pass


def v2_over_tables(tables: Sequence[tuple[int, V2Reader]], text_base: int, name: str = "v2") -> Unwinder:
    """The v2 unwinder over one table, or over the several tables of a
    parts file (harness.formats.chrome_v2.parts: (text offset, reader)
    pairs), each for the code from its base up to the next one's."""
    if len(tables) == 1:
        return V2Unwinder(tables[0][1], text_base, name)
    covered = []
    for number, (offset, reader) in enumerate(tables):
        base = text_base + offset
        end = text_base + tables[number + 1][0] if number + 1 < len(tables) else base + reader.function_starts()[1]
        covered.append(Covered(base, end, V2Unwinder(reader, base, name)))
    return PerModule(name, covered)


class V2Unwinder(Unwinder):
    def __init__(self, reader: V2Reader, text_base: int, name: str = "v2", cache: PcCache | None = None):
        self.reader = reader
        self.text_base = text_base
        self.name = name
        self.cache = PcCache() if cache is None else cache

    def instructions_for(self, pc: int) -> Run:
        run = self.cache.get(pc)
        if run is None:
            run = self._lookup(pc)
            self.cache.put(pc, run)
        return run

    def _lookup(self, pc: int) -> Run:
        return self._found(pc)[0]

    def _found(self, pc: int) -> tuple[Run, int, int]:
        """The run for pc, and the pcs [low, high) that find the same."""
        found = self.reader.lookup(pc - self.text_base)
        if found is None:
            raise UnwindFailure("no_info", f"no v2 entry covers pc {pc:#x}")
        return self.reader.run(found.instruction_index), self.text_base + found.low, self.text_base + found.high

    # Its own step (the EHABI interpreter): a run no rule states (rule_of_run's None) only it can follow.
    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        # A return address may be the first byte after a call to a function
        # that never returns, so callers are looked up one byte earlier.
        lookup_pc = frame.pc if innermost else frame.pc - 1
        return caller_by_run(self.instructions_for(lookup_pc), frame, stack, innermost)

    @cached_property
    def rule_maps(self) -> tuple[RuleMap, RuleMap]:
        """(callers', innermost) rules: each run's (harness.unwind.rule_map)."""
        partition, indices = v2_partition(self.reader, self.text_base)
        return rule_maps(partition, [self.reader.run(index) for index in indices], rule_of_run,
                         "no v2 entry covers pc {pc:#x}")

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        return self.rule_maps[innermost].rule_at(pc)


def v2_partition(reader: V2Reader, text_base: int):
    """The Partition of the pcs a v2 table covers, and the instruction index
    of each row: rule_map.partition_of over the reader's segments."""
    return partition_of(reader.segments(), text_base)
