"""The bench's first figure: what verifying every unwinder at every stop
costs against emulation alone, over the generated corpus (harness.bench.suite).

A verified run is timed as `run` makes one, summary included, with its
unwinders built outside the timing (table building is not per-stop work),
and so is a bare run: the same program under a no-op Python hook before
every instruction (the physical limit of stepping in Python), and with no
hook at all. The emulator's set-up (taking an engine, kept from the run
before: harness.emulation.engine_pool; mapping the program) and closing (the
engine given back, reset) are left out of both, stepping alone (the
overhead ratio, the target's measure), and kept in the whole-run ratio.

Each side is the least of PASSES runs of each program. A pass runs in a
fresh process, program after program, as one of `run`'s workers does: the
caches a process keeps (harness.verify.rule_book, rules by what names
them; the lru caches of rules and of decoded instructions) start empty and
fill as it goes, so that a program's verified run finds the rules of the
programs before it, never its own. A run repeated in one process, as the
bench timed them before, found its own rules, made by the run before it.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from generators.corpus import generate_program
from harness import gc_pause
from harness.emulation.emulator import Emulator
from harness.program import Program
from harness.report.summary import summary_of
from harness.unwind.registry import build_unwinders
from harness.verify.stops import DEFAULT_BUDGET, verify_program

PASSES = 3  # fresh processes, each over every program; the least of each program's runs counts
MEASURES = ("setup", "unhooked", "bare", "truth", "verified")  # seconds a program, in a pass


def emulation_alone(program: Program) -> tuple[int, float, float, float]:
    """(instructions, seconds setting an emulator up and closing it,
    seconds running the program with no hook, seconds running it under a
    no-op Python hook); each run in a fresh emulator, as a verified run is."""
    count = 0

    def hook(pc: int) -> None:
        nonlocal count
        count += 1

    started = time.perf_counter()
    emulator = Emulator(program.segments)
    built = time.perf_counter()
    emulator.call(program.entry, None, DEFAULT_BUDGET, program.args)
    ran = time.perf_counter()
    del emulator  # giving the engine back: a verified run gives its own back inside its timing
    closed = time.perf_counter()
    emulator = Emulator(program.segments)
    started_hooked = time.perf_counter()
    emulator.call(program.entry, hook, DEFAULT_BUDGET, program.args)
    return count, built - started + closed - ran, ran - built, time.perf_counter() - started_hooked


def overhead_pass(count: int) -> dict:
    """One pass over the first `count` generated programs, in this process:
    per program its instructions, stops and MEASURES, and the unwinders verified."""
    gc_pause.settle()  # as the CLI does before a command, so a worker forked from it
    emulation_alone(generate_program(0, 0))  # warm up: the first emulator of a process pays once for what all share
    measured: dict = {name: [] for name in ("instructions", "stops", *MEASURES)}
    for number in range(count):
        *values, unwinders = _measured(number)
        for name, value in zip(measured, values):
            measured[name].append(value)
    measured["unwinders"] = unwinders
    return measured


def _measured(number: int) -> tuple:
    """Generated program `number`'s instructions, stops, MEASURES and
    unwinders verified. As a worker of `run` does with each program, it
    keeps nothing of it after (the loop of passes before held each summary
    through the next program's runs, which aged it into the oldest
    generation, for full collections inside later verified runs to walk)."""
    program = generate_program(0, number)
    instructions, setup, unhooked, bare = emulation_alone(program)
    started = time.perf_counter()
    verify_program(program, [])
    truth = time.perf_counter() - started
    unwinders = build_unwinders(program)
    started = time.perf_counter()
    summary = summary_of(lambda: verify_program(program, unwinders))
    verified = time.perf_counter() - started
    return instructions, summary.stops, setup, unhooked, bare, truth, verified, len(unwinders)


def overhead(count: int, passes: int = PASSES) -> dict:
    """The figures over the first `count` generated programs: each measure
    of each program the least of `passes` passes (a fresh process each),
    summed; rates over the same instructions (verified stops add the few
    an IT block skips)."""
    runs = []
    for _ in range(passes):
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:  # a new process for each pass
            runs.append(pool.submit(overhead_pass, count).result())
    setup, unhooked, bare, truth, verified = (sum(min(run[name][number] for run in runs) for number in range(count))
                                              for name in MEASURES)
    instructions, stops = sum(runs[0]["instructions"]), sum(runs[0]["stops"])
    stepping = max(verified - setup, 1e-9)
    return {
        "instructions": instructions, "stops": stops, "unwinders": runs[0]["unwinders"], "passes": passes,
        "setup_ms_per_program": 1000 * setup / count,
        "unhooked_stops_per_second": instructions / (setup + unhooked),
        "bare_stops_per_second": instructions / (setup + bare),
        "ground_truth_stops_per_second": instructions / truth,
        "verified_stops_per_second": stops / verified,
        # The target's measure: the cost of verifying a stop against a no-op hook.
        "verifier_overhead_ratio": bare / stepping,
        "overhead_ratio_against_no_hook": unhooked / stepping,
        "whole_run_overhead_ratio": (setup + bare) / verified,
    }
