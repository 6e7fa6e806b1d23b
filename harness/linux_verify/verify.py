"""Verifying an ARM Linux program as a process: `verify-elf PROGRAM` without
--entry (harness.commands), and the Linux corpus."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from harness.abi import Limits
from harness.emulation.guards import EmulationFault, clocked
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import (
    FirstRun,
    discover,
    module_program,
    modules_of,
    process_image,
    process_program,
    process_unwinders,
    runtime_exports,
)
from harness.program import Program
from harness.report.summary import summary_of, to_json
from harness.unwind.walk import Unwinder
from harness.verify.failures import ProgramResult
from harness.verify.sampling import AutoStride
from harness.verify.stops import DEFAULT_LIMITS, Verify, verify_program


@dataclass(frozen=True)
class Expected:
    """What a correct emulation gives: the exit status and stdout digest
    recorded from qemu-user (None: not checked)."""

    exit_status: int | None = None
    stdout_sha256: str | None = None


def prepared_process(run: LinuxRun, names: Sequence[str], own_unwinders: Callable[[Program], list[Unwinder]],
                     limits: Limits = DEFAULT_LIMITS, system: LinuxSystem | None = None,
                     signal_frames: bool = True) -> tuple[FirstRun, Program, list[Unwinder]]:
    """What verifying `run` needs before it runs: a first run (its modules,
    which frames resume), the image standing for the process
    (harness.linux_verify.modules; the library exports read through `system`, the
    run's own when given) and the unwinders `names` over its modules.
    Raises EmulationFault where the first run passed the clock or memory."""
    first = discover(run, limits)
    programs = [module_program(module) for module in first.modules]
    unwinders = process_unwinders(names, first.modules, programs, own_unwinders, signal_frames)
    exports = runtime_exports(system or LinuxSystem(run), first.modules)
    return first, process_image(first.modules, programs, exports), unwinders


def verify_process(run: LinuxRun, names: Sequence[str], own_unwinders: Callable[[Program], list[Unwinder]],
                   how: Verify = Verify(), expected: Expected = Expected(), observe=None, observe_at=None,
                   signal_frames: bool = True) -> ProgramResult:
    """Run `run` as a process, verifying the unwinders `names` at the stops
    `how` selects (as verify_program's, but for a stride `every` an
    AutoStride may choose from the first run's instructions), each over
    every module that has its tables (the executable's built by
    `own_unwinders`); the ProgramResult, its self-check against `expected`.
    `signal_frames`: as process_unwinders'. Each
    run (the first, and the verified one) is bounded by its `limits`, a clock
    not given scaled to its work (the verified run's to the instructions
    the first counted, at its stride: harness.emulation.guards.clocked); a first
    run past the clock or memory ends the verification there, so that a
    runaway program ends within them."""
    system, every, limits, hooks = LinuxSystem(run), how.every, how.limits, how.hooks
    try:
        first, image, unwinders = prepared_process(run, names, own_unwinders, limits, system, signal_frames)
    except EmulationFault as fault:  # no count to choose a stride by: none verified
        result = ProgramResult(process_program(system).name, fault=str(fault),
                               sampling=None if isinstance(every, AutoStride) else sampling_of(every, 0))
    else:
        if first.exact_faults and hooks == "auto":
            hooks = "instruction"  # a fault the program takes is placed only from every instruction
        stride = every.every(first.instructions) if isinstance(every, AutoStride) else every
        verified = how._replace(every=stride, limits=clocked(limits, first.instructions, stride),
                                hooks=hooks)
        result = verify_program(image, unwinders, verified, system, observe, observe_at, first.resumes)
        result.sampling = sampling_of(every, first.instructions)
        if result.fault is None and modules_of(system) != first.modules:
            result.fault = "the libraries were loaded elsewhere than in the first run: the emulation is not deterministic"
        elif result.fault is None and first.resumes is not None and result.instructions != first.instructions:
            result.fault = (f"the verified run ran {result.instructions} instructions, the first {first.instructions}: "
                            "the emulation is not deterministic (its ground truth would not hold)")
    result.expected = expected.exit_status
    result.expected_stdout_sha256 = expected.stdout_sha256
    return result


def sampling_of(every: int | AutoStride, instructions: int) -> dict | None:
    """What the report says of the stride: chosen automatically (`every`
    an AutoStride) from the first run's `instructions`, and how; given
    (above 1); nothing for every stop as asked."""
    if isinstance(every, AutoStride):
        return {"every": every.every(instructions), "chosen": "auto", "first_run_instructions": instructions,
                "every_stop_up_to": every.every_stop, "samples": every.samples, "why": every.describe(instructions)}
    return {"every": every, "chosen": "given"} if every > 1 else None


class ProcessPart(NamedTuple):
    """One stop shard of a verify-elf run of a process (what a worker of `--jobs` is sent)."""

    run: LinuxRun
    names: Sequence[str]  # the unwinders
    own_unwinders: Callable[[Program], list[Unwinder]]  # the executable's (verify_process)
    every: int | AutoStride
    shard: tuple[int, int]  # (I, N): the I-th of every N stops
    limits: Limits
    expected: Expected
    signal_frames: bool


def verify_process_part(job: ProcessPart) -> dict:
    summary = summary_of(lambda: verify_process(job.run, job.names, job.own_unwinders,
                                                Verify(every=job.every, shard=job.shard, limits=job.limits),
                                                job.expected, signal_frames=job.signal_frames))
    index, _ = job.shard
    return {"index": index, "kind": "stops", "summary": to_json(summary)}
