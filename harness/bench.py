"""`unwind-harness bench`: speed and size figures.

This machine is shared and noisy, so every figure is a rate or a ratio of
two measurements taken in the same run, never a time compared with a fixed
target in a test.

1. Harness overhead: verified stops per second against the same emulation
   with a no-op per-instruction hook (the physical limit of stepping in
   Python), and against ground truth alone (the shadow stack, no unwinder);
   whole runs, the emulator's set-up included, and stepping alone
   (harness.bench_overhead).
2. Unwinder step cost: microseconds per frame over the same recorded stops,
   for each unwinder, and a v2 variant with a small direct-mapped pc cache.
3. The v2 encoder at Chrome's scale, on a synthetic text drawn from the
   functions of the compiled corpus, in a fresh process (for its peak
   memory), and 4. the v2 reader at that scale (harness.bench_scale).
5, 6. Table sizes: rows from code, and epilogue rows against `drop`
   (harness.bench_sizes).
"""

from __future__ import annotations

import datetime
import gc
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

from generators.corpus import generate_program
from harness.bench_overhead import overhead
from harness.bench_sampling import SAMPLED_EVERY, sampling_figures, sampling_rows
from harness.bench_scale import encode_at_scale, lookups
from harness.bench_sizes import epilogue_rows, synthesis_at_scale, synthesis_binary
from harness.formats import chrome_v2
from harness.program import Program
from harness.unwind.dwarf import DwarfUnwinder
from harness.unwind.frame import Stack
from harness.unwind.registry import build_unwinders
from harness.unwind.v2 import DirectMappedCache, NoCache, V2Unwinder
from harness.unwind.v2_epilogue import EpilogueFirst
from harness.unwind.walk import walk
from harness.verify.stops import ObservedStop, verify_program

# Chrome is built by clang with optimization for size or speed: its functions
# are drawn from these builds.
CHROME = {"bytes": 1_800_000, "functions": 389_694, "addresses": 816_686}
PC_CACHE_ENTRIES = 509


@dataclass(frozen=True)
class BenchSize:
    programs: int  # generated programs for the overhead figure
    recorded_stops: int  # stops replayed for the step cost
    functions: int  # synthetic text for the encoder and reader
    lookups: int
    linux: bool  # epilogue rows of the built Linux corpus programs too


FULL = BenchSize(programs=40, recorded_stops=4_000, functions=400_000, lookups=500_000, linux=True)
QUICK = BenchSize(programs=1, recorded_stops=200, functions=4_000, lookups=20_000, linux=False)


# ------------------------------------------------------------ 1. overhead


# ------------------------------------------------------------ 2. step cost


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


def step_unwinders(program: Program) -> dict:
    """The unwinders whose step cost is measured, built for `program`."""
    tables = chrome_v2.encode(program.cfi["tables"], program.text_base, "drop", code_at=program.code)
    reader = chrome_v2.V2Reader.from_blob(tables.blob("seed"), "seed")
    plain = V2Unwinder(reader, program.text_base, "v2", NoCache())
    built = {u.name: u for u in build_unwinders(program, ["v2+epilogue", "exidx", "vmkunwind", "qut", "scan", "chain"])}
    epilogue = built["v2+epilogue"]
    return {
        "v2": plain,
        f"v2 ({PC_CACHE_ENTRIES}-entry pc cache)": V2Unwinder(reader, program.text_base, "v2",
                                                              DirectMappedCache(PC_CACHE_ENTRIES)),
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

    verify_program(program, [], observe=keep, every=every)
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
                if isinstance(getattr(unwinder, "cache", None), DirectMappedCache):
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


# ------------------------------------------------------------ all


# The flat keys CI and other tools read, by the figure they come from.
FLAT_KEYS = {"overhead": ("verifier_overhead_ratio", "overhead_ratio_against_no_hook"),
             "steps": ("step_us", "step_cost_ratio_dwarf_over_v2", "cache_hit_rate"),
             "encoder": ("encode_seconds", "encode_peak_mb", "bytes_per_function", "bytes_per_address"),
             "reader": ("lookups_per_second",),
             "sampling": ("bare_instructions_per_s", "ground_truth_over_bare", "sampled_over_bare")}


def run_bench(size: BenchSize, note: Callable[[str], None] = lambda step: None) -> dict:
    """Every figure; `note` hears of each step as it starts."""
    programs = [generate_program(0, number) for number in range(size.programs)]
    figures = {"size": size.__dict__}
    note(f"verification overhead ({size.programs} programs)")
    figures["overhead"] = overhead(size.programs)
    note(f"step cost per unwinder ({size.recorded_stops:,} stops)")
    figures["steps"] = step_cost(programs, size.recorded_stops)
    note(f"encoding {size.functions:,} functions")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        scale = pool.submit(encode_at_scale, size.functions).result()
    note("rows from code (synthesis)")
    figures["synthesis"] = synthesis_at_scale(str(synthesis_binary()))
    note("epilogue rows against drop")
    figures["epilogue_rows"] = epilogue_rows(size.programs, size.linux)
    blob = scale.pop("blob")
    figures["encoder"] = scale
    note(f"reader lookups ({size.lookups:,})")
    figures["reader"] = lookups(blob, scale.pop("text_end"), scale.pop("text_base"), size.lookups)
    figures["chrome"] = {**CHROME, "bytes_per_function": CHROME["bytes"] / CHROME["functions"],
                         "bytes_per_address": CHROME["bytes"] / CHROME["addresses"]}
    note(f"a sampled run against emulation alone (every {SAMPLED_EVERY})")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # its memory guard sees its run alone
        figures["sampling"] = pool.submit(sampling_figures, size.linux).result()
    figures["machine"] = {"cores": os.cpu_count(), "date": datetime.date.today().isoformat()}
    figures.update({key: figures[group][key] for group, keys in FLAT_KEYS.items() for key in keys})
    return figures


def table_rows(figures: dict) -> list[tuple[str, str, str]]:
    """(figure, value, beside it) for the terminal table."""
    o, s, e, r, c = (figures[k] for k in ("overhead", "steps", "encoder", "reader", "chrome"))
    rows = [
        ("emulation alone (no hook)", f"{o['unhooked_stops_per_second']:,.0f} stops/s", ""),
        ("bare emulation (no-op Python hook)", f"{o['bare_stops_per_second']:,.0f} stops/s", ""),
        ("ground truth only (shadow stack)", f"{o['ground_truth_stops_per_second']:,.0f} stops/s", "compiled hook"),
        (f"verified, {o['unwinders']} unwinders", f"{o['verified_stops_per_second']:,.0f} stops/s", "compiled hook"),
        ("verifier overhead ratio (stepping)", f"{o['verifier_overhead_ratio']:.4f}",
         "target >= 0.30 (against the no-op Python hook)"),
        ("  against emulation with no hook", f"{o['overhead_ratio_against_no_hook']:.4f}", ""),
        ("  whole runs, emulator set-up in both", f"{o['whole_run_overhead_ratio']:.4f}",
         f"set-up and closing {o['setup_ms_per_program']:.1f} ms a program"),
    ]
    rows += [(f"step: {name}", f"{us:.2f} us/frame", f"{s['frames'][name]:,} frames")
             for name, us in s["step_us"].items()]
    rows += [
        ("dwarf / v2 step cost", f"{s['step_cost_ratio_dwarf_over_v2']:.2f}", "seeds: 15-30 (full CFI parsing)"),
        (f"{PC_CACHE_ENTRIES}-entry pc cache hit rate", f"{100 * s['cache_hit_rate']:.1f}%", ""),
        ("encode: functions / CFI rows", f"{e['functions']:,} / {e['cfi_rows']:,}",
         f"Chrome: {c['functions']:,} / {c['addresses']:,} addresses"),
        ("encode: seconds", f"{e['encode_seconds']:.1f}", "target < 5"),
        ("encode: peak memory (process)", f"{e['encode_peak_mb']:.0f} MB", "target < 500 MB"),
        ("blob bytes", f"{e['blob_bytes']:,}", f"Chrome: {c['bytes']:,}"),
        ("bytes per function", f"{e['bytes_per_function']:.2f}", f"Chrome: {c['bytes_per_function']:.2f}"),
        ("bytes per address", f"{e['bytes_per_address']:.2f}", f"Chrome: {c['bytes_per_address']:.2f}"),
        ("reader: load and validate", f"{r['load_seconds']:.2f} s", ""),
        ("reader: lookups", f"{r['lookups_per_second']:,.0f} /s", ""),
        ("lookups via the previous page's entry", f"{100 * r['share_touching_two_pages']:.2f}%", ""),
    ]
    y = figures["synthesis"]
    rows += [
        (f"rows from code: {y['functions']:,} functions", f"{y['seconds_per_10k_functions']:.1f} s per 10,000",
         f"{y['binary']}, peak {y['peak_mb']:.0f} MB (Python's)"),
        ("v2 bytes per function: from code / CFI", f"{y['bytes_per_function_from_code']:.2f} / "
         f"{y['bytes_per_function_from_cfi']:.2f}", f"the {y['functions_with_cfi']:,} functions with CFI"),
    ]
    rows += [(f"epilogue rows: {row['input']}", f"{row['over_drop']:+.0%} over drop (floor {row['floor_over_drop']:+.0%})",
              f"{row['drop']:,} -> {row['synthesize']:,} bytes, {row['epilogues_inside']:,} inside epilogues")
             for row in figures["epilogue_rows"]]
    return rows + sampling_rows(figures["sampling"])
