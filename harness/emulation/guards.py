"""The guards of a run (abi.Limits): what each limit's fault says, and the
checks of the clock and of memory that the Python hook and the system-call
hook make (harness/verify/csrc/trace.c makes the same in C); the fault that ends a run."""

from __future__ import annotations

import math
import os
import resource
import sys
import time

from harness import abi
from harness.errors import HarnessError

MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024  # bytes in getrusage's ru_maxrss unit
_STATM = "/proc/self/statm"
_PAGE_SIZE = resource.getpagesize()


class EmulationFault(HarnessError):
    """The emulated program stopped abnormally; `guard`: the guard
    (abi.GUARDS) that stopped it, GUARD_NONE for any other cause."""

    def __init__(self, pc: int, cause: str, guard: int = abi.GUARD_NONE):
        super().__init__(f"emulation fault at pc {pc:#x}: {cause}")
        self.pc = pc
        self.cause = cause
        self.guard = guard


class ImpreciseFault(EmulationFault):
    """A process's access faulted in a run followed from block entries: the
    engine then says no more than the block's start, so neither the
    instruction the handler interrupts nor the instructions run are known
    (a run with the per-instruction hook knows both: hooks="instruction")."""


# The default clock of a run (abi.Limits.seconds None), scaled to its work:
# CLOCK_BASE, and for each instruction it may run and each stop it verifies
# an allowance some ten times the CPU time measured (all 13 unwinders;
# docs/robustness.md): a run of ground truth alone from block entries, 9-17
# ns an instruction; a stop of a run that verifies every stop, 0.37-1.84 us
# (each walk reuses the frames of the stop before); a sampled stop, 14-19 us
# (its walks start afresh). A program of threads and system calls costs
# more an instruction than these: Chromium's render (40 threads) runs some
# 220 ns an instruction verified at samples on a loaded machine.
CLOCK_BASE = 120.0  # seconds: start-up, the tables, system calls (the work no count of instructions or stops scales)
CLOCK_PER_INSTRUCTION = 500e-9
CLOCK_PER_STOP = 10e-6  # every = 1
CLOCK_PER_SAMPLE = 200e-6  # every > 1


def scaled_seconds(instructions: int, every: int | None = 1) -> float:
    """The default clock of a run of `instructions` verified at every stop
    (every 1), at samples of mean stride `every`, or not at all (None):
    CLOCK_BASE + instructions x CLOCK_PER_INSTRUCTION + its stops x
    CLOCK_PER_STOP (every 1) or CLOCK_PER_SAMPLE (instructions / every)."""
    stops = 0.0 if every is None else (instructions * CLOCK_PER_STOP if every == 1
                                       else instructions / every * CLOCK_PER_SAMPLE)
    return float(math.ceil(CLOCK_BASE + instructions * CLOCK_PER_INSTRUCTION + stops))  # whole seconds


def clocked(limits: abi.Limits, instructions: int | None = None, every: int | None = 1) -> abi.Limits:
    """`limits` with its clock: as given, or (seconds None) scaled to the
    run's work: `instructions` (a first run counted them; default, or more
    than the budget: the budget), verified as `every` says (scaled_seconds)."""
    if limits.seconds is not None:
        return limits
    work = limits.instructions if instructions is None else min(instructions, limits.instructions)
    return limits._replace(seconds=scaled_seconds(work, every))


def as_limits(limits: abi.Limits | int) -> abi.Limits:
    """`limits`, or for a number the default limits with that instruction
    budget; a clock not given scaled to the budget, with no stop verified
    (clocked: a verifying run's is scaled before); each at most 2**64 - 1
    (as trace.c reads them; the memory's None, the default, stays);
    ValueError unless each is positive."""
    limits = abi.Limits(instructions=limits) if isinstance(limits, int) else abi.Limits(*limits)
    if limits.instructions <= 0 or not all(value is None or value > 0 for value in clocked(limits, every=None)):
        raise ValueError(f"limits must be positive: {limits}")
    return abi.Limits(*(value if value is None else min(value, (1 << 64) - 1)
                        for value in clocked(limits, every=None)))


def _size(count: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if count and not count % (1 << shift):
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def guard_cause(guard: int, limits: abi.Limits, ceiling: int | None = None) -> str:
    """The cause of a fault by one of the guards (abi.GUARDS): the guard and
    its limit (for memory by default, the `ceiling` the run had reached)."""
    if guard == abi.GUARD_INSTRUCTIONS:
        return f"more than {limits.instructions} instructions (runaway loop?)"
    if guard == abi.GUARD_SELF_LOOP:
        return "branches to itself without changing any register: an endless loop"
    if guard == abi.GUARD_SECONDS:
        return f"more than {limits.seconds:g} seconds of emulation (the time limit; runaway loop?)"
    if guard == abi.GUARD_MEMORY and limits.memory_bytes is None:
        return (f"the process's resident size passed {_size(ceiling or 0)} (the default memory limit: "
                f"{_size(abi.DEFAULT_MEMORY)}, less what one system call or check interval may add, beyond what the "
                f"harness held as the run began and {FILE_COPIES} times what the files the program maps hold; "
                "--max-memory-mb sets one)")
    if guard == abi.GUARD_MEMORY:
        return (f"the process's resident size passed {_size(memory_threshold(limits.memory_bytes))} (the memory "
                f"limit, {_size(limits.memory_bytes)}, less what one system call or check interval may add)")
    if guard == abi.GUARD_DEPTH:
        return f"more than {limits.depth} nested calls: endless recursion?"
    raise ValueError(f"no guard {guard}")


def memory_threshold(limit: int) -> int:
    """How far a limit of `limit` bytes lets the resident size go: less the
    most the process can grow between two checks (abi.MEMORY_RESERVE; a
    quarter of a small limit), so that it never holds more than the limit."""
    return limit - min(abi.MEMORY_RESERVE, limit // 4)


# A file the program maps is held twice: the bytes it was read with (harness.linux.contents) and the mapping.
FILE_COPIES = 2


def memory_ceiling(limits: abi.Limits, held: int, files: int) -> int:
    """The resident size the memory guard fires past. A limit given
    (--max-memory-mb) is on the harness's whole resident size. By default,
    the run may add abi.DEFAULT_MEMORY to what the harness `held` as it
    began (the tables, the ELFs read) and FILE_COPIES times the bytes of the
    distinct files the program has mapped (`files`): a large program's
    executable and libraries (Chromium's 670 MB) come from the files the
    user gave, while whatever a program allocates, anonymous memory, the
    heap, copies of its files, counts against the limit."""
    if limits.memory_bytes is not None:
        return memory_threshold(limits.memory_bytes)
    return held + memory_threshold(abi.DEFAULT_MEMORY) + FILE_COPIES * files


def exhausted(limits: abi.Limits, started: float, ceiling: int) -> int:
    """abi.GUARD_SECONDS or GUARD_MEMORY for a run started at `started`
    (time.monotonic) that is past its clock or its memory `ceiling`
    (memory_ceiling), else GUARD_NONE."""
    if time.monotonic() - started > limits.seconds:
        return abi.GUARD_SECONDS
    if resident_bytes() > ceiling:
        return abi.GUARD_MEMORY
    return abi.GUARD_NONE


_statm_of: dict[int, int] = {}  # pid -> its open /proc/self/statm (a worker opens its own)


def resident_bytes() -> int:
    """The process's resident size now (Linux: /proc/self/statm, kept open:
    it is read after every system call), or its peak where there is no
    such file. Now, not the peak: a pool worker that once held much for
    one program must not fault every later one."""
    try:
        pid = os.getpid()
        statm = _statm_of.get(pid)
        if statm is None:
            statm = _statm_of[pid] = os.open(_STATM, os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(statm, 64, 0).split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * MAXRSS_UNIT
