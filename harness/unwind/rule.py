"""One unwinder step at one pc, written down as data, for the compiled
verification kernel (harness/verify/csrc/rules.c; harness.verify.kernel
packs rules by harness/abi.py).

Each unwinder's `step` stays the definition. Its `rule_at(pc, innermost)`
gives a RuleRange: the rule for a frame at pc, and the pcs around it that
share it (a table's unwinder finds it by its table's rows:
harness.unwind.rule_map). A rule describes the step as fixed offsets from one base
register: what the step does for every register and stack state, *except*
where the rule's guards fail, and there the kernel defers to `step`.
`None` means "always defer" (an EHABI run only the interpreter can follow,
an epilogue that moves r7, or sets sp from a register after its first
instruction). tests/test_kernel.py holds the kernel to `step` on random
frames and stacks for the rules of real programs.

The kernel applies a rule as follows (`base` is r[base] + offset, or with
an `index` register, (r[base] + r[index]) mod 2**32 + offset):
0. `pre_loads` read the stack at the frame's sp + offset first (the kernel
   defers unless sp is 4-byte aligned and `pre_bounds` lie in the stack),
   and `base` is taken after them;
1. a failure rule fails the step with its (kind, reason);
2. guards: `bounds` (both base + lowest and base + highest inside the
   stack), `aligned` (base % 4 == 0), `above_sp` (base >= sp). If one fails,
   a `leaf_unless_record` rule takes the leaf step (pc = lr), a rule with a
   `guard_failure` fails with it, and any other rule defers; a
   `leaf_unless_record` rule whose guards pass also takes the
   leaf step unless the word at base is 0 or above base (a saved frame
   pointer, not code); an `outside_it` rule defers inside an IT block;
3. each load reads the stack at base + offset (a read outside it defers);
4. pc = (lr if `pc_from_lr` else the loaded pc) & ~1, sp = base + end;
5. the caller must pass harness.unwind.walk.check_caller, or the step
   fails as check_caller words it (with `caller_aligned8`, it must first
   have an 8-byte aligned sp, or the step fails with bad_read, as
   Chrome's does).
A scan rule (`scan_window` bytes, `scan_sites`) is none of the above: the
first word of the window from sp up that is one of the sites is the
caller's pc, and sp lies just above it (harness.unwind.scan); where no
word is, it fails with its `guard_failure` (base: the frame's sp).
A chain rule (`alternatives`) applies each of its rules in turn, and takes
the first caller one gives: the next is tried where one fails (a failure
rule, a failed guard, a caller check_caller rejects); an alternative that
defers (None, say) defers the chain, and so does the failure of every one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Callable, NamedTuple

from harness.errors import UnwindFailure
from harness.registers import SP
from harness.unwind.frame import Stack, StackReader


class Rule(NamedTuple):  # a tuple: made a thousand times a program, compared and hashed in C
    base: int = SP
    offset: int = 0
    index: int | None = None  # a register added to base's, modulo 2**32 (sp += rN)
    loads: tuple[tuple[int, int], ...] = ()  # (core register, offset from base)
    vfp_loads: tuple[tuple[int, int], ...] = ()  # (d register number 0-31, offset from base)
    end: int = 0  # the caller's sp is base + end
    bounds: tuple[int, int] | None = None  # (lowest, highest) offsets that must lie in the stack
    pc_from_lr: bool = True
    aligned: bool = False
    above_sp: bool = False
    leaf_unless_record: bool = False
    outside_it: bool = False
    caller_aligned8: bool = False  # the caller's sp must be 8-byte aligned (Chrome's check), else the step fails
    failure: tuple[str, str | PcWording] | None = None  # (UnwindFailure kind, reason)
    # Where a guard fails, the step fails (instead of deferring) with
    # guard_failure(base, frame sp, stack low, stack high) -> (kind, reason).
    guard_failure: Callable[[int, int, int, int], tuple[str, str]] | None = None
    # The kind guard_failure gives whatever the values, where it is one: the
    # kernel then counts the rule's guard failures in a function as one
    # cause, and words each where its values are read (not per stop).
    guard_kind: str | None = None
    scan_window: int = 0  # a scan: bytes from sp up (see the module)
    scan_sites: ReturnAddresses | None = None  # a scan's return addresses
    alternatives: tuple["Rule | None", ...] = ()  # a chain's rules, in the order tried (see the module)
    pre_loads: tuple[tuple[int, int], ...] = ()  # (core register, offset from the frame's sp), read first
    pre_bounds: tuple[int, int] | None = None  # (lowest, highest) offsets from sp that must lie in the stack


class PcWording(NamedTuple):
    """The reason of a failure rule over a range of pcs, worded for each:
    `wording` with the lookup pc (the frame's pc - `shift`) in."""

    wording: str
    shift: int

    def at(self, frame_pc: int) -> str:
        return self.wording.format(pc=frame_pc - self.shift)


class ReturnAddresses:
    """A scan's return addresses, sorted, and packed as the kernel reads them.
    Tens of thousands in a process: hashed once, so that rules holding them
    hash and compare in constant time wherever one scan object is shared."""

    __slots__ = ("addresses", "packed", "_hash")

    def __init__(self, addresses: Iterable[int]):
        self.addresses = tuple(sorted(set(addresses)))
        self.packed = struct.pack(f"<{len(self.addresses)}I", *self.addresses)
        self._hash = hash(self.addresses)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, ReturnAddresses) and self.addresses == other.addresses)


def guards_hold(rule: Rule, base: int, sp: int, low: int, high: int) -> bool:
    """Do the rule's guards pass for `base`, in a frame at sp of the stack
    [low, high] (step 2 of the module's list)?"""
    inside = lambda address: low <= address <= high  # noqa: E731
    return ((rule.bounds is None or (inside(base + rule.bounds[0]) and inside(base + rule.bounds[1])))
            and (not rule.aligned or base % 4 == 0) and (not rule.above_sp or base >= sp))


def failing(kind: str, reason: str | PcWording) -> Rule:
    return Rule(failure=(kind, reason))


LEAF = Rule()  # pc = lr, every other register unchanged (a function's entry)


NOWHERE, EVERYWHERE = -(1 << 40), 1 << 40  # bounds of ranges that extend without limit


class RuleRange(NamedTuple):
    """A rule and the frame pcs [low, high) that share it (for the same
    `innermost`): every one of them makes the same lookup decisions. Frame
    pcs are halfword aligned (Thumb code; return addresses lose bit 0), and
    a range may speak for those only."""

    rule: Rule | None
    low: int
    high: int


def replayed_failure(replay: Callable[[int, int, StackReader], object], what: str) -> Callable:
    """A guard_failure found by the step's own execution, `replay(base,
    frame sp, stack)`, over the stack's addresses alone (reads inside give zeros):
    for a rule whose guards are exactly the step's checks, and whose
    addresses depend on its base alone, it fails first where the step does,
    in the step's words."""
    def failure(base: int, sp: int, low: int, high: int) -> tuple[str, str]:
        try:
            replay(base, sp, Stack(low, b"", high))
        except UnwindFailure as failed:
            return failed.kind, failed.reason
        raise AssertionError(f"the guards of {what} failed where its step does not")
    return failure
