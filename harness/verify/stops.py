"""The per-stop loop: run a program, and before every instruction let each
unwinder walk the whole stack; compare every frame with the shadow stack.

The verifier knows the unwinders only through `step` (and their rules, in
the compiled hook); expected values come from the shadow stack alone
(harness.verify.groundtruth), never from unwind tables.
"""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Callable, Collection, Sequence

from harness.classify import Classifier, Where, in_flight_where
from harness.program import Program
from harness.thumb.encoding import (
    arm_call_length,
    arm_return_kind,
    call_length,
    executes,
    instruction_size,
    it_block_length,
    return_kind,
    with_it_state,
)
from harness.unwind.frame import Frame
from harness.unwind.walk import Unwinder
from harness.verify import abi, kernel
from harness.verify.emulator import EmulationFault, Emulator, as_limits, guard_cause
from harness.verify.failures import (
    FailureCause,
    FailureLog,
    Outcome,
    ProgramResult,
    WalkLog,
    counted_kind,
    generic,
    is_stop,
    logged_failures,
    mismatch_of,
    quiet_ranges,
)
from harness.verify.groundtruth import ShadowFrame, ShadowStack, SkippedStops, raise_entries, unpacked
from harness.verify.walks import MemoizedWalk, chain_frames, first_difference

DEFAULT_LIMITS = abi.Limits()  # how far a program may run before it counts as runaway
DEFAULT_BUDGET = DEFAULT_LIMITS.instructions
VFP_NONE = (None,) * 8
D_TAIL = (None,) * 16


@dataclass(frozen=True)
class ObservedStop:
    """What a verified stop looked like: registers, the stack reader, and the
    shadow frames, innermost first (the expected callers)."""

    pc: int
    frame: Frame
    stack: object  # the emulator's live stack reader, valid during the call only
    expected: tuple[ShadowFrame, ...]


class Verification:
    """One program's verification, whichever hook drives it: the verdicts of
    walks in Python, and the causes of the kernel's failing answers."""

    def __init__(self, program: Program, unwinders: Sequence[Unwinder], memoize: bool, result: ProgramResult):
        self.classify = Classifier(program.function_at, program.module_at)
        self.names = [u.name for u in unwinders]
        self.chains = {index: u for index, u in enumerate(unwinders) if hasattr(u, "step_by")}
        self.methods = result.methods
        self.walks = [MemoizedWalk(u) if memoize else partial(first_difference, u) for u in unwinders]
        self.counts = result.counts
        self.stop_classes: dict[tuple[frozenset[str], str], int] = {}  # (traits, position) -> the kernel's tally
        self.wheres: list[Where] = []  # by the id the kernel knows them by
        self._where_ids: dict[Where, int] = {}
        self.log = WalkLog()  # the failing walks in Python
        self.log_cap = abi.FAILURE_LOG_CAP  # entries in `log`, at most; the rest are tallied in `unlogged`
        self.unlogged: Counter = Counter()  # (where, cause) -> failing walks in Python past the cap
        self._causes: dict[FailureCause, FailureCause] = {}  # each cause of walks in Python, once

    def where(self, pc: int, in_flight: bool) -> Where:
        """pc's (function, traits, position) at a stop, `in_flight` with
        an exception on its way to a landing pad (groundtruth.ShadowStack)."""
        where = self.classify(pc)
        return in_flight_where(where) if in_flight else where

    def ids(self, pc: int, in_flight: bool = False) -> tuple[int, int, int, int]:
        """(stop class, where id) of a stop at pc, for the kernel, and the
        pcs [low, high) that share them."""
        where, low, high = self.classify.span(pc)
        if in_flight:
            where = in_flight_where(where)
        where_id = self._where_ids.get(where)
        if where_id is None:
            where_id = self._where_ids[where] = len(self.wheres)
            self.wheres.append(where)
        return self.stop_classes.setdefault((where[1], where[2]), len(self.stop_classes)), where_id, low, high

    def failure_cause(self, unwinder: str, outcome: Outcome, frame_pc: int) -> FailureCause:
        """The cause of a failing walk (frame, kind, register, detail) whose
        wrong frame is at frame_pc, with the function it is in (a caller's
        pc is a return address: its call lies one byte before)."""
        frame_index, kind, register, detail = outcome
        culprit, culprit_traits, _ = self.classify(frame_pc if frame_index == 0 else frame_pc - 1)
        return FailureCause(unwinder, kind, frame_index, culprit, register, detail, culprit_traits)

    def kernel_cause(self, stop_kernel: kernel.StopKernel, index: int, answer: abi.Answer, culprit: int) -> FailureCause:
        """The cause of the kernel's failing `answer` for unwinder `index`; a
        mismatch's is shared wherever the wrong frame is in the same function
        (`culprit`, a where id), its values given apart."""
        if isinstance(answer, abi.Mismatch):
            function, traits, _ = self.wheres[culprit]
            kind, register_name = mismatch_of(answer.register)
            return FailureCause(self.names[index], kind, answer.frame, function, register_name, "", traits)
        return self.failure_cause(self.names[index], stop_kernel.outcome(answer), answer.pc)

    def walk(self, number: int, pc: int, indices, frame: Frame, stack, expected: Sequence[ShadowFrame],
             in_flight: bool = False) -> None:
        """The unwinders `indices` walk the stop in Python."""
        where = self.where(pc, in_flight)
        for index in indices:
            if index in self.chains:
                for (method, right), frames in chain_frames(self.chains[index], frame, stack, expected).items():
                    self.methods[(self.names[index], method, right)] += frames
            outcome = self.walks[index](frame, stack, expected)
            if outcome is None:
                self.counts[(self.names[index], where[1], where[2], None)] += 1
                continue
            cause, wording = self.shared(self.failure_cause(self.names[index], outcome,
                                                            pc if outcome[0] == 0 else expected[outcome[0] - 1].pc))
            if len(self.log) < self.log_cap and not is_stop(cause):
                self.log.append(number, index, pc, where, cause, wording)
            else:  # past the cap, or a stop in a library: tallied only
                self.unlogged[(where, cause)] += 1

    def shared(self, cause: FailureCause) -> tuple[FailureCause, str | None]:
        """The cause with the numbers of its wording left out, one object for
        every walk that fails alike, and the wording where it had numbers
        (a log entry keeps that): a walk in Python that fails at every stop
        (vsp below sp at a new address each time) would otherwise make each
        stop's cause, and its tally, its own, hundreds of bytes a stop."""
        shared = generic(cause.detail)
        wording = None if shared == cause.detail else cause.detail
        key = cause if wording is None else cause._replace(detail=shared)
        return self._causes.setdefault(key, key), wording

    def tally(self) -> Counter:
        """(where, cause) -> stops, of the walks in Python, logged or not."""
        tally = self.log.tally()
        tally.update(self.unlogged)
        return tally



def _frame(pc: int, regs, cpsr: int, vfp) -> Frame:
    return Frame(r=tuple(regs[:15]) + (pc,), d=(None,) * 8 + (vfp or VFP_NONE) + D_TAIL, cpsr=cpsr)


def verify_program(program: Program, unwinders: Sequence[Unwinder],
                   budget: int | None = None, memoize: bool = True,
                   observe: Callable[[ObservedStop], None] | None = None,
                   every: int = 1, shard: tuple[int, int] = (0, 1),
                   compiled: bool | None = None, limits: abi.Limits = DEFAULT_LIMITS,
                   system=None, observe_at: Collection[int] | None = None) -> ProgramResult:
    """Run `program`, verifying every unwinder at every stop (or at every
    `every`-th: the shadow stack still follows every instruction). With
    `shard` (I, N), only the I-th of every N of those stops is verified, so
    that N runs split the work and together verify each stop once.

    A run past one of `limits` (instructions, or `budget` when given;
    seconds; the process's peak memory; nested calls), or stuck in an
    instruction that branches to itself, ends as a fault at its pc, as an
    engine error does: the stops before it are verified and counted.

    `compiled` (default: when built) runs the compiled hook (harness.verify.kernel):
    the shadow stack and every walk the rules answer in C, each unwinder's
    Python step only where they defer; `compiled=False` runs the hook in
    Python, every walk by `step`. With `system` (harness.linux.process.LinuxSystem)
    the program is a process: it starts where the system says, ends when
    it exits (its status is the result), and its first frame has no
    caller to compare. `memoize=False` (Python hook only)
    re-walks every frame at every stop (for checking that the memo changes
    nothing); `observe` sees each verified stop, or with `observe_at` those
    at these pcs only (the others cost no Python work beyond a set lookup).
    """
    if compiled is None:
        compiled = memoize and kernel.AVAILABLE
    elif compiled and not kernel.AVAILABLE:
        raise RuntimeError("compiled=True, but the compiled kernel (harness/verify/csrc) is not built")
    limits = as_limits(limits if budget is None else limits._replace(instructions=budget))
    emulator = (Emulator(program.segments) if system is None
                else Emulator(system.segments, system, system.placement))
    result = ProgramResult(program.name, expected=program.expected_result)
    _announce_sentinel(unwinders, emulator)
    run = Verification(program, unwinders, memoize, result)
    collecting = gc.isenabled()
    # The per-stop loop allocates much and keeps little, so the collector
    # would mostly rescan the long-lived tables: a fifth of the run time.
    gc.disable()
    try:
        try:
            # Which frames never resume, for the walks and for an observer (which judges frames alike).
            resumes = _resuming_frames(program, system, compiled, limits) if unwinders or observe else None
            wanted = None if observe_at is None else frozenset(observe_at)
            if compiled:
                _run_compiled(program, unwinders, emulator, run, result, limits, observe, every, shard, resumes, wanted)
            else:
                _run_in_python(program, emulator, run, result, limits, _only_at(observe, wanted), every, shard, resumes)
        except EmulationFault as fault:
            result.fault = str(fault)
        for (where, cause), stops in result.failure_tally.items():
            result.counts[(cause.unwinder, where[1], where[2], counted_kind(cause))] += stops
        if system is not None:
            result.stdout_sha256 = system.outcome().stdout_sha256
    finally:
        if collecting:
            gc.enable()
    return result


def _announce_sentinel(unwinders: Sequence[Unwinder], emulator: Emulator) -> None:
    """A bare-metal entry returns to the harness's sentinel, which no call
    in the program precedes: an unwinder that scans for return addresses
    (harness.unwind.scan) is told it, as a profiler knows where its threads start."""
    if emulator.system is None:
        for unwinder in unwinders:
            getattr(unwinder, "entered_from", lambda address: None)(emulator.placement.sentinel | 1)


def _only_at(observe, wanted: frozenset[int] | None):
    """`observe`, shown only the stops at `wanted` pcs (all, when None)."""
    if observe is None or wanted is None:
        return observe
    return lambda stop: stop.pc in wanted and observe(stop)


def _resuming_frames(program: Program, system, compiled: bool, limits: abi.Limits) -> bytes | None:
    """A first run, of ground truth alone: the frames that resume, a bit per
    serial (harness.verify.groundtruth); None where it faults (the verified
    run then faults alike, comparing every frame's registers up to there)."""
    twin = None if system is None else system.rerun()
    emulator = Emulator(program.segments) if twin is None else Emulator(twin.segments, twin, twin.placement)
    result = ProgramResult(program.name)
    run = Verification(program, [], True, result)
    try:
        if compiled:
            return _run_compiled(program, [], emulator, run, result, limits, None, 1, (0, 1))
        return _run_in_python(program, emulator, run, result, limits, None, 1, (0, 1))
    except EmulationFault:
        return None


def _run_compiled(program: Program, unwinders: Sequence[Unwinder], emulator: Emulator, run: Verification,
                  result: ProgramResult, limits: abi.Limits, observe, every: int, shard: tuple[int, int],
                  resumes: bytes | None = None, wanted: frozenset[int] | None = None) -> bytes:
    """The compiled hook's run; the frames that resumed (a bit per serial)."""
    stop_kernel = kernel.StopKernel(unwinders, *emulator.stack_memory) if unwinders else None
    shadow_frames: dict[int, ShadowFrame] = {}  # serial -> frame, unpacked once
    compare_bottom = emulator.system is None

    def slow(number: int, pc: int, regs, cpsr: int, vfp, deferred, packed_shadow: bytes, serials,
             in_flight: int) -> None:
        """A stop where a walk deferred, or one observed."""
        if len(shadow_frames) > 2 * len(serials) + 4096:  # mostly frames returned from: start afresh
            shadow_frames.clear()
        expected = []
        for index in range(len(serials) - 1, -1, -1):  # innermost first
            frame = shadow_frames.get(serials[index])
            if frame is None:
                frame = shadow_frames[serials[index]] = unpacked(packed_shadow, index, serials[index])
            expected.append(frame)
        if not compare_bottom:
            expected.pop()  # a process's first frame: no caller to compare
        frame, stack = _frame(pc, regs, cpsr, vfp), emulator.stack(regs[13])
        if deferred:
            run.walk(number, pc, deferred, frame, stack, expected, bool(in_flight))
        if observe is not None and (wanted is None or pc in wanted):
            observe(ObservedStop(pc, frame, stack, tuple(expected)))

    # The kernel calls `slow` at the stops observed (only at `wanted`, when given) and where a walk deferred.
    observe_all = observe is not None and (wanted is None or bool(wanted))
    tracer = kernel.Tracer(emulator.engine(program.uses_vfp), stop_kernel and stop_kernel.verifier,
                           emulator.placement.sentinel, program.uses_vfp, every, *shard, run.ids, slow,
                           observe_all, compare_bottom, raise_entries(program), quiet_ranges(program),
                           resumes, tuple(sorted(wanted or ())))
    cap = run.log_cap
    try:
        result.result = emulator.call_traced(program.entry, tracer, limits, program.args, cap)
    finally:  # the stops before a fault count too
        result.stops = tracer.stops
        causes = [run.kernel_cause(stop_kernel, index, abi.answer(answer), culprit)
                  for index, answer, culprit in tracer.causes()]
        tally = run.tally()
        for where, cause, stops in tracer.tally():
            tally[(run.wheres[where], causes[cause])] += stops
        result.failure_tally = tally
        # Each side logged its first `cap` answers: the first `cap` of both merged are the run's.
        result.failure_log = FailureLog(lambda count: tracer.failure_log(run.wheres, causes, run.log.entries(), count, cap),
                                        truncated=logged_failures(tally) > cap)
        if stop_kernel is not None:
            classes = {number: key for key, number in run.stop_classes.items()}
            for stop_class, index, passes in stop_kernel.passes():
                result.counts[(unwinders[index].name, *classes[stop_class], None)] += passes
            result.methods.update(stop_kernel.chain_frames())
    return tracer.resumed()


def _checker(emulator: Emulator, run: Verification, result: ProgramResult, observe, every: int,
             shard: tuple[int, int]) -> Callable:
    """check(pc, regs, cpsr, vfp, shadow frames, in flight): verify every unwinder at one
    stop of the Python hook, if it is one of those to verify (regs: r0-r14
    at least)."""
    every_walk = range(len(run.walks))
    seen = 0
    shard_index, shard_count = shard

    def check(pc: int, regs, cpsr: int, vfp, frames: list[ShadowFrame], in_flight: bool) -> None:
        nonlocal seen
        number = seen
        seen += 1
        if number % every or (number // every) % shard_count != shard_index:
            return
        result.stops += 1
        if not every_walk and observe is None:
            return  # ground truth alone
        expected = frames[::-1] if emulator.system is None else frames[:0:-1]  # a process's first frame: no caller
        frame, stack = _frame(pc, regs, cpsr, vfp), emulator.stack(regs[13])
        run.walk(number, pc, every_walk, frame, stack, expected, in_flight)
        if observe is not None:
            observe(ObservedStop(pc, frame, stack, tuple(expected)))

    return check


def decode(code: bytes, thumb: bool) -> tuple[int, int, bool, int, bytes, int]:
    """What ground truth needs of the instruction `code` in its state: (call
    length, IT block length, a return-kind instruction, its size, first
    half-word, condition: an ARM instruction's, 0xE in Thumb where IT
    decides). C twin: trace.c: decoded()."""
    if not thumb:
        return arm_call_length(code), 0, arm_return_kind(code), 4, code[:2], code[3] >> 4 if len(code) > 3 else 0xE
    return call_length(code), it_block_length(code), return_kind(code), instruction_size(code), code[:2], 0xE


def _run_in_python(program: Program, emulator: Emulator, run: Verification, result: ProgramResult,
                   limits: abi.Limits, observe, every: int, shard: tuple[int, int],
                   resumes: bytes | None = None) -> bytes:
    """The Python hook, the reference csrc/trace.c mirrors, guards included
    (the emulator checks the instruction budget, the clock and memory; the
    hook, in the same order as trace.c, an endless self-loop and the depth);
    the frames that resumed (a bit per serial)."""
    decoded_at: dict[tuple[int, bool], tuple] = {}  # (pc, Thumb) -> decode(...)
    it_blocks = SkippedStops(lambda address: instruction_size(emulator.code(address, 4)))
    uses_vfp, max_depth = program.uses_vfp, limits.depth
    check = _checker(emulator, run, result, observe, every, shard)
    shadow: ShadowStack | None = None
    last: tuple = (None, None)  # pc and registers of the stop before

    def on_stop(pc: int) -> None:
        nonlocal shadow, last
        if uses_vfp:
            regs = emulator.registers_and_vfp()
            vfp = tuple(regs[17:])
        else:
            regs, vfp = emulator.registers(), None
        if pc == last[0] and regs == last[1]:
            raise EmulationFault(pc, guard_cause(abi.GUARD_SELF_LOOP, limits))
        last = pc, regs
        if shadow is None:  # first stop: the harness's own call into the entry
            shadow = ShadowStack(ShadowFrame(emulator.placement.sentinel, regs[13], tuple(regs[4:12]), vfp),
                                 frozenset(raise_entries(program)), resumes)
        else:
            shadow.observe(pc, regs[13])
        if len(shadow.frames) > max_depth:
            raise EmulationFault(pc, guard_cause(abi.GUARD_DEPTH, limits))
        for skipped, state in it_blocks.passed_over(pc):
            check(skipped, regs, with_it_state(regs[16], state), vfp, shadow.frames, shadow.in_flight)
        check(pc, regs, regs[16], vfp, shadow.frames, shadow.in_flight)
        thumb = bool(regs[16] & 0x20)
        decoded = decoded_at.get((pc, thumb))
        if decoded is None:
            decoded = decoded_at[(pc, thumb)] = decode(emulator.code(pc, 4), thumb)
        if decoded[2]:
            shadow.before_return(pc, decoded[3])
        if decoded[0] and executes(decoded[5], regs[16]):
            shadow.before(pc, decoded[0], regs, vfp)
        if decoded[1]:
            it_blocks.entered(pc, int.from_bytes(decoded[4], "little"), decoded[1])

    try:
        result.result = emulator.call(program.entry, on_stop, limits, program.args)
    finally:
        result.failure_tally = run.tally()
        result.failure_log = FailureLog(entries=[entry for _, _, entry in run.log.entries()],
                                        truncated=logged_failures(result.failure_tally) > run.log_cap)
    return bytes(shadow.resumed) if shadow is not None else b""
