"""What the report needs of a verified program, small and additive.

A ProgramResult keeps every failure; a ProgramSummary keeps counts, the
first failures as samples, and per-unwinder tallies. Summaries of parts of a
run (programs verified in other processes, or on other machines, or the
stops of one program split between shards) combine into exactly the summary
of the whole, and round-trip through JSON, so that `--jobs`, `--shard` and
`merge` give the same report as one process.
"""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from harness.gc_pause import collector_paused
from harness.report.failing import combined, digest
from harness.report.failing import from_json as failing_from_json
from harness.report.failing import to_json as failing_json
from harness.unwind.registry import CHAIN
from harness.verify.failures import FailureCause, LogEntry, ProgramResult, detail_of, killed, self_check_ok

SAMPLES_PER_UNWINDER = 10
CountKey = tuple[str, frozenset, str, "str | None"]  # (unwinder, traits, position, failure kind)


@dataclass
class Culprits:
    """Where failing stops first went wrong: the innermost frame or a caller,
    and the traits of the function that frame is in."""

    innermost: int = 0
    deeper: int = 0
    traits: Counter = field(default_factory=Counter)

    def add(self, other: "Culprits") -> None:
        self.innermost += other.innermost
        self.deeper += other.deeper
        self.traits.update(other.traits)


@dataclass
class ProgramSummary:
    program: str
    stops: int = 0
    counts: Counter = field(default_factory=Counter)  # CountKey -> stops
    instructions: int = 0  # the program ran (ProgramResult.instructions)
    result: int | None = None
    expected: int | None = None
    fault: str | None = None
    samples: dict[str, list[dict]] = field(default_factory=dict)  # unwinder -> first failures
    wrong_registers: dict[str, Counter] = field(default_factory=dict)  # unwinder -> register -> stops
    culprits: dict[str, Culprits] = field(default_factory=dict)
    without_cfi: Counter = field(default_factory=Counter)  # unwinder -> failures in code without CFI
    stdout_sha256: str | None = None  # a Linux process's output (the result is its exit status)
    expected_stdout_sha256: str | None = None
    failing: dict = field(default_factory=dict)  # unwinder -> (function, position, kind) -> Group (report.failing)
    methods: Counter = field(default_factory=Counter)  # (chain, method, right) -> frames (ProgramResult.methods)
    sampling: dict | None = None  # the stride, where chosen automatically or given (ProgramResult.sampling)
    invented: Counter = field(default_factory=Counter)  # (unwinder, traits, position) -> walks (ProgramResult.invented)

    @property
    def self_check_ok(self) -> bool:
        return self_check_ok(self)

    @property
    def self_check(self) -> str:
        """"ok", the emulator fault, or the wrong return value."""
        if self.self_check_ok:
            return "ok"
        if self.fault:
            return self.fault
        if killed(self.result):
            ended = f"killed by signal {-self.result} ({signal_name(-self.result)})"
            return ended if self.expected is None else f"{ended}, expected status {self.expected}"
        if self.expected is None or self.result == self.expected:
            return f"wrote stdout of sha256 {self.stdout_sha256}, expected {self.expected_stdout_sha256}"
        if self.stdout_sha256 is not None:  # a process
            return f"exited with status {self.result}, expected {self.expected}"
        got = "nothing" if self.result is None else f"{self.result:#x}"
        return f"returned {got}, expected {self.expected:#x}"


def outcome_line(summary: ProgramSummary) -> str:
    """How the run ended, and whether that is what was expected of it, or
    that nothing was (verify-elf's last line)."""
    if summary.fault:
        return f"the run ended early: {summary.fault}"
    if summary.stdout_sha256 is not None:  # a process
        ended = f"killed by signal {-summary.result} ({signal_name(-summary.result)})" if killed(summary.result) \
            else f"exited with status {summary.result}"
        ended += f", its stdout of sha256 {summary.stdout_sha256}"
        if summary.expected is None and summary.expected_stdout_sha256 is None:
            return f"{ended}: nothing was expected (--expect-exit and --expect-stdout-sha256 say what a correct " \
                   "run does)"
    else:
        ended = "returned nothing" if summary.result is None else f"returned {summary.result:#x}"
        if summary.expected is None:
            return f"{ended}: nothing was expected"
    return f"{ended}: as expected" if summary.self_check_ok else f"{ended}: NOT as expected ({summary.self_check})"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "no such signal"


def sample(entry: LogEntry, program: str) -> dict:
    """A failure log entry as a summary keeps it (without a Failure record
    between: a run keeps tens)."""
    cause = entry.cause
    return {
        "program": program, "stop": entry.stop, "pc": f"{entry.pc:#x}", "function": entry.where.function,
        "position": entry.where.position, "kind": cause.kind, "frame": cause.frame, "culprit": cause.culprit,
        "detail": detail_of(cause, entry.detail),
    }


def blame(entries: Sequence[tuple], causes: Sequence[FailureCause]) -> tuple[dict, dict]:
    """The failing stops of a run's tally (entries (where id, cause id,
    walks) over `causes`) by what a summary keeps of their cause: unwinder
    -> register -> stops (a wrong register's), and unwinder -> Culprits.
    Each in the order its first cause comes."""
    stops_of = [0] * len(causes)
    for _, number, walks in entries:
        stops_of[number] += walks
    registers: dict[str, dict[str, int]] = {}
    innermost: dict[str, int] = {}
    deeper: dict[str, int] = {}
    traits_of: dict[str, dict[str, int]] = {}  # plain dicts while adding up (a Counter's += costs more)
    for cause, stops in zip(causes, stops_of):
        if not stops:
            continue
        unwinder = cause.unwinder
        if cause.register:
            counts = registers.setdefault(unwinder, {})
            counts[cause.register] = counts.get(cause.register, 0) + stops
        frames = innermost if cause.frame == 0 else deeper
        frames[unwinder] = frames.get(unwinder, 0) + stops
        traits = traits_of.setdefault(unwinder, {})
        for trait in cause.culprit_traits:
            traits[trait] = traits.get(trait, 0) + stops
    return ({unwinder: Counter(counts) for unwinder, counts in registers.items()},
            {unwinder: Culprits(innermost.get(unwinder, 0), deeper.get(unwinder, 0), Counter(traits))
             for unwinder, traits in traits_of.items()})


def summary_of(verified: Callable[[], ProgramResult], with_cfi: set[str] | None = None) -> ProgramSummary:
    """`summarize` of the run `verified()` makes, the cycle collector paused
    over both: the run's result and the summary's groups and ranges are
    many small objects in no reference cycle, and the result is let go
    before the collector resumes, which would otherwise walk it all once,
    and again as it ages."""
    with collector_paused():
        return summarize(verified(), with_cfi)


def summarize(result: ProgramResult, with_cfi: set[str] | None = None) -> ProgramSummary:
    """The summary of one run; `with_cfi` names the functions that have CFI
    (for counting failures in frames of code without it). Failures are
    counted by their tally (alike failures once, with their number); the
    samples and the digest's pcs read the log (harness.report.failing)."""
    summary = ProgramSummary(result.program, result.stops, Counter(result.counts), result.instructions, result.result,
                             result.expected, result.fault, stdout_sha256=result.stdout_sha256,
                             expected_stdout_sha256=result.expected_stdout_sha256, methods=Counter(result.methods),
                             sampling=result.sampling, invented=Counter(result.invented))
    for entry in result.failure_log.first(SAMPLES_PER_UNWINDER):  # walks stopped in a library are not logged
        summary.samples.setdefault(entry.cause.unwinder, []).append(sample(entry, result.program))
    tally = result.tally
    summary.failing = digest(tally, result.failure_log)
    if with_cfi is not None:  # failing walks where the stop's function or the culprit has no CFI
        every = tally.sums(tally.unwinders)
        both = tally.sums([unwinder if cause.culprit in with_cfi else None
                           for unwinder, cause in zip(tally.unwinders, tally.causes)],
                          [() if where.function in with_cfi else None for where in tally.wheres])
        summary.without_cfi.update({unwinder: stops - both.get((unwinder,), 0) for (unwinder,), stops in every.items()
                                    if stops > both.get((unwinder,), 0)})
    registers, blamed = blame(tally.entries, tally.causes)
    summary.wrong_registers.update(registers)
    summary.culprits.update(blamed)
    return summary


def combine(parts: Sequence[ProgramSummary], program: str | None = None) -> ProgramSummary:
    """One summary of `parts`, in their order. With `program`, the parts are
    shards of that one program's stops: samples are ordered by stop, and the
    run's outcome (the same in every shard) is kept once."""
    whole = ProgramSummary(program or ",".join(p.program for p in parts))
    for part in parts:
        whole.stops += part.stops
        whole.counts.update(part.counts)
        whole.instructions += part.instructions
        for unwinder, found in part.samples.items():
            whole.samples.setdefault(unwinder, []).extend(found)
        for unwinder, registers in part.wrong_registers.items():
            whole.wrong_registers.setdefault(unwinder, Counter()).update(registers)
        for unwinder, blame in part.culprits.items():
            whole.culprits.setdefault(unwinder, Culprits()).add(blame)
        whole.without_cfi.update(part.without_cfi)
        whole.methods.update(part.methods)
        whole.invented.update(part.invented)
    whole.failing = combined(part.failing for part in parts)
    if program is not None and parts:
        first = parts[0]
        whole.result, whole.expected, whole.fault = first.result, first.expected, first.fault
        whole.instructions = first.instructions  # each shard ran the whole program
        whole.stdout_sha256, whole.expected_stdout_sha256 = first.stdout_sha256, first.expected_stdout_sha256
        whole.sampling = first.sampling  # each shard chose the same stride from the same first run
        for found in whole.samples.values():
            found.sort(key=lambda s: s["stop"])
    for unwinder, found in whole.samples.items():
        whole.samples[unwinder] = found[:SAMPLES_PER_UNWINDER]
    return whole


# ------------------------------------------------------------------ JSON


def to_json(summary: ProgramSummary) -> dict:
    return {
        "program": summary.program, "stops": summary.stops, "instructions": summary.instructions,
        "counts": sorted(([u, sorted(t), p, k, n] for (u, t, p, k), n in summary.counts.items()),
                         key=lambda row: (row[0], row[1], row[2], row[3] or "")),
        "result": summary.result, "expected": summary.expected, "fault": summary.fault,
        "samples": summary.samples,
        "wrong_registers": {u: dict(sorted(c.items())) for u, c in sorted(summary.wrong_registers.items())},
        "culprits": {u: {"innermost": c.innermost, "deeper": c.deeper, "traits": dict(sorted(c.traits.items()))}
                     for u, c in sorted(summary.culprits.items())},
        "without_cfi": dict(sorted(summary.without_cfi.items())),
        "failing": failing_json(summary.failing),
        "methods": methods_json(summary.methods),
        **({} if summary.stdout_sha256 is None else
           {"stdout_sha256": summary.stdout_sha256, "expected_stdout_sha256": summary.expected_stdout_sha256}),
        **({} if summary.sampling is None else {"sampling": summary.sampling}),
        **({} if not summary.invented else
           {"invented": sorted([u, sorted(t), p, n] for (u, t, p), n in summary.invented.items())}),
    }


def from_json(data: dict) -> ProgramSummary:
    return ProgramSummary(
        program=data["program"], stops=data["stops"], instructions=data["instructions"],
        counts=Counter({(u, frozenset(t), p, k): n for u, t, p, k, n in data["counts"]}),
        result=data["result"], expected=data["expected"], fault=data["fault"],
        samples={u: list(s) for u, s in data["samples"].items()},
        wrong_registers={u: Counter(c) for u, c in data["wrong_registers"].items()},
        culprits={u: Culprits(c["innermost"], c["deeper"], Counter(c["traits"]))
                  for u, c in data["culprits"].items()},
        without_cfi=Counter(data["without_cfi"]),
        failing=failing_from_json(data["failing"]),
        methods=Counter({(chain, method, right): n for chain, by_method in data["methods"].items()
                         for method, count in by_method.items()
                         for right, n in ((True, count["right"]), (False, count["frames"] - count["right"])) if n}),
        stdout_sha256=data.get("stdout_sha256"), expected_stdout_sha256=data.get("expected_stdout_sha256"),
        sampling=data.get("sampling"),
        invented=Counter({(u, frozenset(t), p): n for u, t, p, n in data.get("invented", ())}),
    )


def methods_json(methods: Counter) -> dict:
    """chain -> method -> {"frames": given, "right": right}, in the chain's order of methods where
    known (harness.unwind.CHAIN), with the methods that gave no frame left out."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    for (chain, method, right), frames in sorted(methods.items(), key=lambda item: _method_order(item[0])):
        counted = found.setdefault(chain, {}).setdefault(method, {"frames": 0, "right": 0})
        counted["frames"] += frames
        counted["right"] += frames if right else 0
    return found


def _method_order(key: tuple[str, str, bool]) -> tuple:
    chain, method, right = key
    return chain, CHAIN.index(method) if method in CHAIN else len(CHAIN), method, right
