"""The per-stop loop: run a program, and before every instruction let each
unwinder walk the whole stack; compare every frame with the shadow stack.

The verifier knows the unwinders only through `step` (and their rules, in
the compiled hook); expected values come from the shadow stack alone
(harness.verify.groundtruth), never from unwind tables.
"""

from __future__ import annotations

from typing import Callable, Collection, NamedTuple, Sequence

from harness import abi
from harness.emulation.emulator import Emulator
from harness.emulation.guards import EmulationFault, ImpreciseFault, as_limits, clocked
from harness.emulation.process_machine import RunEvents
from harness.gc_pause import collector_paused
from harness.program import Program
from harness.unwind.walk import Unwinder
from harness.verify import kernel
from harness.verify.failures import RANGE_GAP, FailureLog, LoggedPcs, ProgramResult, quiet_ranges
from harness.verify.groundtruth import ShadowFrame, has_bit, raise_entries, unpacked
from harness.verify.python_hook import ObservedStop, RunParts, frame_of, run_in_python
from harness.verify.tally import Grouping, KeyParts, Tally
from harness.verify.verification import Verification

LEARN = object()  # verify_program's `resumes`: learn them from a first run
DEFAULT_LIMITS = abi.Limits()  # how far a program may run before it counts as runaway
DEFAULT_BUDGET = DEFAULT_LIMITS.instructions
HOOKS = ("auto", "instruction", "block")  # verify_program's `hooks`


class Verify(NamedTuple):
    """How a program is verified: which of its stops, under which limits, by which hook."""

    every: int = 1  # N > 1: at samples of mean stride N (harness.verify.sampling; a process's may be an AutoStride)
    shard: tuple[int, int] = (0, 1)  # (I, N): the I-th of every N of those stops, so that N runs split the work
    limits: abi.Limits = DEFAULT_LIMITS
    compiled: bool | None = None  # the compiled hook (default: where it is built), or the Python one
    hooks: str = "auto"  # HOOKS
    memoize: bool = True  # the Python hook keeps outer walks proven at the stop before


def verify_program(program: Program, unwinders: Sequence[Unwinder], how: Verify = Verify(), system=None,
                   observe: Callable[[ObservedStop], None] | None = None,
                   observe_at: Collection[int] | None = None,
                   resumes: bytes | None | object = LEARN) -> ProgramResult:
    """Run `program`, verifying every unwinder at the stops `how` selects.
    Its `hooks`: "instruction" follows the shadow stack from a hook before
    every instruction, the reference; "block" (compiled hook only) from one
    at each translation block's entry (csrc/trace_hooks.c), as "auto" does
    for a sampled run (every > 1).

    A run past one of its `limits` (instructions, seconds, the process's
    peak memory, nested calls), or stuck in an instruction that branches to
    itself, ends as a fault at its pc, as an engine error does: the stops
    before it are verified and counted.

    The compiled hook (harness.verify.kernel) follows the shadow stack and
    answers every walk the rules answer in C, each unwinder's Python step
    only where they defer; the Python hook walks every unwinder by `step`
    (`memoize=False`: re-walking every frame at every stop). With `system`
    (harness.linux.process.LinuxSystem) the program is a process: it starts
    where the system says, ends when it exits (its status is the result),
    and its first frame has no caller to compare. `observe` sees each
    verified stop, or with `observe_at` those at these pcs only (the others
    cost no Python work beyond a set lookup). `resumes`: which frames
    resume, where a first run of the same program told
    (placed_ground_truth; None: that run faulted); by default a process's
    verification learns them from a run of its own first."""
    compiled, by_blocks = _hooks_of(how.compiled, how.memoize, how.hooks, how.every)
    limits = as_limits(clocked(how.limits, every=how.every))
    emulator = Emulator(program.segments) if system is None else Emulator(system.segments, system, system.placement)
    result = ProgramResult(program.name, expected=program.expected_result)
    _announce_sentinel(unwinders, emulator)
    verification = Verification(program, unwinders, how.memoize, result, past_bottom=system is not None)
    run = RunParts(program=program, unwinders=unwinders, emulator=emulator, verification=verification, result=result,
                   limits=limits, every=how.every, shard=how.shard, by_blocks=by_blocks)
    # The per-stop loop allocates much and keeps little, so the collector
    # would mostly rescan the long-lived tables: a fifth of the run time.
    with collector_paused():
        try:
            if compiled and observe is None and system is None:
                run = _run_once_if_it_can(run, how.memoize)
            else:
                _run_after_ground_truth(run, system, observe, observe_at, compiled, resumes)
        except EmulationFault as fault:
            result.fault = str(fault)
        result = run.result
        tally = result.tally  # (unwinder, traits, position, kind) -> failing walks
        tally.sums(tally.unwinders, [(where.traits, where.position) for where in tally.wheres], tally.kind_parts,
                   into=result.counts)
        if system is not None:
            result.stdout_sha256 = system.outcome().stdout_sha256
    return result


def _hooks_of(compiled: bool | None, memoize: bool, hooks: str, every: int) -> tuple[bool, bool]:
    """(the compiled hook, from block entries) for verify_program's arguments."""
    if compiled is None:
        compiled = memoize and kernel.AVAILABLE
    elif compiled and not kernel.AVAILABLE:
        raise RuntimeError("compiled=True, but the compiled kernel (harness/verify/csrc) is not built")
    if hooks not in HOOKS or (hooks == "block" and not compiled):
        raise ValueError(f"hooks={hooks!r}: one of {', '.join(HOOKS)}, and block hooks need the compiled kernel")
    return compiled, hooks == "block" or (hooks == "auto" and compiled and every > 1)


def _announce_sentinel(unwinders: Sequence[Unwinder], emulator: Emulator) -> None:
    """A bare-metal entry returns to the harness's sentinel, which no call
    in the program precedes: an unwinder that scans for return addresses
    (harness.unwind.scan) is told it, as a profiler knows where its threads start."""
    if emulator.system is None:
        for unwinder in unwinders:
            if unwinder.entered_from is not None:
                unwinder.entered_from(emulator.placement.sentinel | 1)


def _only_at(observe, wanted: frozenset[int] | None):
    """`observe`, shown only the stops at `wanted` pcs (all, when None)."""
    if observe is None or wanted is None:
        return observe
    return lambda stop: stop.pc in wanted and observe(stop)


def _run_after_ground_truth(run: RunParts, system, observe, observe_at, compiled: bool,
                            resumes: bytes | None | object) -> None:
    """The verified run after a first of ground truth alone, which tells the
    frames that never resume (for the walks, and for an observer, which
    judges frames alike): `resumes`, or learnt here."""
    if resumes is LEARN:
        resumes = _resuming_frames(run.program, system, compiled, run.limits) if run.unwinders or observe else None
    wanted = None if observe_at is None else frozenset(observe_at)
    if compiled:
        _run_compiled(run, observe, resumes, wanted)
    else:
        run_in_python(run, _only_at(observe, wanted), resumes)


def _run_once_if_it_can(run: RunParts, memoize: bool) -> RunParts:
    """The compiled hook's run of a bare-metal program, once where that will
    do: it compares every frame's registers (not knowing yet which frames
    never resume) and records which resumed, and which a walk found a wrong
    register of. Only where one of those never resumed would a run that
    knew (the reference, as `_resuming_frames` lets the others run) judge
    differently: then it runs again, knowing. A bare-metal program returns
    to the harness, so that is rare (a longjmp, an exception); a process
    ends in exit, frames below it never resume, and a first run of ground
    truth alone is cheaper there. The run that counts."""
    resumed, questioned = _run_compiled(run)
    if not judged_differently(questioned, run.verification.questioned, resumed):
        return run
    program = run.program
    again = ProgramResult(program.name, expected=program.expected_result)
    run = run._replace(emulator=Emulator(program.segments),
                       verification=Verification(program, run.unwinders, memoize, again), result=again)
    _run_compiled(run, resumes=resumed)
    return run


def judged_differently(questioned: bytes, questioned_in_python: set[int], resumed: bytes) -> bool:
    """Would a run that knew which frames resume judge differently: did a
    walk find a wrong register of a frame that never resumed (`questioned`,
    a bit per serial, from the kernel; and by the walks in Python)?"""
    return any(not has_bit(resumed, serial) for serial in questioned_in_python) or any(
        mine & ~theirs for mine, theirs in zip(questioned, resumed.ljust(len(questioned), b"\0")))


def _resuming_frames(program: Program, system, compiled: bool, limits: abi.Limits) -> bytes | None:
    """placed_ground_truth on twins of `system`; None where it faults (the
    verified run then faults alike, comparing every frame's registers up to there)."""
    twin = (lambda: None) if system is None else system.rerun
    return placed_ground_truth(program, twin, compiled, limits).truth.resumes


def placed_ground_truth(program: Program, fresh_system: Callable[[], object], compiled: bool,
                        limits: abi.Limits) -> PlacedTruth:
    """ground_truth_run on `fresh_system()` from block entries, and where the
    process takes a fault only the per-instruction hook places (ImpreciseFault)
    again on another, from every instruction."""
    system = fresh_system()
    truth = ground_truth_run(program, system, compiled, limits, by_blocks=True)
    if not isinstance(truth.fault, ImpreciseFault):
        return PlacedTruth(truth, system, False)
    system = fresh_system()
    return PlacedTruth(ground_truth_run(program, system, compiled, limits, by_blocks=False), system, True)


class GroundTruth(NamedTuple):  # what a run of ground truth alone found:
    resumes: bytes | None  # the frames that resume, a bit per serial (None: the run faulted)
    instructions: int  # it ran, to its end or to its fault
    fault: EmulationFault | None


class Resumed(NamedTuple):  # a bit per shadow frame's serial:
    resumed: bytes  # the frames that resumed
    questioned: bytes  # those a walk found a wrong register of


class PlacedTruth(NamedTuple):
    truth: GroundTruth
    system: object  # the system that ran (None: bare metal)
    exact: bool  # it took every instruction (the block entries could not place a fault)


def ground_truth_run(program: Program, system, compiled: bool, limits: abi.Limits,
                     by_blocks: bool = True) -> GroundTruth:
    """A run of ground truth alone, under every guard of `limits`: the frames
    that resume, a bit per serial (harness.verify.groundtruth), or its fault,
    with the instructions it ran (the count a verified run's automatic
    stride and clock are chosen by). With `system`, that process (used up).
    Compiled, from block entries where `by_blocks` (the same shadow stack,
    at a fraction of the cost: tests/test_sampling.py), where a fault the
    process takes is an ImpreciseFault."""
    emulator = Emulator(program.segments) if system is None else Emulator(system.segments, system, system.placement)
    result = ProgramResult(program.name)
    run = RunParts(program=program, unwinders=[], emulator=emulator, verification=Verification(program, [], True, result),
                   result=result, limits=limits, every=1, shard=(0, 1), by_blocks=by_blocks)
    try:
        resumes = _run_compiled(run).resumed if compiled else run_in_python(run)
    except EmulationFault as fault:
        return GroundTruth(None, result.instructions, fault)
    return GroundTruth(resumes, result.instructions, None)


def _run_compiled(parts: RunParts, observe=None, resumes: bytes | None = None,
                  wanted: frozenset[int] | None = None) -> Resumed:
    """The compiled hook's run; the frames that resumed, and (without
    `resumes`) those a walk found a wrong register of (a bit per serial)."""
    program, emulator, run, result = parts.program, parts.emulator, parts.verification, parts.result
    stop_kernel = kernel.StopKernel(parts.unwinders, *emulator.stack_memory) if parts.unwinders else None
    shadow_frames: dict[int, ShadowFrame] = {}  # serial -> frame, unpacked once
    compare_bottom = emulator.system is None
    if stop_kernel is not None:
        stop_kernel.verifier.past_bottom = not compare_bottom  # a thread's first frame has no caller

    def slow(stop: abi.SlowStop) -> None:
        """A stop where a walk deferred, or one observed."""
        serials = stop.serials
        if len(shadow_frames) > 2 * len(serials) + 4096:  # mostly frames returned from: start afresh
            shadow_frames.clear()
        expected = []
        for index in range(len(serials) - 1, -1, -1):  # innermost first
            frame = shadow_frames.get(serials[index])
            if frame is None:
                frame = shadow_frames[serials[index]] = unpacked(stop.shadow, index, serials[index])
            expected.append(frame)
        if not compare_bottom:
            expected.pop()  # a process's first frame: no caller to compare
        frame, stack = frame_of(stop.pc, stop.regs, stop.cpsr, stop.vfp), emulator.stack(stop.regs[13])
        if stop.deferred:
            run.walk(stop.number, stop.pc, stop.deferred, frame, stack, expected, stop.state, stop.thread)
        if observe is not None and (wanted is None or stop.pc in wanted):
            observe(ObservedStop(stop.pc, frame, stack, tuple(expected)))

    # The kernel calls `slow` at the stops observed (only at `wanted`, when given) and where a walk deferred.
    observe_all = observe is not None and (wanted is None or bool(wanted))
    tracer = kernel.Tracer(abi.TraceSettings(
        engine=emulator.engine(program.uses_vfp), verifier=stop_kernel and stop_kernel.verifier,
        sentinel=emulator.placement.sentinel, uses_vfp=program.uses_vfp, every=parts.every, shard=parts.shard,
        classify=run.ids, slow=slow, observe_all=observe_all, compare_bottom=compare_bottom,
        raises=raise_entries(program), quiet=quiet_ranges(program), resumes=resumes,
        observed=tuple(sorted(wanted or ())), by_blocks=parts.by_blocks))
    cap = run.log_cap

    def on_signal(interrupted) -> None:
        vfp = tuple(interrupted.d[8:16]) if program.uses_vfp else None
        tracer.interrupted(interrupted.r[15], interrupted.r[13], tuple(interrupted.r[4:12]), vfp)

    emulator.follow(RunEvents(lambda: tracer.seen, on_signal,
                              lambda switch: tracer.switch(switch.left, switch.tid, switch.stack_top),
                              tracer.faulted, not parts.by_blocks, tracer.set_deadline, tracer.set_memory))
    try:
        result.result = emulator.call_traced(program.entry, tracer, parts.limits, program.args, cap, program.code_spans())
    finally:  # the stops before a fault count too
        result.stops, result.instructions = tracer.stops, tracer.seen
        causes = run.kernel_causes(stop_kernel, tracer.causes(*run.cause_parts(stop_kernel)))
        # the kernel's walks by its ids (its wheres are the run's), and then those in Python
        result.tally = tally = Tally(list(run.wheres), list(causes), tracer.tally())
        tally.add(run.tally())
        result.failure_log = _merged_log(tracer, run, stop_kernel, causes, tally.logged() > cap)
        if stop_kernel is not None:  # its counts; then no cycle through its providers, its own rules out of the book
            run.add_kernel_counts(stop_kernel)
            stop_kernel.release()
    return Resumed(tracer.resumed(), tracer.questioned())


def _merged_log(tracer, run: Verification, stop_kernel, causes: list, truncated: bool) -> FailureLog:
    """The run's failure log: each side (the kernel, the walks in Python)
    logged its first `cap` failures, the first `cap` of both merged in stop
    order are the run's (all of both where they hold no more)."""
    cap = run.log_cap
    worded = stop_kernel.worded if stop_kernel else list  # without unwinders, nothing is logged

    def logged_pcs(key: KeyParts, groups: Grouping) -> LoggedPcs:  # the kernel's ids are the run's tally's first
        mine, theirs = tracer.log_split(run.log.entries(), cap) if truncated else (-1, None)
        return run.logged_pcs(key, groups, tracer.logged_pcs(mine, RANGE_GAP, groups.of_entry, len(groups.keys)),
                              theirs)
    return FailureLog(lambda count: worded(tracer.failure_log(run.wheres, causes, run.log.entries(), count, cap)),
                      truncated=truncated, pcs=logged_pcs)


