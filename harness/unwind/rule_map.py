"""An unwinder's rules by its table's rows: which row each pc finds, as a
partition of the pcs, and the rule each row makes.

A table's lookup is piecewise constant: pcs in a stretch of code find the
same row (a v2 offset-list pair, a CFI row, an EXIDX entry...). A Partition
lists those stretches once, as sorted starts, each with its row number, so
that finding a pc's row is one binary search: here in Python (`rule_at`),
and in the compiled kernel over the same arrays (csrc/sources.c), which
then asks Python for a row's rule once per row rather than for each range
of pcs it meets. The partition is the definition's own lookup written out:
tests hold every pc of the corpora to the unwinder's lookup (`step`'s).

A frame's pc is looked up at pc - shift (a caller's return address one
byte back, in its call, for most unwinders), so its rule holds over its
row's segment moved up by the shift.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import NamedTuple

from harness.errors import UnwindFailure
from harness.unwind.rule import EVERYWHERE, LEAF, NOWHERE, PcWording, Rule, RuleRange, failing

NO_ROW = -1  # the table has nothing for the pcs of a segment


class Partition(NamedTuple):
    """Segment i holds the lookup pcs [starts[i], starts[i + 1]) (the last
    one up to EVERYWHERE); each finds row rows[i] (NO_ROW: none).
    starts[0] is NOWHERE, and neighbours find different rows."""

    starts: array  # "q", increasing
    rows: array  # "q"

    def find(self, lookup_pc: int) -> tuple[int, int, int]:
        """(row, low, high): the row lookup_pc finds, and its segment."""
        index = bisect_right(self.starts, lookup_pc) - 1
        high = self.starts[index + 1] if index + 1 < len(self.starts) else EVERYWHERE
        return self.rows[index], self.starts[index], high


def partition_of(segments: Iterable[tuple[int, Hashable | None]], base: int = 0) -> tuple[Partition, list]:
    """The partition of (start, value) pairs in increasing start order, each
    value holding from base + start up to the next one (a later pair at the
    same start replaces the earlier; None: no row), and the distinct values
    by row number. Before the first start there is no row."""
    starts, rows = [NOWHERE], [NO_ROW]
    values: list = []
    numbers: dict = {}
    for offset, value in segments:
        start = base + offset
        if value is None:
            row = NO_ROW
        else:
            row = numbers.get(value)
            if row is None:
                row = numbers[value] = len(values)
                values.append(value)
        if start == starts[-1]:
            rows[-1] = row
            if len(rows) > 1 and rows[-2] == row:  # now equal to the one before: one segment
                starts.pop()
                rows.pop()
        elif row != rows[-1]:
            starts.append(start)
            rows.append(row)
    return Partition(array("q", starts), array("q", rows)), values


class RuleMap(NamedTuple):
    """The rules of frames of one kind (the innermost, or callers): a frame
    at pc finds the row of `partition` at pc - shift, and its rule is
    `rule_of_value` of the row's value (`nothing` where the table has no
    row). `rule_of_value` is a pure function of the value, so that
    (rule_of_value, value) names the rule wherever it is met: the kernel
    makes each rule once (harness.verify.kernel)."""

    partition: Partition
    shift: int
    values: Sequence
    rule_of_value: Callable[[Hashable], Rule | None]
    nothing: Rule

    def rule_of_row(self, row: int) -> Rule | None:
        return self.nothing if row == NO_ROW else self.rule_of_value(self.values[row])

    def key_of_row(self, row: int) -> Hashable:
        """What names the rule of `row`, whichever table holds it."""
        return (itself, self.nothing) if row == NO_ROW else (self.rule_of_value, self.values[row])

    def keys_of_rows(self) -> list[Hashable]:
        """key_of_row of every row, in order (without a call per row)."""
        make = self.rule_of_value
        return [(make, value) for value in self.values]

    def rule_at(self, pc: int) -> RuleRange:
        row, low, high = self.partition.find(pc - self.shift)
        return RuleRange(self.rule_of_row(row), low + self.shift, high + self.shift)


def itself(rule: Rule | None) -> Rule | None:
    return rule


def rule_maps(partition: Partition, values: Sequence, rule_of_value: Callable[[Hashable], Rule | None],
              nothing: str, caller_shift: int = 1, innermost_nothing: Rule | None = None) -> tuple[RuleMap, RuleMap]:
    """(callers', innermost) RuleMaps over `partition` of `values`; where
    the table has nothing, a no_info failure worded by `nothing` ("...
    {pc:#x}") with the lookup pc (for the innermost frame,
    `innermost_nothing` where given). Callers look up at pc - caller_shift,
    the innermost frame at pc."""
    def missing(shift: int) -> Rule:
        return failing("no_info", PcWording(nothing, shift))

    return (RuleMap(partition, caller_shift, values, rule_of_value, missing(caller_shift)),
            RuleMap(partition, 0, values, rule_of_value, innermost_nothing or missing(0)))


def found_in(lookup_range: Callable[[int], tuple[object, object, object]], text_base: int, lookup_pc: int,
             nothing: str):
    """What a table's `lookup_range(offset from the text base)` finds for
    `lookup_pc`; where nothing, a no_info UnwindFailure worded by `nothing`
    ("... {pc:#x}")."""
    found = lookup_range(lookup_pc - text_base)[0] if lookup_pc >= text_base else None
    if found is None:
        raise UnwindFailure("no_info", nothing.format(pc=lookup_pc))
    return found


def everywhere(callers: Rule | None, innermost: Rule | None) -> tuple[RuleMap, RuleMap]:
    """RuleMaps of one rule for every pc (callers', innermost)."""
    whole = Partition(array("q", [NOWHERE]), array("q", [0]))
    return (RuleMap(whole, 0, (callers,), itself, LEAF), RuleMap(whole, 0, (innermost,), itself, LEAF))
