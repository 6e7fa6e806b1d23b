"""Failures of a verified run: one record per failing stop, the causes
alike failures share, the run's log and tally of them, and the wording of a
mismatch."""

from __future__ import annotations

import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Iterator, NamedTuple

from harness.classify import OWN, Where
from harness.registers import DWARF_D0, PC, SP, reg_name
from harness.verify.tally import Grouping, KeyParts, Tally

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
    mismatch, worded only when needed (the cause's detail is then empty),
    or for a walk in Python the wording with its numbers (the cause's
    detail has them as #: harness.verify.stops).
    Built on demand: a run may fail at every stop for several unwinders,
    while its report reads only the tally and the first few of each.

    A run logs at most abi.FAILURE_LOG_CAP failing answers one by one: past
    that, `truncated` is set and the log holds only the first (the run's
    tally, and so its counts, stay exact). Walks that stopped honestly in
    a library (`is_stop`) are tallied, never logged: they are not failures,
    and a process meets millions of them."""

    def __init__(self, build: Callable[[int], list] | None = None, entries: list | None = None,
                 truncated: bool = False, pcs: Callable[[KeyParts, Grouping], "LoggedPcs"] | None = None):
        self._build = build  # build(at most this many per unwinder, 0: all) -> entries
        self._entries = entries
        self._pcs = pcs  # logged_pcs(key, groups) without building the entries
        self.truncated = truncated
        """Whether failing answers past the cap were tallied but left out."""

    def logged_pcs(self, key: KeyParts, groups: Grouping) -> "LoggedPcs":
        """The failures logged by group of `groups` (the run's tally's
        Grouping by `key`, whose `of` makes it of a where and cause), and
        the ranges of their pcs: what a digest of the log needs
        (harness.report.failing)."""
        if self._pcs is not None and self._entries is None:
            return self._pcs(key, groups)
        return logged_pcs(((key.of(where, cause), pc) for _, pc, where, cause, _ in self.entries()), groups)

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
            seen[entry.cause.unwinder] += 1
            if seen[entry.cause.unwinder] <= count:
                kept.append(entry)
        return kept


class LogEntry(NamedTuple):
    """A failing walk as the failure log keeps it."""

    stop: int
    pc: int
    where: Where
    cause: FailureCause
    detail: object  # its wording, or the values it is worded from (harness.verify.kernel.StopKernel.worded)


RANGE_GAP = 4  # pcs this many bytes apart or nearer (a Thumb-2 instruction) share a range
Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive [low, high]
LoggedPcs = list  # by group of a tally's Grouping: (failures logged, the ranges of their pcs), or None


def ranges_of(pcs: Iterable[int]) -> Ranges:
    """The ranges of `pcs`, those at most RANGE_GAP apart in one (C twin:
    trace.c: ranges_of)."""
    out = []
    low = high = -RANGE_GAP - 2  # before any pc
    for pc in sorted(pcs):
        if pc > high + RANGE_GAP:
            if high >= 0:
                out.append((low, high))
            low = pc
        high = pc
    if high >= 0:
        out.append((low, high))
    return tuple(out)


def merged(spans: Iterable[tuple[int, int]]) -> Ranges:
    """Ranges joined: the ranges of every pc they hold together."""
    out: list[list[int]] = []
    for low, high in sorted(spans):
        if out and low <= out[-1][1] + RANGE_GAP:
            out[-1][1] = max(out[-1][1], high)
        else:
            out.append([low, high])
    return tuple((low, high) for low, high in out)


def logged_pcs(failures: Iterable[tuple[Hashable | None, int]], groups: Grouping,
               grouped: LoggedPcs | None = None) -> LoggedPcs:
    """LoggedPcs of (key, pc) failures (those of key None left out; every
    other key is one of `groups`), and of those `grouped` already (that
    list itself where there are no failures)."""
    found: dict = {}
    for key, pc in failures:
        if key is not None:
            count, pcs = found.get(key) or (0, set())
            pcs.add(pc)
            found[key] = (count + 1, pcs)
    if not found and grouped is not None:
        return grouped  # the kernel's alone, as it grouped them (most runs defer no failing walk to Python)
    out = [None] * len(groups.keys) if grouped is None else list(grouped)
    number_of = {key: number for number, key in enumerate(groups.keys)}
    for key, (count, pcs) in found.items():
        number = number_of[key]
        held, ranges = out[number], ranges_of(pcs)
        out[number] = (count, ranges) if held is None else (held[0] + count, merged((*held[1], *ranges)))
    return out


NUMBERS = re.compile(r"-?0x[0-9a-f]+|-?\b\d+\b")  # addresses and amounts in a failure's wording
HEX, NEGATIVE = 1, 2  # how a number of a wording was written


def generic(wording: str) -> str:
    """`wording` with each number as #: what walks that fail alike share."""
    return NUMBERS.sub("#", wording)


def _numbers(wording: str) -> list[tuple[int, int]] | None:
    """(magnitude, HEX | NEGATIVE) of each number of `wording`, or None if
    writing them back into its generic form would not give it again."""
    found = []
    for text in NUMBERS.findall(wording):
        digits = text.lstrip("-")
        form = (HEX if digits.startswith("0x") else 0) | (NEGATIVE if text.startswith("-") else 0)
        found.append((int(digits, 16 if form & HEX else 10), form))
    if any(value >= 1 << 64 for value, _ in found) or _worded(generic(wording), found) != wording:
        return None
    return found


def _worded(template: str, numbers: list[tuple[int, int]]) -> str:
    parts = template.split("#")
    if len(parts) != len(numbers) + 1:
        return ""
    out = [parts[0]]
    for (value, form), part in zip(numbers, parts[1:]):
        out.append(("-" if form & NEGATIVE else "") + (f"{value:#x}" if form & HEX else str(value)) + part)
    return "".join(out)


class WalkLog:
    """Failing walks in Python, in stop order, a few dozen bytes each: the
    stop, the unwinder, the pc, where and cause by id, and the numbers of
    the wording (the cause's detail has them as #; harness.verify.stops):
    a run may fail at every one of a million stops."""

    def __init__(self) -> None:
        self.numbers, self.unwinders, self.pcs = array("Q"), array("H"), array("I")
        self.where_ids, self.cause_ids = array("I"), array("I")
        self.first_value = array("I")  # where each entry's numbers start in values (and forms)
        self.values, self.forms = array("Q"), array("B")
        self._wheres: dict = {}
        self._causes: dict = {}
        self.wordings: dict[int, str] = {}  # the rare wording its numbers do not give back

    def __len__(self) -> int:
        return len(self.numbers)

    def append(self, number: int, unwinder: int, pc: int, where: Where, cause: FailureCause,
               wording: str | None) -> None:
        numbers = [] if wording is None else _numbers(wording)
        if numbers is None:
            self.wordings[len(self.numbers)] = wording
            numbers = []
        self.first_value.append(len(self.values))
        for value, form in numbers:
            self.values.append(value)
            self.forms.append(form)
        self.numbers.append(number)
        self.unwinders.append(unwinder)
        self.pcs.append(pc)
        self.where_ids.append(self._wheres.setdefault(where, len(self._wheres)))
        self.cause_ids.append(self._causes.setdefault(cause, len(self._causes)))

    def _wording(self, n: int, cause: FailureCause) -> str | None:
        if n in self.wordings:
            return self.wordings[n]
        start = self.first_value[n]
        end = self.first_value[n + 1] if n + 1 < len(self.first_value) else len(self.values)
        if start == end:
            return None
        return _worded(cause.detail, list(zip(self.values[start:end], self.forms[start:end])))

    def entries(self) -> list[tuple[int, int, LogEntry]]:
        """(stop, unwinder, failure log entry) of each, built now."""
        wheres, causes = list(self._wheres), list(self._causes)
        out = []
        for n, (number, unwinder, pc, where, cause_id) in enumerate(
                zip(self.numbers, self.unwinders, self.pcs, self.where_ids, self.cause_ids)):
            cause = causes[cause_id]
            out.append((number, unwinder, LogEntry(number, pc, wheres[where], cause, self._wording(n, cause))))
        return out

    def failures(self) -> Iterator[tuple[Where, FailureCause, int]]:
        """(where, cause, pc) of each."""
        wheres, causes = list(self._wheres), list(self._causes)
        return ((wheres[where], causes[cause], pc)
                for where, cause, pc in zip(self.where_ids, self.cause_ids, self.pcs))

    def tally(self) -> Counter:
        """(where, cause) -> failing walks logged."""
        wheres, causes = list(self._wheres), list(self._causes)
        return Counter({(wheres[where], causes[cause]): n
                        for (where, cause), n in Counter(zip(self.where_ids, self.cause_ids)).items()})


@dataclass
class ProgramResult:
    program: str
    stops: int = 0
    instructions: int = 0  # run, those an IT block skips included (every stop, verified or not)
    # (unwinder, traits, position, failure kind or None for a pass) -> stops
    counts: Counter = field(default_factory=Counter)
    failure_log: FailureLog = field(default_factory=FailureLog)
    # (where, cause) -> failing stops, by ids: what counts and summaries need.
    tally: Tally = field(default_factory=Tally)
    # (chain, method, right) -> frames a chain's method gave (harness.verify.walks.chain_frames)
    methods: Counter = field(default_factory=Counter)
    # (unwinder, traits, position) -> walks that matched every frame, then made up a caller past the outermost
    # (a thread's first frame: harness.verify.walks.INVENTED)
    invented: Counter = field(default_factory=Counter)
    result: int | None = None
    expected: int | None = None
    fault: str | None = None
    # a Linux process (harness.linux): what it wrote to stdout, and what it must have
    stdout_sha256: str | None = None
    expected_stdout_sha256: str | None = None
    sampling: dict | None = None  # the stride chosen automatically (harness.linux_verify.verify.sampling_of)

    @property
    def failure_tally(self) -> Counter:
        """(where, cause) -> failing stops."""
        return self.tally.counter()

    @property
    def failures(self) -> list[Failure]:
        return [failure_of(*entry) for entry in self.failure_log]

    @property
    def self_check_ok(self) -> bool:
        return self_check_ok(self)


def self_check_ok(run) -> bool:
    """Did a run (a ProgramResult, or its summary) end as it must: no fault,
    the result expected, or where none is, not killed by a signal (a
    process's negative status), and the stdout expected?"""
    return (run.fault is None
            and (run.result == run.expected if run.expected is not None else not killed(run.result))
            and (run.expected_stdout_sha256 is None or run.stdout_sha256 == run.expected_stdout_sha256))


def killed(result: int | None) -> bool:
    """Was this a process killed by a signal (its status is minus the signal)?"""
    return result is not None and result < 0


def failure_of(stop: int, pc: int, where: Where, cause: FailureCause, values: tuple[int, int] | str | None) -> Failure:
    """The full record of one entry of a failure log."""
    return Failure(cause.unwinder, stop, pc, where.function, where.position, cause.kind, cause.frame, cause.culprit,
                   cause.register, detail_of(cause, values), cause.culprit_traits)


def detail_of(cause: FailureCause, values: tuple[int, int] | str | None) -> str:
    """The detail of a failure log entry: a walk in Python's wording (the
    cause's with the numbers in), or the cause's, worded with the values."""
    if isinstance(values, str):
        return values
    return cause.detail if values is None else worded(cause.kind, cause.register, *values)


MISMATCH_KINDS = ("wrong_pc", "wrong_sp", "wrong_register")  # beside the UnwindFailure kinds (errors.FAILURE_KINDS)


def quiet_ranges(program) -> tuple[tuple[int, int], ...]:
    """The pcs of a Program's modules that are not its own (sorted, disjoint):
    where the compiled tracer tallies a no_info refusal without logging it,
    as harness.verify.tally.is_stop would judge it."""
    return tuple((span.start, min(span.end, 0xFFFFFFFF)) for span in program.modules
                 if span.label != OWN and span.start < span.end)


COMPARED_REGISTERS = tuple(f"r{n}" for n in range(4, 12)) + tuple(f"d{n}" for n in range(8, 16))


def mismatch_of(register: int) -> tuple[str, str | None]:
    """(kind, register name) of a wrong `register`: PC, SP, 4-11, or
    DWARF_D0 + 8-15 for d8-d15."""
    if register == PC:
        return "wrong_pc", None
    if register == SP:
        return "wrong_sp", None
    return "wrong_register", reg_name(register)


MISMATCHES = {register: mismatch_of(register) for register in (*range(16), *range(DWARF_D0, DWARF_D0 + 32))}
"""mismatch_of each register, made once (the kernel reads it: Tracer.causes)."""


def worded(kind: str, name: str | None, got: int, want: int) -> str:
    """The detail of a mismatch (kind and register name from `mismatch_of`)."""
    label = "pc" if kind == "wrong_pc" else "sp" if kind == "wrong_sp" else name
    return f"{label} {got:#x}, expected {want:#x}"


def difference(register: int, got: int, want: int) -> tuple[str, str | None, str]:
    """(kind, register name, detail) for a caller frame whose `register`
    holds `got` instead of `want`."""
    kind, name = mismatch_of(register)
    return kind, name, worded(kind, name, got, want)
