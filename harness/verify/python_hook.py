"""The Python hook: the reference the compiled tracer (csrc/trace_hooks.c)
mirrors, and what the two kinds of run share (the run's parts, a stop as
an observer sees it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

from harness import abi
from harness.emulation.emulator import Emulator
from harness.emulation.guards import EmulationFault, guard_cause
from harness.emulation.process_machine import RunEvents
from harness.program import Program
from harness.thumb.encoding import executes, instruction_size, with_it_state
from harness.unwind.frame import Frame
from harness.unwind.walk import Unwinder
from harness.verify.failures import FailureLog, ProgramResult
from harness.verify.groundtruth import Decoded, ShadowFrame, ThreadStacks, decode, raise_entries
from harness.verify.sampling import chooser
from harness.verify.tally import Tally
from harness.verify.verification import Verification

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


def frame_of(pc: int, regs, cpsr: int, vfp) -> Frame:
    return Frame(r=tuple(regs[:15]) + (pc,), d=(None,) * 8 + (vfp or VFP_NONE) + D_TAIL, cpsr=cpsr)


class RunParts(NamedTuple):
    """One verified run's parts, as the hooks' runs share them."""

    program: Program
    unwinders: Sequence[Unwinder]
    emulator: Emulator
    verification: Verification
    result: ProgramResult
    limits: abi.Limits  # as the guards apply them (clocked)
    every: int
    shard: tuple[int, int]
    by_blocks: bool  # the compiled hook follows the shadow stack from translation blocks' entries


def _checker(emulator: Emulator, run: Verification, result: ProgramResult, observe, every: int,
             shard: tuple[int, int]) -> Callable:
    """check(pc, regs, cpsr, vfp, shadow frames, stop state): verify every unwinder at one
    stop of the Python hook, if it is one of those to verify (regs: r0-r14
    at least)."""
    every_walk = range(len(run.walks))
    seen = 0
    verified = chooser(every, shard)

    def check(pc: int, regs, cpsr: int, vfp, frames: list[ShadowFrame], state: int, thread: int) -> None:
        nonlocal seen
        number = seen
        seen = result.instructions = seen + 1
        if not verified(number):
            return
        result.stops += 1
        if not every_walk and observe is None:
            return  # ground truth alone
        expected = frames[::-1] if emulator.system is None else frames[:0:-1]  # a process's first frame: no caller
        frame, stack = frame_of(pc, regs, cpsr, vfp), emulator.stack(regs[13])
        run.walk(number, pc, every_walk, frame, stack, expected, state, thread)
        if observe is not None:
            observe(ObservedStop(pc, frame, stack, tuple(expected)))

    return check


def run_in_python(parts: RunParts, observe=None, resumes: bytes | None = None) -> bytes:
    """The Python hook, the reference the compiled tracer mirrors, guards
    included (the emulator checks the instruction budget, the clock and
    memory; the hook, in the same order as csrc/trace_hooks.c, an endless
    self-loop and the depth); the frames that resumed (a bit per serial)."""
    program, emulator, run, result, limits = parts.program, parts.emulator, parts.verification, parts.result, \
        parts.limits
    decoded_at: dict[tuple[int, bool], Decoded] = {}  # (pc, Thumb) -> decode(...)
    threads = ThreadStacks(lambda address: instruction_size(emulator.code(address, 4)),
                           frozenset(raise_entries(program)), resumes)
    uses_vfp, max_depth = program.uses_vfp, limits.depth
    check = _checker(emulator, run, result, observe, parts.every, parts.shard)
    last: tuple = (None, None)  # pc and registers of the stop before

    def on_stop(pc: int) -> None:
        nonlocal last
        if uses_vfp:
            regs = emulator.registers_and_vfp()
            vfp = tuple(regs[17:])
        else:
            regs, vfp = emulator.registers(), None
        last_pc, last_regs = last
        if pc == last_pc and regs == last_regs and emulator.deadline is None:  # (a timer, a thread may end it)
            raise EmulationFault(pc, guard_cause(abi.GUARD_SELF_LOOP, limits))
        last = pc, regs
        shadow = threads.shadow
        if shadow is None:  # the thread's first stop
            shadow = threads.start(emulator.placement.sentinel, regs, vfp)
        else:
            shadow.observe(pc, regs[13])
        if len(shadow.frames) > max_depth:
            raise EmulationFault(pc, guard_cause(abi.GUARD_DEPTH, limits))
        inside = emulator.deadline is not None and threads.it_blocks.at(pc).inside
        for skipped, state in threads.it_blocks.passed_over(pc):
            check(skipped, regs, with_it_state(regs[16], state), vfp, shadow.frames, shadow.state, shadow.thread)
        if not inside and emulator.expired():  # a timer or a time slice ended: the engine goes on elsewhere
            return
        check(pc, regs, regs[16], vfp, shadow.frames, shadow.state, shadow.thread)
        thumb = bool(regs[16] & 0x20)
        decoded = decoded_at.get((pc, thumb))
        if decoded is None:
            decoded = decoded_at[(pc, thumb)] = decode(emulator.code(pc, 4), thumb)
        if decoded.returns:
            shadow.before_return(pc, decoded.size)
        if decoded.call_length and executes(decoded.condition, regs[16]):
            shadow.before(pc, decoded.call_length, regs, vfp)
        if decoded.it_length:
            threads.it_blocks.entered(pc, int.from_bytes(decoded.first_halfword, "little"), decoded.it_length)

    emulator.follow(RunEvents(lambda: result.instructions, lambda context: threads.interrupted(context, uses_vfp),
                              lambda switch: threads.switch(switch.left, switch.tid),
                              lambda pc, data: threads.faulted(pc, emulator.registers()[13], data), True,
                              lambda deadline, expire: None, lambda ceiling: None))  # the hook asks the emulator
    try:
        result.result = emulator.call(program.entry, on_stop, limits, program.args)
    finally:
        result.tally = Tally.of(run.tally())
        result.failure_log = FailureLog(entries=[entry for _, _, entry in run.log.entries()],
                                        truncated=result.tally.logged() > run.log_cap)
    return threads.resumed()
