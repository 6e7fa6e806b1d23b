"""The compiled verification kernel (harness/verify/csrc), seen from Python.

The Tracer is the per-instruction hook of a verified run: it follows the
shadow stack (as harness.verify.groundtruth defines it), ends a runaway run
at one of its limits (harness.abi.Limits, as the Python hook does:
`run` reports the guard and the pc) and, at every stop,
lets the Verifier walk every unwinder by its rules (harness.unwind.rule)
over the emulator's stack memory and compare each caller frame with the
shadow stack. The Verifier counts the walks that match every frame (per
stop class, read back with `passes`) and answers for the others with a
record of harness.abi (a failing rule, a mismatch, a guard failure,
a caller check_caller rejects)
or DEFER: the verifier then runs the unwinder's own Python step for that
stop, so the kernel only ever repeats what `step` would say, faster.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections import Counter
from itertools import chain
from typing import Callable, Sequence

from harness import abi
from harness.registers import CALLEE_SAVED, SP
from harness.unwind.rule import (
    EVERYWHERE,
    NOWHERE,
    Chain,
    Fails,
    Offsets,
    PcWording,
    ReturnAddresses,
    Rule,
    Scan,
    guards_hold,
)
from harness.unwind.rule_map import itself
from harness.unwind.walk import Unwinder, caller_failure
from harness.verify import rule_book
from harness.verify.failures import LogEntry, Outcome

try:
    from harness.verify._kernel import Tracer, Verifier, may_start_epilogue
except ImportError:  # not built: the verifier runs in Python alone
    Tracer = Verifier = may_start_epilogue = None

AVAILABLE = Verifier is not None
DEFER = False  # the kernel's answer where the unwinder's own step must run
DECLINES = -2  # provide_plan's rule id where no epilogue is simulated (csrc/sources.c)


_HEADER, _LOAD = abi.RULE_HEADER.struct, abi.LOAD.struct



def pack_rule(rule: Rule, site_table: Callable[[ReturnAddresses], int] | None = None) -> bytes | None:
    """A rule as rules.c reads it: abi.RULE_HEADER, then its loads (a
    chain: its alternatives; a scan: the number `site_table` gives its
    return addresses, a table the Verifier holds once); None for a rule the
    kernel cannot apply (offsets beyond its 32-bit fields, as a hostile
    table's vsp adjustment of 2**40; a scan with no `site_table`; a chain
    too long, or of chains): there `step` runs instead."""
    kind = type(rule)
    if kind is Offsets:
        return pack_plain(rule)
    if kind is Fails:  # the header of a plain rule that fails: how it is worded is Python's (StopKernel.outcome)
        return _HEADER.pack(abi.PC_FROM_LR | abi.FAILS | (abi.NO_INFO if rule.kind == "no_info" else 0), SP, -1,
                            0, 0, 0, 0, 0, 0, 0, 0, 0)
    if kind is Chain:
        if len(rule.alternatives) > abi.CHAIN_METHODS:
            return None
        packed = [None if alternative is None or type(alternative) is Chain else pack_rule(alternative, site_table)
                  for alternative in rule.alternatives]
        header = _HEADER.pack(abi.CHAIN, SP, -1, 0, 0, 0, len(packed), 0, 0, 0, 0, 0)
        return header + b"".join(struct.pack("<i", len(p or b"")) + (p or b"") for p in packed)
    if site_table is None or rule.sites is None:  # a Scan
        return None
    flags = abi.SCAN | (abi.GUARD_FAILS if rule.guard_failure is not None else 0) \
        | (abi.GUARD_KIND_FIXED if rule.guard_kind is not None else 0) \
        | (abi.NO_INFO if rule.guard_kind == "no_info" else 0)
    return _HEADER.pack(flags, SP, site_table(rule.sites), 0, 0, rule.window, 0, 0, 0, 0, 0, 0)


# A rule packs as int32 fields: the header's, then its loads' (reg, offset) pairs.
assert _HEADER.format == "<" + "1i" * len(abi.RULE_HEADER.fields) and _LOAD.format == "<1i1i"
assert array("i").itemsize == 4 and sys.byteorder == "little"  # the loads, packed as the header is
# The order the kernel reads a rule's fields in (Tracer.causes: a failure's kind, a guard's fixed kind).
assert (Offsets._fields, Scan._fields, Fails._fields) == (abi.OFFSETS_FIELDS, abi.SCAN_FIELDS, abi.FAILS_FIELDS)
assert len({len(kind._fields) for kind in (Offsets, Scan, Chain, Fails)}) == 4  # the kernel tells them by their size


def pack_plain(rule: Offsets) -> bytes | None:
    """An Offsets rule packed (made again at each call: packing a rule
    costs less than hashing it for a cache)."""
    guard_kind = rule.guard_kind
    flags = ((abi.BOUNDS if rule.bounds is not None else 0) | (abi.PC_FROM_LR if rule.pc_from_lr else 0)
             | (abi.ALIGNED if rule.aligned else 0) | (abi.ABOVE_SP if rule.above_sp else 0)
             | (abi.LEAF_UNLESS_RECORD if rule.leaf_unless_record else 0)
             | (abi.OUTSIDE_IT if rule.outside_it else 0)
             | (abi.GUARD_FAILS if rule.guard_failure is not None else 0)
             | (abi.NO_INFO if guard_kind == "no_info" else 0)
             | (abi.CALLER_ALIGNED8 if rule.caller_aligned8 else 0)
             | (abi.GUARD_KIND_FIXED if guard_kind is not None else 0))
    lowest, highest = rule.bounds or (0, 0)
    pre_lowest, pre_highest = rule.pre_bounds or (0, 0)
    fields = array("i")  # int32s: the header's (abi.RULE_HEADER), then the loads' (reg, offset) pairs
    try:  # a field beyond int32: the kernel cannot apply the rule
        fields.extend((flags, rule.base, -1 if rule.index is None else rule.index, rule.offset, rule.end, lowest,
                       highest, len(rule.loads), len(rule.vfp_loads), len(rule.pre_loads), pre_lowest, pre_highest))
        fields.extend(chain.from_iterable((*rule.pre_loads, *rule.loads, *rule.vfp_loads)))
    except OverflowError:
        return None
    return fields.tobytes()


def _set_sources(verifier, index: int, unwinder: Unwinder, unwinders: Sequence[Unwinder], book: rule_book.RuleBook,
                 numbered: dict[int, tuple], own: list[int]) -> None:
    """Tell the kernel where `unwinder`'s rules come from (csrc/sources.c):
    its table's partition and its rows' numbers in `book` (and where an
    epilogue may start ahead, its code), or its chain's methods' (a method
    that is one of `unwinders` before it, with that unwinder's rules); by
    default, Python's rule_at."""
    maps, methods, simulator = unwinder.rule_maps, unwinder.methods, unwinder.simulator
    if maps is not None:
        # an epilogue simulator's innermost frame: its tables' partition where its code shows none may start
        for innermost in (0, 1) if simulator is None or simulator.segments else (0,):
            verifier.set_map(index, innermost, *_partition_of(maps[innermost]),
                             book.numbers_of(maps[innermost], numbered, own), book.packed)
        if simulator is not None and simulator.segments:
            verifier.set_epilogue(index, tuple(simulator.segments), book.plans, simulator.functions)
    elif unwinder.step_by is not None and all(m.rule_maps is not None for m in methods) \
            and 0 < len(methods) <= abi.CHAIN_METHODS:
        walked = {id(u): number for number, u in enumerate(unwinders[:index])
                  if u.rule_maps is not None and u.simulator is None}
        for innermost in (0, 1):
            verifier.set_chain(index, innermost, tuple(
                (*_partition_of(m.rule_maps[innermost]), walked.get(id(m), -1),
                 book.numbers_of(m.rule_maps[innermost], numbered, own)) for m in methods), book.packed)


def _partition_of(rule_map) -> tuple:
    return rule_map.partition.starts, rule_map.partition.rows, rule_map.shift


def _compared(unwinder: Unwinder) -> tuple[int, bool, bool]:
    """What the kernel compares of `unwinder`'s callers (the r4-r11 and
    d8-d15 it restores), and whether it looks ahead (Unwinder.looks_ahead)."""
    restores = unwinder.restores
    assert set(restores.core) <= set(CALLEE_SAVED)
    return sum(1 << reg for reg in restores.core), restores.vfp, unwinder.looks_ahead


class StopKernel:
    """Rules per (unwinder, innermost, range of pcs), made on first use and
    kept. An unwinder with `rule_maps` (harness.unwind.rule_map) has its
    pcs looked up in C, its rows' rules numbered in the process's book
    (harness.verify.rule_book), where Python makes each once; a chain's
    rule is its methods'; any other unwinder's are made once per range."""

    keeps_outer_walks = True
    """In a run that stops at every instruction, a walk takes its frames
    after the innermost one's from the last stop's walk wherever nothing
    they read changed (csrc/memo.c); off, every walk steps every frame."""

    def __init__(self, unwinders: Sequence[Unwinder], memory, base: int, high: int):
        self.unwinders = list(unwinders)
        self.book = rule_book.current()
        self._own: list[int] = []  # numbers of the rules the book holds for this kernel alone
        self._own_rules: dict[int, Rule] = {}  # and those rules, once the book has let them go (`release`)
        self._rule_at = [u.rule_at for u in self.unwinders]
        self.verifier = Verifier(memory, base, high, [_compared(u) for u in self.unwinders], self._provide,
                                 self._provide_book, self._provide_plan)
        numbered: dict[int, tuple] = {}  # rows' numbers by their values (which both maps of a table share)
        for index, unwinder in enumerate(self.unwinders):
            _set_sources(self.verifier, index, unwinder, self.unwinders, self.book, numbered, self._own)
        """What the Tracer walks with at every stop."""
        self.verifier.memo = self.keeps_outer_walks
        self.passes = self.verifier.passes
        """passes() -> [(stop class, unwinder index, walks that matched)]"""
        self._site_tables: dict[ReturnAddresses, int] = {}

    def rule(self, rule_id: int) -> Rule:
        """The rule the kernel reports a failing rule by."""
        own = self._own_rules.get(rule_id)
        return self.book.rules[rule_id] if own is None else own

    def release(self) -> None:
        """After the run: the Verifier drops its providers (these bound methods:
        a reference cycle), and the book its rules for this kernel alone, which
        the kernel keeps for the wording of its failures."""
        self.verifier.release()
        self._own_rules.update((number, self.book.rules[number]) for number in self._own)
        self.book.forget(self._own)
        self._own.clear()

    def chain_frames(self) -> Counter:
        """(chain, method, right) -> frames, as harness.verify.walks.chain_frames
        counts them, over the walks the kernel answered itself."""
        counted: Counter = Counter()
        for index, method, frames, right in self.verifier.methods():
            chain = self.unwinders[index]
            name = chain.methods_named[method]
            counted.update({(chain.name, name, True): right, (chain.name, name, False): frames - right})
        return +counted  # without the zeros

    def _site_table(self, sites: ReturnAddresses) -> int:
        number = self._site_tables.get(sites)
        if number is None:
            number = self._site_tables[sites] = self.verifier.add_sites(sites.packed)
        return number

    def check(self, regs, pc: int, cpsr: int, vfp, low: int, shadow: bytes,
              stop_class: int) -> list[tuple[int, abi.Answer | bool]]:
        """(unwinder index, answer record or DEFER) for the walks at one stop
        (walked from Python) that did not match; `shadow` holds the packed
        shadow frames, outermost first."""
        found = self.verifier.check(regs, pc, cpsr, vfp, low, shadow, stop_class)
        return [(index, DEFER if answer is DEFER else abi.answer(answer)) for index, answer in found]

    def _provide(self, index: int, pc: int, innermost: int) -> tuple[int, bytes | None, int, int]:
        rule_at = self._rule_at[index]
        if rule_at is None:
            return -1, None, NOWHERE, EVERYWHERE  # no rules: always its own step
        rule, low, high = rule_at(pc, innermost == 1)
        return (*self._numbered(rule), low, high)

    def _provide_book(self, number: int) -> tuple[int, bytes | None]:
        """Rule `number` of the book, packed (made now where it was not)."""
        return self.book.make(number, self._packed)

    def _provide_plan(self, index: int, pc: int) -> tuple[int, bytes | None]:
        """The rule of the epilogue ahead of an innermost frame at pc, packed,
        with its id; DECLINES where there is none (the tables' rule holds)."""
        goes, rule = self.unwinders[index].plan_rule(pc)
        return self._numbered(rule) if goes else (DECLINES, None)

    def _packed(self, rule: Rule) -> bytes | None:
        return pack_rule(rule, self._site_table)

    def _numbered(self, rule: Rule | None) -> tuple[int, bytes | None]:
        """A range's rule (or a plan's), named by itself in the book, packed."""
        return self.book.make(self.book.number_of((itself, rule), self._own), self._packed)

    def worded(self, entries: list) -> list:
        """Failure log entries (harness.verify.failures.FailureLog) with the
        values a failure rule's answer is logged with ("fails", rule id,
        frame pc), a merged guard failure's ("guard", rule id, base, sp,
        low, high) or a rejected caller's ("caller", caller sp, callee sp) turned
        into its wording, as `step` words it."""
        out = []
        for entry in map(LogEntry._make, entries):
            match entry.detail:
                case ("fails", rule_id, pc):
                    answer = abi.FailingRule(entry.cause.frame, abi.FAILS_ANSWER, rule_id, pc)
                    entry = entry._replace(detail=self.outcome(answer).detail)
                case ("guard", rule_id, base, sp, low, high):
                    answer = abi.GuardFailure(entry.cause.frame, abi.GUARD_FAILS_ANSWER, rule_id, base, sp, low, high,
                                              entry.pc)
                    entry = entry._replace(detail=self.outcome(answer).detail)
                case ("caller", caller_sp, callee_sp):
                    _, reason = caller_failure(caller_sp, callee_sp)
                    entry = entry._replace(detail=reason)
            out.append(entry)
        return out

    def kind_of(self, answer: abi.Answer) -> str:
        """The kind `outcome` gives `answer`, without wording it: a guard
        failure the tracer merged (one cause per function) is of its rule's
        fixed kind, or bad_read where Chrome's caller sp is misaligned."""
        if isinstance(answer, abi.GuardFailure):
            return self.rule(answer.rule_id).guard_kind or "bad_read"
        if isinstance(answer, abi.FailingRule):
            return self.rule(answer.rule_id).kind
        return self.outcome(answer).kind

    def outcome(self, answer: abi.Answer) -> Outcome:
        """The Outcome (no register) of a failing rule, of a rule
        whose guards failed with a `guard_failure`, of one whose caller's
        sp is not 8-byte aligned (`caller_aligned8`), or of a caller that
        check_caller rejects, as `step` words it."""
        if isinstance(answer, abi.CallerFails):
            kind, reason = caller_failure(answer.caller_sp, answer.callee_sp)
            return Outcome(answer.frame, kind, None, reason)
        if isinstance(answer, abi.ChainFails):  # a stop in a library: counted, never logged
            return Outcome(answer.frame, "no_info", None, "every method fails, the last with no_info")
        rule = self.rule(answer.rule_id)
        if isinstance(answer, abi.GuardFailure) and type(rule) is Offsets and rule.caller_aligned8 and guards_hold(
                rule, answer.base, answer.sp, answer.low, answer.high):
            kind, reason = "bad_read", f"caller sp {answer.base + rule.end:#x} is not 8-byte aligned"
        elif isinstance(answer, abi.GuardFailure):
            kind, reason = rule.guard_failure(answer.base, answer.sp, answer.low, answer.high)
        else:
            kind, reason = rule.kind, rule.reason
            if isinstance(reason, PcWording):  # a rule over a range: worded for this frame's pc
                reason = reason.at(answer.pc)
        return Outcome(answer.frame, kind, None, reason)
