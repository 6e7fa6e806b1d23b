"""`unwind-harness bench`: how near a verified run comes to emulation alone
on a long program, the figures a profiler's user waits on.

On the longest program at hand (the Linux corpus's, when it is built; else
the compiled corpus's, the one emulation alone takes longest on), each a
ratio of seconds measured in this one run, over the same instructions:
- `bare_instructions_per_s`: the engine with no hook (a process's system
  calls still answered);
- `ground_truth_over_bare`: the shadow stack alone, kept from block entries
  (a sampled run's), over bare; `ground_truth_per_instruction_over_bare`
  the same from a hook before every instruction (`--every 1`'s);
- `sampled_over_bare`: `--every SAMPLED_EVERY` with every unwinder verified
  at each sample (its first, ground-truth-only run included; the tables
  are built before, as `run` builds them once per program).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from harness.elf_program import program_from_elf
from harness.emulation.emulator import Emulator
from harness.emulation.guards import ImpreciseFault
from harness.linux.process import LinuxSystem
from harness.linux_verify.corpus import cache, linux_entries, linux_run
from harness.linux_verify.verify import prepared_process
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.runner import LINUX_LIMITS
from harness.unwind.registry import UNWINDER_NAMES, build_unwinders
from harness.verify.stops import DEFAULT_LIMITS, Verify, verify_program

SAMPLED_EVERY = 1000
RUNS = 3  # of each timed run but the sampled one: the least counts (the machine is noisy)


@dataclass(frozen=True)
class LongProgram:
    """A program to time, and how to run it afresh: `system()` gives a new
    process for each run (None: bare metal)."""

    label: str
    image: Program
    unwinders: list
    system: Callable[[], LinuxSystem | None]
    limits: object


def _bare_seconds(program: Program | None, system: LinuxSystem | None, limits) -> float:
    """Emulation alone: a bare-metal `program`, or the process `system` (which starts where it says)."""
    if system is not None:
        emulator, entry, args = Emulator(system.segments, system, system.placement), 0, ()
    else:
        emulator, entry, args = Emulator(program.segments), program.entry, program.args
    started = time.perf_counter()
    emulator.call(entry, None, limits, args)
    return time.perf_counter() - started


def _bare_or_none(entry: dict) -> float | None:
    """_bare_seconds of a Linux corpus program; None for one emulation
    alone cannot run (threads or timers: their deadlines need a hook), named."""
    try:
        return _bare_seconds(None, LinuxSystem(linux_run(entry)), LINUX_LIMITS)
    except ImpreciseFault as fault:
        print(f"unwind-harness: note: {entry['name']} cannot run by emulation alone ({fault.cause}): "
              "left out of the bench's longest program", file=sys.stderr)
        return None


def longest_program(linux_corpus: bool = True) -> LongProgram:
    """The program emulation alone takes longest on, of the Linux corpus when
    built (and wanted), else of the compiled corpus, prepared with every unwinder."""
    linux = [e for e in linux_entries("all") if (cache() / e["path"]).exists()] if linux_corpus else []
    seconds = {e["name"]: _bare_or_none(e) for e in linux}
    linux = [e for e in linux if seconds[e["name"]] is not None]
    if linux:
        entry = max(linux, key=lambda e: seconds[e["name"]])
        _, image, unwinders = prepared_process(linux_run(entry), UNWINDER_NAMES,
                                               partial(build_unwinders, names=UNWINDER_NAMES), LINUX_LIMITS)
        return LongProgram(entry["name"], image, unwinders, partial(LinuxSystem, linux_run(entry)), LINUX_LIMITS)
    programs = [program_from_elf(str(ELF_CORPUS / b["file"]), b["entry"]) for b in elf_builds()]
    program = max(programs, key=lambda p: _bare_seconds(p, None, DEFAULT_LIMITS))
    return LongProgram(program.name, program, build_unwinders(program), lambda: None, DEFAULT_LIMITS)


def _timed(run: Callable[[], object], runs: int) -> tuple[float, object]:
    """The least seconds of `runs` runs, and a run's result; a run that
    faulted (a guard of the bench's own process, its memory say) stopped
    early, and its seconds would flatter: that ends the bench."""
    best, result = float("inf"), None
    for _ in range(runs):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
        if result.fault is not None:
            raise RuntimeError(f"bench: the run of {result.program} faulted: {result.fault}")
    return best, result


def sampling_figures(linux_corpus: bool = True) -> dict:
    long = longest_program(linux_corpus)
    bare = min(_bare_seconds(long.image, long.system(), long.limits) for _ in range(RUNS))  # the process's, if one
    def truth(hooks: str):  # ground truth alone, followed as `hooks` says
        return verify_program(long.image, [], Verify(limits=long.limits, hooks=hooks), long.system())

    by_blocks, result = _timed(lambda: truth("block"), RUNS)
    per_instruction, _ = _timed(lambda: truth("instruction"), RUNS)
    sampled, checked = _timed(lambda: verify_program(long.image, long.unwinders,
                                                     Verify(every=SAMPLED_EVERY, limits=long.limits),
                                                     long.system()), 1)
    return {
        "program": long.label, "instructions": result.instructions, "unwinders": len(long.unwinders),
        "every": SAMPLED_EVERY, "stops_verified": checked.stops,
        "bare_instructions_per_s": result.instructions / bare,
        "ground_truth_over_bare": bare / by_blocks,
        "ground_truth_per_instruction_over_bare": bare / per_instruction,
        "sampled_over_bare": bare / sampled,
    }


def sampling_rows(figures: dict) -> list[tuple[str, str, str]]:
    """bench's table rows of `sampling_figures`."""
    f = figures
    return [
        (f"emulation alone: {f['program']}", f"{f['bare_instructions_per_s']:,.0f} instructions/s",
         f"{f['instructions']:,} instructions"),
        ("ground truth from block entries / bare", f"{f['ground_truth_over_bare']:.3f}", "target >= 0.25"),
        ("ground truth before every instruction / bare", f"{f['ground_truth_per_instruction_over_bare']:.3f}", ""),
        (f"sampled (every {f['every']}, {f['unwinders']} unwinders) / bare", f"{f['sampled_over_bare']:.3f}",
         f"target >= 0.20; {f['stops_verified']:,} stops verified"),
    ]
