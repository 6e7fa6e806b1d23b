"""One strategy over a process of several modules: each module unwound by
its own tables, as real profilers do (Chrome unwinds its library with v2
and hands the system's to libunwindstack). Where no module has tables of
this strategy the step refuses with no_info: an honest stop, which the
report counts apart from a wrong frame."""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple, Sequence

from harness.errors import UnwindFailure
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import EVERYWHERE, NOWHERE, PcWording, RuleRange, failing
from harness.unwind.walk import ALL_CALLEE_SAVED, Restores, Unwinder


class Covered(NamedTuple):
    """Code [start, end) and the unwinder built from its module's tables."""

    start: int
    end: int
    unwinder: Unwinder


class PerModule(Unwinder):
    """The step of whichever module holds the frame's code; no_info outside them."""

    def __init__(self, name: str, covered: Sequence[Covered]):
        self.name = name
        self.covered = tuple(sorted(covered))
        self._starts = [c.start for c in self.covered]
        self.restores: Restores = self.covered[0].unwinder.restores if self.covered else ALL_CALLEE_SAVED
        self._refusal = f"no module with {name} tables holds this code"

    def _find(self, lookup: int) -> int:
        """The index of the module holding `lookup`, or -1 - the index of the next one."""
        index = bisect_right(self._starts, lookup) - 1
        if index >= 0 and lookup < self.covered[index].end:
            return index
        return -2 - index

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        # A caller's pc is a return address: its call lies one byte before.
        index = self._find(frame.pc if innermost else frame.pc - 1)
        if index < 0:
            raise UnwindFailure("no_info", f"{self._refusal} (pc {frame.pc:#x})")
        return self.covered[index].unwinder.step(frame, stack, innermost)

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        shift = 0 if innermost else 1
        index = self._find(pc - shift)
        if index < 0:  # between modules: refuse over the whole gap
            following = -2 - index + 1
            low = self.covered[following - 1].end if following > 0 else NOWHERE
            high = self.covered[following].start if following < len(self.covered) else EVERYWHERE
            return RuleRange(failing("no_info", PcWording(self._refusal + " (pc {pc:#x})", 0)), low + shift,
                             high + shift)
        start, end, unwinder = self.covered[index]
        rule_at = unwinder.rule_at
        if rule_at is None:
            return RuleRange(None, start + shift, end + shift)  # its own step decides
        found = rule_at(pc, innermost)
        return RuleRange(found.rule, max(found.low, start + shift), min(found.high, end + shift))
