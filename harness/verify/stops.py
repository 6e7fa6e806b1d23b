"""The per-stop loop: run a program, and before every instruction let each
unwinder walk the whole stack; compare every frame with the shadow stack.

The verifier knows the unwinders only through `step`; expected values come
from the shadow stack alone (harness.groundtruth), never from unwind tables.
"""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, NamedTuple, Sequence

from harness.verify import kernel
from harness.verify.emulator import SENTINEL, EmulationFault, Emulator
from harness.errors import UnwindFailure
from harness.registers import DWARF_D0, PC, SP, reg_name
from harness.unwind.frame import Frame
from harness.thumb.encoding import call_length, instruction_size, it_block_length, with_it_state
from harness.verify.groundtruth import ShadowFrame, ShadowStack, SkippedStops, unpacked
from harness.classify import Classifier, Where
from harness.program import Program
from harness.unwind.walk import ALL_CALLEE_SAVED, Restores, Unwinder

DEFAULT_BUDGET = 20_000_000  # instructions per program before it counts as runaway
VFP_NONE = (None,) * 8
D_TAIL = (None,) * 16


class Failure(NamedTuple):
    """One failing stop of one unwinder (a tuple: a run makes many)."""

    unwinder: str
    stop: int  # the stop's sequence number in the program's run (verified or not)
    pc: int
    function: str  # innermost function at the stop
    position: str
    kind: str
    frame: int  # the frame whose unwind went wrong (0: the innermost)
    culprit: str  # the function that frame is in
    register: str | None  # for wrong_register
    detail: str
    culprit_traits: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ObservedStop:
    """What a verified stop looked like: registers, the stack reader, and the
    shadow frames, innermost first (the expected callers)."""

    pc: int
    frame: Frame
    stack: object  # the emulator's live stack reader, valid during the call only
    expected: tuple[ShadowFrame, ...]


class FailureCause(NamedTuple):
    """What a failing walk says apart from the stop it failed at: one is
    shared by every stop where an unwinder fails alike."""

    unwinder: str
    kind: str
    frame: int
    culprit: str
    register: str | None
    detail: str
    culprit_traits: frozenset[str]


class FailureLog:
    """A run's failures in stop order, each (stop, pc, where, cause, values):
    where and cause shared between stops, values (got, expected) of a
    mismatch, worded only when needed (the cause's detail is then empty).
    Built on demand: a run may fail at every stop for several unwinders,
    while its report reads only the tally and the first few of each."""

    def __init__(self, build: Callable[[int], list] | None = None, entries: list | None = None):
        self._build = build  # build(at most this many per unwinder, 0: all) -> entries
        self._entries = entries

    def entries(self) -> list:
        if self._entries is None:
            self._entries = self._build(0) if self._build else []
        return self._entries

    def __iter__(self):
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self.entries())

    def first(self, count: int) -> list:
        """The first `count` failures of each unwinder, in stop order."""
        if self._entries is None and self._build is not None:
            return self._build(count)
        seen: Counter = Counter()
        kept = []
        for entry in self.entries():
            seen[entry[3].unwinder] += 1
            if seen[entry[3].unwinder] <= count:
                kept.append(entry)
        return kept


@dataclass
class ProgramResult:
    program: str
    stops: int = 0
    # (unwinder, traits, position, failure kind or None for a pass) -> stops
    counts: Counter = field(default_factory=Counter)
    failure_log: FailureLog = field(default_factory=FailureLog)
    # (where, cause) -> failing stops: what counts and summaries need.
    failure_tally: Counter = field(default_factory=Counter)
    result: int | None = None
    expected: int | None = None
    fault: str | None = None

    @property
    def failures(self) -> list[Failure]:
        return [failure_of(*entry) for entry in self.failure_log]

    @property
    def self_check_ok(self) -> bool:
        return self.fault is None and (self.expected is None or self.result == self.expected)


def failure_of(stop: int, pc: int, where: Where, cause: FailureCause, values: tuple[int, int] | None) -> Failure:
    """The full record of one entry of a failure log."""
    detail = cause.detail if values is None else worded(cause.kind, cause.register, *values)
    return Failure(cause.unwinder, stop, pc, where[0], where[2], cause.kind, cause.frame, cause.culprit,
                   cause.register, detail, cause.culprit_traits)


def mismatch_of(register: int) -> tuple[str, str | None]:
    """(kind, register name) of a wrong `register`: PC, SP, 4-11, or
    DWARF_D0 + 8-15 for d8-d15."""
    if register == PC:
        return "wrong_pc", None
    if register == SP:
        return "wrong_sp", None
    return "wrong_register", reg_name(register)


def worded(kind: str, name: str | None, got: int, want: int) -> str:
    """The detail of a mismatch (kind and register name from `mismatch_of`)."""
    label = "pc" if kind == "wrong_pc" else "sp" if kind == "wrong_sp" else name
    return f"{label} {got:#x}, expected {want:#x}"


def difference(register: int, got: int, want: int) -> tuple[str, str | None, str]:
    """(kind, register name, detail) for a caller frame whose `register`
    holds `got` instead of `want`."""
    kind, name = mismatch_of(register)
    return kind, name, worded(kind, name, got, want)


def compare(caller: Frame, expected: ShadowFrame,
            restores: Restores = ALL_CALLEE_SAVED) -> tuple[str, str | None, str] | None:
    """(kind, register, detail) for the first difference, or None. Registers
    are compared where the unwinder claims to restore them."""
    if caller.pc != expected.pc:
        return difference(PC, caller.pc, expected.pc)
    if caller.sp != expected.sp:
        return difference(SP, caller.sp, expected.sp)
    got = caller.r[4:12]
    if got != expected.callee_saved:
        for reg in restores.core:
            value, want = got[reg - 4], expected.callee_saved[reg - 4]
            if value != want:
                return difference(reg, value, want)
    if expected.vfp is not None and restores.vfp:
        got = caller.d[8:16]
        if got != expected.vfp:  # unknown (None) values are not compared
            for index, (value, want) in enumerate(zip(got, expected.vfp)):
                if value is not None and value != want:
                    return difference(DWARF_D0 + 8 + index, value, want)
    return None


def kernel_outcome(stop_kernel: kernel.StopKernel, index: int, answer: tuple):
    """A failing kernel answer for unwinder `index`, as unwind_and_compare words it."""
    if answer[1] == kernel.MISMATCH:
        return (answer[0], *difference(*answer[2:5]))
    if answer[1] == kernel.GUARD_FAILS:
        return (answer[0], *stop_kernel.guard_failure(*answer[2:6]))
    return (answer[0], *stop_kernel.failure(answer[2]))


def without_scratch(frame: Frame) -> Frame:
    """r0-r3 and r12 are caller-saved: in a caller frame they hold nothing the
    caller relies on. They are cleared before the walk goes on, so that no
    unwinder can lean on leftovers of the innermost function."""
    r = frame.r
    return Frame(r=(0, 0, 0, 0) + r[4:12] + (0,) + r[13:], d=frame.d)


def restores_of(unwinder: Unwinder) -> Restores:
    return getattr(unwinder, "restores", ALL_CALLEE_SAVED)


def unwind_and_compare(unwinder: Unwinder, frame: Frame, stack, expected: Sequence[ShadowFrame],
                       first: int = 0):
    """None if every frame matches, else (frame index, kind, register, detail)."""
    restores = restores_of(unwinder)
    for index, want in enumerate(expected, first):
        try:
            caller = unwinder.step(frame, stack, index == 0)
        except UnwindFailure as failure:
            return index, failure.kind, None, failure.reason
        mismatch = compare(caller, want, restores)
        if mismatch is not None:
            return (index, *mismatch)
        frame = without_scratch(caller)
    return None


@dataclass(frozen=True)
class _Proven:
    """A walk from some caller frame that matched the shadow stack all the way
    down, and the stack contents it depended on: the region from the first to
    the last line it read, as it was (one comparison instead of one per line;
    a change in the lines between, the locals of outer frames, only costs a
    re-walk, never a wrong answer)."""

    lowest: int  # lowest address it examined
    start: int
    region: bytes

    def holds(self, stack) -> bool:
        """Would the walk read the same bytes, and find its addresses inside the stack?"""
        return stack.low <= self.lowest and stack.region(self.start, len(self.region)) == self.region


@dataclass(frozen=True)
class _ProvenLines:
    """The same, for a walk whose lines lie far apart (frames of a megabyte):
    kept line by line."""

    lowest: int
    lines: tuple[tuple[int, bytes], ...]

    def holds(self, stack) -> bool:
        return stack.low <= self.lowest and all(stack.line(a) == data for a, data in self.lines)


REGION_LIMIT = 2048  # bytes: a larger region is compared line by line


def _proof(stack, lowest: int, touched: set[int]) -> _Proven | _ProvenLines:
    first, last = min(touched, default=lowest), max(touched, default=lowest)
    size = last + stack.LINE - first
    if size <= REGION_LIMIT:
        return _Proven(lowest, first, stack.region(first, size))
    return _ProvenLines(lowest, tuple((a, stack.line(a)) for a in sorted(touched)))


class MemoizedWalk:
    """Exactly the result of unwind_and_compare, without re-walking the outer
    frames at every stop.

    The walk from frame 1 on is a pure function of that frame's registers,
    the stack bytes it reads, whether its addresses are inside the stack, and
    the shadow frames it is compared with. So a walk that matched is reused
    when the same caller frame is reached under the same shadow frame, the
    stack bytes it read are unchanged, and the stack's low bound still
    admits every address it examined. Walks that fail are never reused.
    (Not "unwritten since": unicorn 2.1.4 mis-steps IT blocks whose stores
    trigger a memory-write hook, so the harness installs none.)
    """

    def __init__(self, unwinder: Unwinder):
        self.unwinder = unwinder
        self.restores = restores_of(unwinder)
        self.proven: dict[tuple[int, Frame], _Proven | _ProvenLines] = {}

    def __call__(self, frame: Frame, stack, expected: Sequence[ShadowFrame]):
        unwinder = self.unwinder
        try:
            caller = unwinder.step(frame, stack, True)
        except UnwindFailure as failure:
            return 0, failure.kind, None, failure.reason
        mismatch = compare(caller, expected[0], self.restores)
        if mismatch is not None:
            return (0, *mismatch)
        if len(expected) == 1:
            return None
        caller = without_scratch(caller)
        key = (expected[0].serial, caller)
        proof = self.proven.get(key)
        if proof is not None and proof.holds(stack):
            return None
        stack.start_recording()
        try:
            outcome = unwind_and_compare(unwinder, caller, stack, expected[1:], first=1)
        finally:
            lowest, touched = stack.stop_recording()
        if outcome is None:
            self.proven[key] = _proof(stack, lowest, touched)
        return outcome


class _Verification:
    """One program's verification, whichever hook drives it: the verdicts of
    walks in Python, and the causes of the kernel's failing answers."""

    def __init__(self, program: Program, unwinders: Sequence[Unwinder], memoize: bool, result: ProgramResult):
        self.classify = Classifier(program.function_at)
        self.names = [u.name for u in unwinders]
        self.walks = [MemoizedWalk(u) if memoize else partial(unwind_and_compare, u) for u in unwinders]
        self.counts = result.counts
        self.stop_classes: dict[tuple[frozenset[str], str], int] = {}  # (traits, position) -> the kernel's tally
        self.wheres: list[Where] = []  # by the id the kernel knows them by
        self._where_ids: dict[Where, int] = {}
        self.log: list[tuple[int, int, tuple]] = []  # (stop, unwinder index, failure log entry) of walks in Python

    def ids(self, pc: int) -> tuple[int, int, int, int]:
        """(stop class, where id) of pc, for the kernel, and the pcs [low,
        high) that share them."""
        where, low, high = self.classify.span(pc)
        where_id = self._where_ids.get(where)
        if where_id is None:
            where_id = self._where_ids[where] = len(self.wheres)
            self.wheres.append(where)
        return self.stop_classes.setdefault((where[1], where[2]), len(self.stop_classes)), where_id, low, high

    def failure_cause(self, unwinder: str, outcome: tuple, frame_pc: int) -> FailureCause:
        """The cause of a failing walk (frame, kind, register, detail) whose
        wrong frame is at frame_pc, with the function it is in (a caller's
        pc is a return address: its call lies one byte before)."""
        frame_index, kind, register, detail = outcome
        culprit, culprit_traits, _ = self.classify(frame_pc if frame_index == 0 else frame_pc - 1)
        return FailureCause(unwinder, kind, frame_index, culprit, register, detail, culprit_traits)

    def kernel_cause(self, stop_kernel: kernel.StopKernel, index: int, answer: tuple, culprit: int) -> FailureCause:
        """The cause of the kernel's failing `answer` for unwinder `index`; a
        mismatch's is shared wherever the wrong frame is in the same function
        (`culprit`, a where id), its values given apart."""
        if answer[1] == kernel.MISMATCH:
            frame_index, _, register = answer[:3]
            function, traits, _ = self.wheres[culprit]
            kind, register_name = mismatch_of(register)
            return FailureCause(self.names[index], kind, frame_index, function, register_name, "", traits)
        return self.failure_cause(self.names[index], kernel_outcome(stop_kernel, index, answer), answer[-1])

    def walk(self, number: int, pc: int, indices, frame: Frame, stack, expected: Sequence[ShadowFrame]) -> None:
        """The unwinders `indices` walk the stop in Python."""
        where = self.classify(pc)
        for index in indices:
            outcome = self.walks[index](frame, stack, expected)
            if outcome is None:
                self.counts[(self.names[index], where[1], where[2], None)] += 1
                continue
            cause = self.failure_cause(self.names[index], outcome,
                                       pc if outcome[0] == 0 else expected[outcome[0] - 1].pc)
            self.log.append((number, index, (number, pc, where, cause, None)))


def _frame(pc: int, regs, cpsr: int, vfp) -> Frame:
    return Frame(r=tuple(regs[:15]) + (pc,), d=(None,) * 8 + (vfp or VFP_NONE) + D_TAIL, cpsr=cpsr)


def verify_program(program: Program, unwinders: Sequence[Unwinder],
                   budget: int = DEFAULT_BUDGET, memoize: bool = True,
                   observe: Callable[[ObservedStop], None] | None = None,
                   every: int = 1, shard: tuple[int, int] = (0, 1),
                   compiled: bool | None = None) -> ProgramResult:
    """Run `program`, verifying every unwinder at every stop (or at every
    `every`-th: the shadow stack still follows every instruction). With
    `shard` (I, N), only the I-th of every N of those stops is verified, so
    that N runs split the work and together verify each stop once.

    `compiled` (default: when built) runs the compiled hook (harness.kernel):
    the shadow stack and every walk the rules answer in C, each unwinder's
    Python step only where they defer; `compiled=False` runs the hook in
    Python, every walk by `step`. `memoize=False` (Python hook only)
    re-walks every frame at every stop (for checking that the memo changes
    nothing); `observe` sees each verified stop.
    """
    if compiled is None:
        compiled = memoize and kernel.AVAILABLE
    elif compiled and not kernel.AVAILABLE:
        raise RuntimeError("compiled=True, but the compiled kernel (harness/verify/csrc) is not built")
    emulator = Emulator(program.segments)
    result = ProgramResult(program.name, expected=program.expected_result)
    run = _Verification(program, unwinders, memoize, result)
    collecting = gc.isenabled()
    # The per-stop loop allocates much and keeps little, so the collector
    # would mostly rescan the long-lived tables: a fifth of the run time.
    gc.disable()
    try:
        try:
            if compiled:
                _run_compiled(program, unwinders, emulator, run, result, budget, observe, every, shard)
            else:
                _run_in_python(program, emulator, run, result, budget, observe, every, shard)
        except EmulationFault as fault:
            result.fault = str(fault)
        for (where, cause), stops in result.failure_tally.items():
            result.counts[(cause.unwinder, where[1], where[2], cause.kind)] += stops
    finally:
        if collecting:
            gc.enable()
    return result


def _run_compiled(program: Program, unwinders: Sequence[Unwinder], emulator: Emulator, run: _Verification,
                  result: ProgramResult, budget: int, observe, every: int, shard: tuple[int, int]) -> None:
    stop_kernel = kernel.StopKernel(unwinders, *emulator.stack_memory) if unwinders else None
    shadow_frames: dict[int, ShadowFrame] = {}  # serial -> frame, unpacked once

    def slow(number: int, pc: int, regs, cpsr: int, vfp, deferred, packed_shadow: bytes, serials) -> None:
        """A stop where a walk deferred, or every stop when observed."""
        expected = []
        for index in range(len(serials) - 1, -1, -1):  # innermost first
            frame = shadow_frames.get(serials[index])
            if frame is None:
                frame = shadow_frames[serials[index]] = unpacked(packed_shadow, index, serials[index])
            expected.append(frame)
        frame, stack = _frame(pc, regs, cpsr, vfp), emulator.stack(regs[13])
        if deferred:
            run.walk(number, pc, deferred, frame, stack, expected)
        if observe is not None:
            observe(ObservedStop(pc, frame, stack, tuple(expected)))

    tracer = kernel.Tracer(emulator.engine(program.uses_vfp), stop_kernel and stop_kernel.verifier, SENTINEL,
                           program.uses_vfp, every, *shard, run.ids, slow, observe is not None)
    try:
        result.result = emulator.call_traced(program.entry, tracer, budget, program.args)
    finally:  # the stops before a fault count too
        result.stops = tracer.stops
        causes = [run.kernel_cause(stop_kernel, *found) for found in tracer.causes()]
        result.failure_log = FailureLog(partial(tracer.failure_log, run.wheres, causes, run.log))
        tally = Counter((entry[2], entry[3]) for _, _, entry in run.log)
        for where, cause, stops in tracer.tally():
            tally[(run.wheres[where], causes[cause])] += stops
        result.failure_tally = tally
        if stop_kernel is not None:
            classes = {number: key for key, number in run.stop_classes.items()}
            for stop_class, index, passes in stop_kernel.passes():
                result.counts[(unwinders[index].name, *classes[stop_class], None)] += passes


def _run_in_python(program: Program, emulator: Emulator, run: _Verification, result: ProgramResult,
                   budget: int, observe, every: int, shard: tuple[int, int]) -> None:
    decoded_at: dict[int, tuple[int, int, bytes]] = {}  # pc -> (call length, IT block length, first half-word)
    it_blocks = SkippedStops(lambda address: instruction_size(program.code(address, 4)))
    uses_vfp = program.uses_vfp
    every_walk = range(len(run.walks))
    shadow: ShadowStack | None = None
    seen = 0
    shard_index, shard_count = shard

    def check(pc: int, regs, cpsr: int, vfp) -> None:
        """Verify every unwinder at one stop (regs: r0-r14 at least)."""
        nonlocal seen
        number = seen
        seen += 1
        if number % every or (number // every) % shard_count != shard_index:
            return
        result.stops += 1
        if not every_walk and observe is None:
            return  # ground truth alone
        frame, stack, expected = _frame(pc, regs, cpsr, vfp), emulator.stack(regs[13]), shadow.frames[::-1]
        run.walk(number, pc, every_walk, frame, stack, expected)
        if observe is not None:
            observe(ObservedStop(pc, frame, stack, tuple(expected)))

    def on_stop(pc: int) -> None:
        nonlocal shadow
        if uses_vfp:
            regs = emulator.registers_and_vfp()
            vfp = tuple(regs[17:])
        else:
            regs, vfp = emulator.registers(), None
        if shadow is None:  # first stop: the harness's own call into the entry
            shadow = ShadowStack(ShadowFrame(SENTINEL, regs[13], tuple(regs[4:12]), vfp))
        else:
            shadow.observe(pc, regs[13])
        for skipped, state in it_blocks.passed_over(pc):
            check(skipped, regs, with_it_state(regs[16], state), vfp)
        check(pc, regs, regs[16], vfp)
        decoded = decoded_at.get(pc)
        if decoded is None:
            code = program.code(pc, 4)
            decoded = decoded_at[pc] = (call_length(code), it_block_length(code), code[:2])
        if decoded[0]:
            shadow.before(pc, decoded[0], regs, vfp)
        if decoded[1]:
            it_blocks.entered(pc, int.from_bytes(decoded[2], "little"), decoded[1])

    try:
        result.result = emulator.call(program.entry, on_stop, budget, program.args)
    finally:
        result.failure_log = FailureLog(entries=[entry for _, _, entry in run.log])
        result.failure_tally = Counter((entry[2], entry[3]) for entry in result.failure_log)
