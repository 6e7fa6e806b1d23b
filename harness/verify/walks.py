"""Walks checked against the shadow stack: the first difference between
an unwinder's walk and the expected frames, and the same without
re-walking outer frames whose stack is unchanged (the memo)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from harness.errors import UnwindFailure
from harness.registers import DWARF_D0, PC, SP
from harness.unwind.frame import Frame, StackReader
from harness.unwind.walk import ALL_CALLEE_SAVED, Restores, Unwinder, walk, without_scratch
from harness.verify.failures import Outcome, difference
from harness.verify.groundtruth import ShadowFrame


def compare(caller: Frame, expected: ShadowFrame,
            restores: Restores = ALL_CALLEE_SAVED) -> tuple[str, str | None, str] | None:
    """(kind, register, detail) for the first difference, or None. Registers
    are compared where the unwinder claims to restore them."""
    if caller.pc != expected.pc:
        return difference(PC, caller.pc, expected.pc)
    if caller.sp != expected.sp:
        return difference(SP, caller.sp, expected.sp)
    if not expected.resumes:
        return None  # its registers are never read again (harness.verify.groundtruth)
    got = caller.r[4:12]
    if got != expected.callee_saved:
        for reg in restores.core:
            value, want = got[reg - 4], expected.callee_saved[reg - 4]
            if value != want:
                return difference(reg, value, want)
    if expected.vfp is not None and restores.vfp:
        got = caller.d[8:16]
        if got != expected.vfp:  # unknown (None) values are not compared
            for index, (value, want) in enumerate(zip(got, expected.vfp)):
                if value is not None and value != want:
                    return difference(DWARF_D0 + 8 + index, value, want)
    return None




# A walk that matched every expected frame and then, past the outermost one
# (a thread's first frame, which has no caller), made up a caller.
INVENTED = "invented"


def invents(step: Frame | UnwindFailure) -> bool:
    """Does the step past a thread's first frame give a caller? A failure
    ends the walk honestly, and so does a caller at pc 0: the end every
    walker stops at (glibc's _start clears lr so). C twin: rules.c's
    step_past_bottom."""
    return isinstance(step, Frame) and step.pc != 0


def first_difference(unwinder: Unwinder, frame: Frame, stack: StackReader, expected: Sequence[ShadowFrame],
                     first: int = 0, past_bottom: bool = False) -> Outcome | str | None:
    """None if the walk from `frame` matches every expected frame, else
    where and how it first went wrong; `first` numbers the first expected
    frame (frames after the innermost are no longer innermost). With
    `past_bottom` (the outermost expected frame has no caller), a walk that
    matched takes one more step, and is INVENTED where that `invents`."""
    restores = unwinder.restores
    for index, got in enumerate(walk(unwinder, frame, stack, len(expected) + past_bottom, first == 0), first):
        if index - first == len(expected):
            return INVENTED if invents(got) else None
        if isinstance(got, UnwindFailure):
            return index, got.kind, None, got.reason
        mismatch = compare(got, expected[index - first], restores)
        if mismatch is not None:
            return (index, *mismatch)
    return None


class _Naming(Unwinder):
    """A chain that keeps the name of the method behind its last step."""

    def __init__(self, chain):
        self.chain, self.name, self.last = chain, chain.name, None

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        caller, self.last = self.chain.step_by(frame, stack, innermost)
        return caller


def chain_frames(chain, frame: Frame, stack: StackReader, expected: Sequence[ShadowFrame]) -> Counter:
    """LUL's count of one walk of a chain (harness.unwind.scan.ChainUnwinder):
    (method, right) -> the frames each method gave, up to the first wrong
    one; right as the verifier judges the chain's frames. rules.c's
    verifier_walk counts the same for the walks it answers."""
    named, counted, restores = _Naming(chain), Counter(), chain.restores
    for got, want in zip(walk(named, frame, stack, len(expected)), expected):
        if isinstance(got, UnwindFailure):
            break
        right = compare(got, want, restores) is None
        counted[(named.last, right)] += 1
        if not right:
            break
    return counted


@dataclass(frozen=True)
class _Proven:
    """A walk from some caller frame that matched the shadow stack all the way
    down, and the stack contents it depended on: the region from the first to
    the last line it read, as it was (one comparison instead of one per line;
    a change in the lines between, the locals of outer frames, only costs a
    re-walk, never a wrong answer)."""

    lowest: int  # lowest address it examined
    start: int
    region: bytes
    outcome: str | None  # None, or INVENTED
    def holds(self, stack) -> bool:
        """Would the walk read the same bytes, and find its addresses inside the stack?"""
        return stack.low <= self.lowest and stack.region(self.start, len(self.region)) == self.region


@dataclass(frozen=True)
class _ProvenLines:
    """The same, for a walk whose lines lie far apart (frames of a megabyte):
    kept line by line."""

    lowest: int
    lines: tuple[tuple[int, bytes], ...]
    outcome: str | None
    def holds(self, stack) -> bool:
        return stack.low <= self.lowest and all(stack.line(a) == data for a, data in self.lines)


REGION_LIMIT = 2048  # bytes: a larger region is compared line by line


def _proof(stack, lowest: int, touched: set[int], outcome: str | None) -> _Proven | _ProvenLines:
    first, last = min(touched, default=lowest), max(touched, default=lowest)
    size = last + stack.LINE - first
    if size <= REGION_LIMIT:
        return _Proven(lowest, first, stack.region(first, size), outcome)
    return _ProvenLines(lowest, tuple((a, stack.line(a)) for a in sorted(touched)), outcome)


class MemoizedWalk:
    """Exactly the result of first_difference, without re-walking the outer
    frames at every stop.

    The walk from frame 1 on is a pure function of that frame's registers,
    the stack bytes it reads, whether its addresses are inside the stack, and
    the shadow frames it is compared with. So a walk that matched is reused
    when the same caller frame is reached under the same shadow frame, the
    stack bytes it read are unchanged, and the stack's low bound still
    admits every address it examined. Walks that fail are never reused.
    (Not "unwritten since": unicorn 2.1.4 mis-steps IT blocks whose stores
    trigger a memory-write hook, so the harness installs none.)
    """

    def __init__(self, unwinder: Unwinder, past_bottom: bool = False):
        self.unwinder = unwinder
        self.restores = unwinder.restores
        self.past_bottom = past_bottom
        self.proven: dict[tuple[int, Frame], _Proven | _ProvenLines] = {}

    def __call__(self, frame: Frame, stack, expected: Sequence[ShadowFrame]):
        if not expected:  # the stop is in the outermost frame
            return first_difference(self.unwinder, frame, stack, expected, past_bottom=self.past_bottom)
        caller = next(walk(self.unwinder, frame, stack, 1))
        if isinstance(caller, UnwindFailure):
            return 0, caller.kind, None, caller.reason
        mismatch = compare(caller, expected[0], self.restores)
        if mismatch is not None:
            return (0, *mismatch)
        if len(expected) == 1 and not self.past_bottom:
            return None
        caller = without_scratch(caller)
        key = (expected[0].serial, caller)
        proof = self.proven.get(key)
        if proof is not None and proof.holds(stack):
            return proof.outcome
        stack.start_recording()
        try:
            outcome = first_difference(self.unwinder, caller, stack, expected[1:], 1, self.past_bottom)
        finally:
            lowest, touched = stack.stop_recording()
        if outcome is None or outcome == INVENTED:
            self.proven[key] = _proof(stack, lowest, touched, outcome)
        return outcome
