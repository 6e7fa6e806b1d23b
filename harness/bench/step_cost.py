"""The bench's second figure: what one unwinder step costs, in
microseconds per frame over the same recorded stops, for each unwinder,
and a v2 variant with a small direct-mapped pc cache (harness.bench.suite)."""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass

from harness.formats import chrome_v2
from harness.program import Program
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.frame import Stack
from harness.unwind.registry import build_unwinders
from harness.unwind.v2 import DirectMappedCache, NoCache, V2Unwinder
from harness.unwind.v2_epilogue import EpilogueFirst
from harness.unwind.walk import walk
from harness.verify.python_hook import ObservedStop
from harness.verify.stops import Verify, verify_program

PC_CACHE_ENTRIES = 509


def snapshot(low: int, high: int, lines: dict[int, bytes]) -> Stack:
    """The stack lines some walks read, copied out of the emulator: a stop
    replayed later reads exactly what it read live."""
    start = min(lines, default=low)
    data = bytearray(max(lines, default=low) + 16 - start)
    for address, line in lines.items():
        data[address - start : address - start + len(line)] = line
    return Stack(low, bytes(data), high, start)


@dataclass(frozen=True)
class RecordedStop:
    frame: object
    stack: Stack
    expected: tuple


def walk_all(unwinder, stop: RecordedStop) -> int:
    """Frames stepped walking the whole stack (up to the first failure)."""
    return sum(1 for _ in walk(unwinder, stop.frame, stop.stack, len(stop.expected)))


CACHED = f"v2 ({PC_CACHE_ENTRIES}-entry pc cache)"  # step_unwinders' v2 with a pc cache


def step_unwinders(program: Program) -> dict:
    """The unwinders whose step cost is measured, built for `program`."""
    tables = chrome_v2.encode(program.cfi["tables"], program.text_base, "drop", code_at=program.code)
    reader = chrome_v2.V2Reader.from_blob(tables.blob("seed"), "seed")
    plain = V2Unwinder(reader, program.text_base, "v2", NoCache())
    built = {u.name: u for u in build_unwinders(program, ["v2+epilogue", "exidx", "vmkunwind", "qut", "scan", "chain"])}
    epilogue = built["v2+epilogue"]
    return {
        "v2": plain,
        CACHED: V2Unwinder(reader, program.text_base, "v2", DirectMappedCache(PC_CACHE_ENTRIES)),
        "v2+epilogue": EpilogueFirst(epilogue.simulator, plain, "v2+epilogue"),
        "dwarf": DwarfUnwinder(program.cfi["reference"]),
        "exidx": built["exidx"],
        "vmkunwind": built["vmkunwind"],
        "qut": built["qut"],
        "scan": built["scan"],
        "chain": built["chain"],
    }


def record(program: Program, unwinders: dict, wanted: int) -> list[RecordedStop]:
    """About `wanted` stops, evenly spread over the run, with the stack lines
    every measured unwinder reads there."""
    total = verify_program(program, []).stops
    every = max(1, total // max(wanted, 1))
    recorded: list[RecordedStop] = []

    def keep(stop: ObservedStop) -> None:
        live = stop.stack
        live.start_recording()
        try:
            for unwinder in unwinders.values():
                walk_all(unwinder, RecordedStop(stop.frame, live, stop.expected))
        finally:
            _, touched = live.stop_recording()
        lines = {a: live.line(a) for a in touched if a < live.high}  # line() zero-fills outside
        recorded.append(RecordedStop(stop.frame, snapshot(live.low, live.high, lines), stop.expected))

    verify_program(program, [], how=Verify(every=every), observe=keep)
    return recorded


def step_cost(programs: Sequence[Program], wanted: int, rounds: int = 5) -> dict:
    """µs per frame for each unwinder over the same recorded stops: the best
    of `rounds` interleaved passes, each with fresh unwinders (cold caches)."""
    best: dict[str, float] = {}
    frames: dict[str, int] = {}
    hit_rate = 0.0
    recorded = []
    for program in programs:
        recorded.append((program, record(program, step_unwinders(program), wanted // len(programs))))
    for _ in range(rounds):
        seconds: dict[str, float] = {}
        hits = lookups = 0
        for program, stops in recorded:
            for name, unwinder in step_unwinders(program).items():
                gc.collect()
                started = time.perf_counter()
                stepped = sum(walk_all(unwinder, stop) for stop in stops)
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started
                frames[name] = frames.get(name, 0) + stepped
                if name == CACHED:  # the v2 unwinder whose pc cache is measured (step_unwinders)
                    hits += unwinder.cache.hits
                    lookups += unwinder.cache.hits + unwinder.cache.misses
        for name, value in seconds.items():
            best[name] = min(best.get(name, value), value)
        hit_rate = hits / max(lookups, 1)
    frames = {name: count // rounds for name, count in frames.items()}
    step_us = {name: 1e6 * best[name] / max(frames[name], 1) for name in best}
    return {
        "frames": frames,
        "step_us": step_us,
        "step_cost_ratio_dwarf_over_v2": step_us["dwarf"] / step_us["v2"],
        "cache_hit_rate": hit_rate,
    }
