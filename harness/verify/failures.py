"""Failures of a verified run: one record per failing stop, the causes
alike failures share, the run's log and tally of them, and the wording of a
mismatch."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from harness.classify import MODULES, OWN, Where
from harness.registers import PC, SP, reg_name

Outcome = tuple[int, str, "str | None", str]  # a failing walk: (frame index, kind, register name or None, detail)


class Failure(NamedTuple):
    """One failing stop of one unwinder (a tuple: a run makes many)."""

    unwinder: str
    stop: int  # the stop's sequence number in the program's run (verified or not)
    pc: int
    function: str  # innermost function at the stop
    position: str
    kind: str
    frame: int  # the frame whose unwind went wrong (0: the innermost)
    culprit: str  # the function that frame is in
    register: str | None  # for wrong_register
    detail: str
    culprit_traits: frozenset[str] = frozenset()


class FailureCause(NamedTuple):
    """What a failing walk says apart from the stop it failed at: one is
    shared by every stop where an unwinder fails alike."""

    unwinder: str
    kind: str
    frame: int
    culprit: str
    register: str | None
    detail: str
    culprit_traits: frozenset[str]


class FailureLog:
    """A run's failures in stop order, each (stop, pc, where, cause, values):
    where and cause shared between stops, values (got, expected) of a
    mismatch, worded only when needed (the cause's detail is then empty).
    Built on demand: a run may fail at every stop for several unwinders,
    while its report reads only the tally and the first few of each.

    A run logs at most abi.FAILURE_LOG_CAP failing answers one by one: past
    that, `truncated` is set and the log holds only the first (the run's
    tally, and so its counts, stay exact). Walks that stopped honestly in
    a library (`is_stop`) are tallied, never logged: they are not failures,
    and a process meets millions of them."""

    def __init__(self, build: Callable[[int], list] | None = None, entries: list | None = None,
                 truncated: bool = False):
        self._build = build  # build(at most this many per unwinder, 0: all) -> entries
        self._entries = entries
        self.truncated = truncated
        """Whether failing answers past the cap were tallied but left out."""

    def entries(self) -> list:
        if self._entries is None:
            self._entries = self._build(0) if self._build else []
        return self._entries

    def __iter__(self):
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self.entries())

    def first(self, count: int) -> list:
        """The first `count` failures of each unwinder, in stop order."""
        if self._entries is None and self._build is not None:
            return self._build(count)
        seen: Counter = Counter()
        kept = []
        for entry in self.entries():
            seen[entry[3].unwinder] += 1
            if seen[entry[3].unwinder] <= count:
                kept.append(entry)
        return kept


@dataclass
class ProgramResult:
    program: str
    stops: int = 0
    # (unwinder, traits, position, failure kind or None for a pass) -> stops
    counts: Counter = field(default_factory=Counter)
    failure_log: FailureLog = field(default_factory=FailureLog)
    # (where, cause) -> failing stops: what counts and summaries need.
    failure_tally: Counter = field(default_factory=Counter)
    result: int | None = None
    expected: int | None = None
    fault: str | None = None
    # a Linux process (harness.linux): what it wrote to stdout, and what it must have
    stdout_sha256: str | None = None
    expected_stdout_sha256: str | None = None

    @property
    def failures(self) -> list[Failure]:
        return [failure_of(*entry) for entry in self.failure_log]

    @property
    def self_check_ok(self) -> bool:
        return (self.fault is None and (self.expected is None or self.result == self.expected)
                and (self.expected_stdout_sha256 is None or self.stdout_sha256 == self.expected_stdout_sha256))


def failure_of(stop: int, pc: int, where: Where, cause: FailureCause, values: tuple[int, int] | None) -> Failure:
    """The full record of one entry of a failure log."""
    detail = cause.detail if values is None else worded(cause.kind, cause.register, *values)
    return Failure(cause.unwinder, stop, pc, where[0], where[2], cause.kind, cause.frame, cause.culprit,
                   cause.register, detail, cause.culprit_traits)


MISMATCH_KINDS = ("wrong_pc", "wrong_sp", "wrong_register")  # beside the UnwindFailure kinds (errors.FAILURE_KINDS)
# A walk that refused (no_info) at a frame in a module other than the
# program's own, every frame before it right: an honest stop, counted
# apart from failures under the module's label (harness.classify.MODULES).
STOPPED_PREFIX = "stopped:"
STOPPED_KINDS = tuple(STOPPED_PREFIX + module for module in MODULES if module != OWN)


def is_stop(cause: FailureCause) -> bool:
    """Did the walk stop honestly in a library, rather than fail?"""
    return counted_kind(cause).startswith(STOPPED_PREFIX)


def quiet_ranges(program) -> tuple[tuple[int, int], ...]:
    """The pcs of a Program's modules that are not its own (sorted, disjoint):
    where the compiled tracer tallies a no_info refusal without logging it,
    as `is_stop` would judge it."""
    return tuple((span.start, min(span.end, 0xFFFFFFFF)) for span in program.modules
                 if span.label != OWN and span.start < span.end)


def logged_failures(tally: Counter) -> int:
    """How many failing walks of a tally a run logs, its cap aside."""
    return sum(stops for (_, cause), stops in tally.items() if not is_stop(cause))


def counted_kind(cause: FailureCause) -> str:
    """The kind a failing walk is counted under: a no_info refusal in a
    module that is not the program's own is a stop there, not a failure."""
    if cause.kind == "no_info":
        module = next((trait for trait in cause.culprit_traits if trait in MODULES), OWN)
        if module != OWN:
            return STOPPED_PREFIX + module
    return cause.kind
COMPARED_REGISTERS = tuple(f"r{n}" for n in range(4, 12)) + tuple(f"d{n}" for n in range(8, 16))


def mismatch_of(register: int) -> tuple[str, str | None]:
    """(kind, register name) of a wrong `register`: PC, SP, 4-11, or
    DWARF_D0 + 8-15 for d8-d15."""
    if register == PC:
        return "wrong_pc", None
    if register == SP:
        return "wrong_sp", None
    return "wrong_register", reg_name(register)


def worded(kind: str, name: str | None, got: int, want: int) -> str:
    """The detail of a mismatch (kind and register name from `mismatch_of`)."""
    label = "pc" if kind == "wrong_pc" else "sp" if kind == "wrong_sp" else name
    return f"{label} {got:#x}, expected {want:#x}"


def difference(register: int, got: int, want: int) -> tuple[str, str | None, str]:
    """(kind, register name, detail) for a caller frame whose `register`
    holds `got` instead of `want`."""
    kind, name = mismatch_of(register)
    return kind, name, worded(kind, name, got, want)
