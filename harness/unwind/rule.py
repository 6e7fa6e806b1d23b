"""One unwinder step at one pc, written down as data (`Rule`), and what it
means (`apply`): the compiled verification kernel applies rules over the
emulator's memory (harness/verify/csrc/rules.c; harness.verify.kernel
packs them by harness/abi.py).

An unwinder's `rule_at(pc, innermost)` gives a RuleRange: the rule for a
frame at pc, and the pcs around it that share it (a table's unwinder finds
it by its table's rows: harness.unwind.rule_map). `None` means "always
defer" (an EHABI run only the interpreter can follow, an epilogue that
moves r7, or sets sp from a register after its first instruction).

`apply(rule, frame, stack, innermost)` is the reference interpreter of a
rule: it gives the caller frame, or raises UnwindFailure as a step would,
or raises `Defers` where the rule cannot say (the kernel's DEFER: the
unwinder's own step runs there). The kernel is held to it on random
rules, frames and stacks of every kind, and it to each unwinder's step
wherever the unwinder's rule does not defer (tests/test_rule_apply.py).
An unwinder whose rules state it steps by them (`step_by_rule`:
framepointer, v1, scan, vmkunwind, dwarf, and qut where it has a rule);
the others keep their own step, and say why.

A rule is of one of four kinds (`kind_of`), each computing the formula
below. Notation: r and d are the frame's core and d registers, sp = r[sp]
the frame's; c is the caller (every register not named is the frame's);
*a is the 32-bit word at a, *64 a the 64-bit one; S the stack [low, high]
(a read of n bytes at a needs low <= a and a + n <= high, else the rule
defers); check_caller is harness.unwind.walk.check_caller.

CHAIN (`alternatives`):
    c = apply(alternatives[0]), else apply(alternatives[1]), ... : the next
    is tried where one fails (UnwindFailure); one that defers (None, say)
    defers the chain; where every one fails, ChainFailure: the last one's
    kind, every one's reason. (The kernel defers there, and the step words
    it with its methods' names; in a library the tracer takes a failure
    whose last alternative is declared no_info as a stop.)

SCAN (`scan_window` bytes, `scan_sites`):
    a = the first of sp, sp + 4, ... < sp + scan_window with *a in scan_sites
    c.pc = *a & ~1, c.sp = a + 4, then check_caller
    (the scan ends at the first word outside S; where no word is one of
    the sites, it fails with guard_failure(sp, sp, low, high), or defers
    without one).

FAILURE (`failure` = (kind, reason)):
    raise UnwindFailure(kind, reason), a PcWording reason worded with r[pc].

PLAIN (offsets from one base; everything else):
    r[reg] = *(sp + o)           for (reg, o) in pre_loads, first
                                 (defers unless sp % 4 == 0 and sp + pre_bounds,
                                 default (0, 0), lie in S)
    base = r[base] + offset      (with an index: (r[base] + r[index]) mod 2**32 + offset)
    guards: base + bounds in S, base % 4 == 0 (`aligned`), base >= sp (`above_sp`);
            where one fails: guard_failure(base, sp, low, high), or defers without one
    leaf_unless_record: c = r with c.pc = r[lr] & ~1 (a leaf) unless the guards
            hold and *base is 0 or above base (a saved frame pointer); else on as below
    outside_it: defers where frame.cpsr is inside an IT block, but at its last
            instruction where its condition holds (which executes as outside one)
    c[reg] = *(base + o)         for (reg, o) in loads
    c.d[n] = *64(base + o)       for (n, o) in vfp_loads
    c.pc = (c[lr] if pc_from_lr else c[pc]) & ~1
    c.sp = base + end
    caller_aligned8: c.sp % 8 == 0, else bad_read; then check_caller.

A rule names core registers 0-15 and d registers 0-31 only, and packs in
int32 fields (harness.verify.kernel.pack_rule): elsewhere the kernel
defers. It also defers, where no unwinder makes such a rule, at a chain
inside a chain, and at a chain's `outside_it` alternative at the last
instruction of an IT block (it runs that instruction as outside its block
for the walk's own rule alone: rules.c, rule_in_it_block).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Callable, NamedTuple

from harness.errors import BadRead, UnwindFailure
from harness.registers import LR, PC, SP
from harness.thumb.encoding import condition_holds, it_state
from harness.unwind.frame import Frame, Stack, StackReader
from harness.unwind.walk import Unwinder, check_caller


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

    __slots__ = ("addresses", "packed", "members", "_hash")

    def __init__(self, addresses: Iterable[int]):
        # `members`, for apply's scan: the frozenset given (a scan unwinder's own), else one made
        self.members = addresses if isinstance(addresses, frozenset) else frozenset(addresses)
        self.addresses = tuple(sorted(self.members))
        self.packed = struct.pack(f"<{len(self.addresses)}I", *self.addresses)
        self._hash = hash(self.addresses)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, ReturnAddresses) and self.addresses == other.addresses)

    def __contains__(self, address: int) -> bool:
        return address in self.members


def guards_hold(rule: Rule, base: int, sp: int, low: int, high: int) -> bool:
    """Do the rule's guards pass for `base`, in a frame at sp of the stack
    [low, high] (a plain rule's guards: the module's formulas)?"""
    bounds = rule.bounds
    return ((bounds is None or (low <= base + bounds[0] <= high and low <= base + bounds[1] <= high))
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


# ------------------------------------------------------------ the meaning of a rule

KINDS = ("chain", "scan", "failure", "plain")


class Defers(Exception):
    """The rule cannot say for this frame: the unwinder's own step must.
    `failure`: what a step reading as the rule does would raise there,
    where that is known (a read outside the stack: its BadRead)."""

    def __init__(self, why: str, failure: UnwindFailure | None = None):
        super().__init__(why)
        self.failure = failure


class ChainFailure(UnwindFailure):
    """Every alternative of a chain rule failed: the last one's kind, each
    one's reason in turn (`failures`, to be worded with their methods' names)."""

    def __init__(self, failures: Sequence[UnwindFailure]):
        super().__init__(failures[-1].kind, "; ".join(failure.reason for failure in failures))
        self.failures = tuple(failures)


def kind_of(rule: Rule) -> str:
    """Which of KINDS the rule is (a field of a later kind is not read)."""
    if rule.alternatives:
        return "chain"
    if rule.scan_window:
        return "scan"
    return "plain" if rule.failure is None else "failure"


def apply(rule: Rule | None, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
    """The caller of `frame` by `rule` (None: always defers), as the
    module's formulas say; raises UnwindFailure, or Defers."""
    if rule is None:
        raise Defers("no rule: only the unwinder's step can say here")
    if rule.alternatives:  # kind_of's order, inline: a step of every unwinder that steps by rule runs this
        return _chain(rule.alternatives, frame, stack, innermost)
    if rule.scan_window:
        return _scan(rule, frame, stack, innermost)
    if rule.failure is not None:
        failure_kind, reason = rule.failure
        raise UnwindFailure(failure_kind, reason.at(frame.pc) if isinstance(reason, PcWording) else reason)
    return _plain(rule, frame, stack, innermost)


def step_by_rule(unwinder: Unwinder, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
    """The step of an unwinder whose rules state it: apply(unwinder.rule_at(pc)),
    a load that leaves the stack failing as a read there does (its BadRead).
    Defers (an unwinder's own step must say) where the rule defers otherwise."""
    try:
        return apply(unwinder.rule_at(frame.pc, innermost).rule, frame, stack, innermost)
    except Defers as defers:
        if defers.failure is None:
            raise
        raise _taken(defers) from None


def _taken(defers: Defers) -> UnwindFailure:
    """The failure a Defers holds, taken from it: raised while it is handled,
    the failure's context is the Defers, and no reference cycle may wait
    for the collector (harness.collector)."""
    failure, defers.failure = defers.failure, None
    return failure


def _chain(alternatives: Sequence[Rule | None], frame: Frame, stack: StackReader, innermost: bool) -> Frame:
    failures = []
    for alternative in alternatives:
        try:
            return apply(alternative, frame, stack, innermost)
        except UnwindFailure as failure:  # Defers is none: it defers the chain
            failures.append(failure)
    raise ChainFailure(failures)


def _scan(rule: Rule, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
    sp, sites = frame.sp, rule.scan_sites
    if sites is None:
        raise Defers("a scan without its return addresses")
    members = sites.members  # a set: its test runs in C
    for slot in range(sp, sp + rule.scan_window, 4):
        if not (stack.contains(slot) and stack.contains(slot + 4)):
            break
        word = stack.read_u32(slot)
        if word in members:
            regs = list(frame.r)
            regs[PC], regs[SP] = word & ~1, slot + 4
            return _checked(frame, Frame(r=tuple(regs), d=frame.d), innermost)
    return _guard_failed(rule, sp, frame, stack)


def _plain(rule: Rule, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
    sp = frame.sp
    regs = list(frame.r)
    if rule.pre_loads:
        lowest, highest = rule.pre_bounds or (0, 0)
        if sp % 4 or not (stack.contains(sp + lowest) and stack.contains(sp + highest)):
            raise Defers(f"sp {sp:#x} is misaligned, or its loads' bounds leave the stack")
        for reg, offset in rule.pre_loads:
            regs[reg] = _read(stack, sp + offset, 4)
    base = regs[rule.base] if rule.index is None else (regs[rule.base] + regs[rule.index]) & 0xFFFF_FFFF
    base += rule.offset
    guarded = guards_hold(rule, base, sp, stack.low, stack.high)
    if rule.leaf_unless_record:
        if not (guarded and _is_record(stack, base)):
            regs[PC] = regs[LR] & ~1
            return _checked(frame, Frame(r=tuple(regs), d=frame.d), innermost)
    elif not guarded:
        return _guard_failed(rule, base, frame, stack)
    if rule.outside_it and not _outside_it_block(frame.cpsr):
        raise Defers("inside an IT block, where the rule's instructions may not run")
    dregs = frame.d
    try:  # one try for every load (where one leaves the stack, the rule defers: _read)
        for reg, offset in rule.loads:
            regs[reg] = stack.read_u32(base + offset)
        if rule.vfp_loads:
            dregs = list(dregs)
            for number, offset in rule.vfp_loads:
                dregs[number] = stack.read_u64(base + offset)
            dregs = tuple(dregs)
    except BadRead as outside:
        raise Defers(f"a load at {outside.address:#x} leaves the stack", outside) from None
    regs[PC] = (regs[LR] if rule.pc_from_lr else regs[PC]) & ~1
    regs[SP] = base + rule.end
    if rule.caller_aligned8 and regs[SP] % 8:
        raise UnwindFailure("bad_read", f"caller sp {regs[SP]:#x} is not 8-byte aligned")
    return _checked(frame, Frame(r=tuple(regs), d=dregs), innermost)


def _read(stack: StackReader, address: int, size: int) -> int:
    try:
        return stack.read_u32(address) if size == 4 else stack.read_u64(address)
    except BadRead as outside:
        raise Defers(f"a load at {address:#x} leaves the stack", outside) from None


def _is_record(stack: StackReader, base: int) -> bool:
    """Is the word at base a saved frame pointer (0, the chain's end, or a
    higher address), not code?"""
    try:
        saved = stack.read_u32(base)
    except BadRead:
        return False
    return saved == 0 or saved > base


def _outside_it_block(cpsr: int) -> bool:
    """Does the instruction at pc run as outside an IT block: none, or the
    block's last instruction, where its condition holds?"""
    state = it_state(cpsr)
    return not state or (state & 0x7 == 0 and condition_holds(state >> 4, cpsr))


def _guard_failed(rule: Rule, base: int, frame: Frame, stack: StackReader) -> Frame:
    if rule.guard_failure is None:
        raise Defers(f"the rule's guards fail at base {base:#x}")
    raise UnwindFailure(*rule.guard_failure(base, frame.sp, stack.low, stack.high))


def _checked(callee: Frame, caller: Frame, innermost: bool) -> Frame:
    check_caller(callee, caller, innermost)
    return caller
