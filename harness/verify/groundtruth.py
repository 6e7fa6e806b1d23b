"""The shadow call stack: what every unwinder must reproduce, recorded from
execution alone (ARCHITECTURE.md, "Ground truth").

- A call (BL, BLX immediate or register) at A with length n that executes
  (its condition holds) pushes a frame: return pc A + n, sp at the call,
  the caller's r4-r11 (and d8-d15 when the program uses VFP) at that
  moment; even when the callee starts at A + n (a call to a function that
  never returns, as the last instruction before that callee).
- A plain branch into another function (tail call) pushes nothing.
- A return that lands on the top frame's return pc with sp equal to its sp
  pops it.
- NON_LOCAL_EXIT (longjmp, a C++ exception reaching its landing pad):
  the sp rises above the sp of frames still on the shadow stack. Every
  frame whose sp lies below the new sp is gone and dropped; and a taken
  return-kind instruction (harness.thumb.encoding.return_kind: bx lr,
  pop {pc}...) that lands with sp equal to the top frame's sp pops it even
  away from its return pc (longjmp returns to setjmp's caller, libgcc
  restores the landing pad's registers with a pop {pc}, both with the
  sp of the frame they land in).
- A process's first frame (harness.linux) has no caller: its bottom
  frame stands for that and is never compared.
- SIGNAL_FRAME: a signal handler is entered with no call; its caller is the
  context the signal interrupted, at that pc exactly (not a return address)
  with its sp and registers, pushed as the handler starts. The handler
  returns to a trampoline, whose sigreturn restores that pc and sp and so
  pops it; a siglongjmp out of the handler drops it as longjmp drops frames.
- A frame that never resumes (its callee exits the process, or a longjmp
  or an exception unwinds past it: it is never popped by a return) has
  no use for its callee-saved registers: nothing reads them again, and a
  callee that never returns need not keep them (GCC's noreturn functions
  and glibc's __libc_start_call_main don't). An earlier run of the same
  program tells which frames resume (`resumed`, a bit per serial); its
  pc and sp are compared, its registers are not.

An exception is in flight (stops get the cxx_exception trait) from the
first instruction of an entry point that raises one (RAISE_ENTRIES:
__cxa_throw, _Unwind_Resume...; reached by a call, through a PLT stub or by
a tail call) until the shadow stack drops the frame that was on top there:
at the landing pad (a NON_LOCAL_EXIT), or when the call returns (a forced
unwind that found no handler).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from harness import abi
from harness.program import Program
from harness.thumb.encoding import (
    arm_call_length,
    arm_return_kind,
    call_length,
    instruction_size,
    it_advance,
    it_block_length,
    return_kind,
)

# The entry points that start an exception's unwinding: libstdc++'s throw
# and rethrow, libgcc's raise, resume (from a cleanup landing pad) and
# forced unwind (thread exit and cancellation).
RAISE_ENTRIES = ("__cxa_throw", "__cxa_rethrow", "_Unwind_RaiseException", "_Unwind_Resume",
                 "_Unwind_Resume_or_Rethrow", "_Unwind_ForcedUnwind")


def raise_entries(program: Program) -> tuple[int, ...]:
    """The addresses of the RAISE_ENTRIES among the symbols of the
    program's modules, sorted (none in a program without modules)."""
    found = {start for span in program.modules for start, _end, name in span.symbols if name in RAISE_ENTRIES}
    return tuple(sorted(found))


@dataclass(frozen=True)
class ShadowFrame:
    pc: int  # return address, Thumb bit clear
    sp: int
    callee_saved: tuple[int, ...]  # r4-r11
    vfp: tuple[int, ...] | None  # d8-d15, or None when the program uses no VFP
    serial: int = 0  # unique per push: identifies this frame and everything below it
    resumes: bool = True  # False: the caller never runs again, its registers are not compared
    signal: bool = False  # the context a signal handler interrupted (SIGNAL_FRAME)


class SkippedStops:
    """Unicorn runs no code hook before an instruction an IT block skips, yet
    a profiler can sample there. This tracks IT blocks and names the
    instructions passed over without a stop, with the IT state each would
    have had; everything else is as at the next stop (a skipped instruction
    changes nothing)."""

    def __init__(self, size_at):
        self._size_at = size_at  # address -> instruction size
        self._pending: list[tuple[int, int]] = []  # (address, ITSTATE)
        self._end = 0

    def at(self, pc: int) -> tuple[bool, int]:
        """Is pc one of the block's own instructions; and how many of them
        are passed over before it (not counted yet). C twin: it_position."""
        addresses = [address for address, _ in self._pending]
        if pc in addresses:
            return True, addresses.index(pc)
        return False, len(addresses) if addresses and pc == self._end else 0

    def passed_over(self, pc: int) -> list[tuple[int, int]]:
        """(address, ITSTATE) of block instructions skipped before reaching
        `pc`. Call at every stop."""
        pending = self._pending
        if not pending:
            return []
        addresses = [address for address, _ in pending]
        if pc in addresses or pc == self._end:
            index = addresses.index(pc) if pc in addresses else len(pending)
            skipped, self._pending = pending[:index], pending[index + 1 :]
            return skipped
        self._pending = []  # a branch inside the block left it
        return []

    def entered(self, pc: int, it_instruction: int, block: int) -> None:
        """The instruction at pc is IT (`it_instruction`, its half-word)
        governing `block` instructions."""
        state = it_instruction & 0xFF  # firstcond:mask is ITSTATE for the first
        address = pc + 2
        pending = []
        for _ in range(block):
            pending.append((address, state))
            address += self._size_at(address)
            state = it_advance(state)
        self._pending, self._end = pending, address


_PACKED = abi.EXPECTED.struct


def has_bit(bits: bytes, serial: int) -> bool:
    return serial // 8 < len(bits) and bool(bits[serial // 8] >> (serial % 8) & 1)


def set_bit(bits: bytearray, serial: int) -> None:
    if serial // 8 >= len(bits):
        bits.extend(bytes(serial // 8 + 1 - len(bits)))
    bits[serial // 8] |= 1 << (serial % 8)


def packed(frame: ShadowFrame) -> bytes:
    """pc, sp, r4-r11, the state bits (abi.EXPECTED_STATES), d8-d15: abi.EXPECTED."""
    vfp = frame.vfp
    state = ((abi.VFP_KNOWN if vfp is not None else 0) | (0 if frame.resumes else abi.NEVER_RESUMES)
             | (abi.SIGNAL_FRAME if frame.signal else 0))
    return _PACKED.pack(frame.pc, frame.sp, *frame.callee_saved, state, *(vfp or (0,) * 8))


def unpacked(data: bytes, index: int, serial: int) -> ShadowFrame:
    """The `index`-th frame of packed frames (the inverse of `packed`)."""
    pc, sp, *rest = _PACKED.unpack_from(data, index * _PACKED.size)
    callee_saved, state, vfp = tuple(rest[:8]), rest[8], tuple(rest[9:])
    return ShadowFrame(pc, sp, callee_saved, vfp if state & abi.VFP_KNOWN else None, serial,
                       not state & abi.NEVER_RESUMES, bool(state & abi.SIGNAL_FRAME))


@dataclass
class Serials:
    """The last serial given: one count for every shadow stack of a process
    (a thread's each), so that a serial names one frame of the run."""

    last: int = 0

    def next(self) -> int:
        self.last += 1
        return self.last


class ThreadStacks:
    """The Python hook's ground truth for each thread of a process: its
    shadow stack and IT-block state, the running thread's in `shadow` and
    `it_blocks` (C twin: trace.c's ThreadShadow, Tracer.switch)."""

    def __init__(self, size_at, raises: frozenset[int], resumes: bytes | None):
        self._size_at, self._raises, self._resumes = size_at, raises, resumes
        self._serials = Serials()
        self._resumed = bytearray()
        self._parked: dict[int, tuple[ShadowStack | None, SkippedStops]] = {}  # tid -> those of threads not running
        self._switched = False
        self._running = 0  # the running thread's tid, once a switch named it
        self.shadow: ShadowStack | None = None  # None: before the running thread's first stop
        self.it_blocks = SkippedStops(size_at)

    def start(self, sentinel: int, regs, vfp) -> ShadowStack:
        """A thread's first stop: its outermost frame (no caller: the
        harness's own call into the entry, or clone's), serial 0 for the
        process's first thread, a new one for each later one."""
        serial = self._serials.next() if self._switched else 0
        self.shadow = ShadowStack(ShadowFrame(sentinel, regs[13], tuple(regs[4:12]), vfp, serial), self._raises,
                                  self._resumes, self._serials, self._resumed)
        self.shadow.thread = self._running if self._switched else 0
        return self.shadow

    def resumed(self) -> bytes:
        """The frames that resumed in every thread, a bit per serial."""
        return bytes(self._resumed)

    def interrupted(self, context, uses_vfp: bool) -> None:
        """A signal handler starts in the running thread: the context
        (harness.emulation.machine.Context) it interrupts is its caller."""
        vfp = tuple(context.d[8:16]) if uses_vfp else None
        self.shadow.interrupted(context.r[15], context.r[13], tuple(context.r[4:12]), vfp)

    def faulted(self, pc: int, sp: int, data: bool) -> None:
        """A fault's handler is about to start (Emulator): the running
        thread's shadow stack as at the fault. `data`: the instruction at pc
        faulted and did not complete: what it was about to do is dropped;
        else the fetch at pc faulted: the branch there completed, followed as
        at a stop at pc (C twin: Tracer.faulted)."""
        if self.shadow is None:
            return
        if data:
            self.shadow.cancel()
        else:
            self.shadow.observe(pc, sp)

    def switch(self, left: int, tid: int) -> None:
        """At a system call the processor goes from thread `left` to `tid`."""
        self._switched = True
        self._running = tid
        self._parked[left] = self.shadow, self.it_blocks
        self.shadow, self.it_blocks = self._parked.pop(tid, (None, SkippedStops(self._size_at)))


class ShadowStack:
    """Frames from the sentinel (bottom, index 0) to the innermost caller
    (harness/verify/csrc/trace.c keeps the same, packed, in the compiled hook)."""

    def __init__(self, bottom: ShadowFrame, raises: frozenset[int] = frozenset(), resumes: bytes | None = None,
                 serials: Serials | None = None, resumed: bytearray | None = None):
        self.frames: list[ShadowFrame] = [bottom]
        self._resumes = resumes  # from an earlier run: the frames that resume (resumed_bits)
        self.resumed = bytearray() if resumed is None else resumed  # this run's, a bit per serial (every thread's)
        self._pending: ShadowFrame | None = None
        self._return_fall_through: int | None = None
        self._serials = serials or Serials(bottom.serial)  # shared by the stacks of a process's threads
        self._raises = raises  # RAISE_ENTRIES' addresses
        self._flight = 0  # the depth when an exception was raised; 0: none in flight
        self._signal_frames = 0  # frames of the stack that are SIGNAL_FRAMEs
        self.thread = 0  # the tid of a thread the process made, whose stack it is (ThreadStacks); 0: the first's

    @property
    def in_flight(self) -> bool:
        """Is an exception on its way to a landing pad?"""
        return self._flight != 0

    @property
    def state(self) -> int:
        """The stop's abi.STOP_STATES bits."""
        return ((abi.IN_FLIGHT if self._flight else 0) | (abi.IN_HANDLER if self.frames[-1].signal else 0)
                | (abi.ABOVE_SIGNAL_FRAME if self._signal_frames else 0)
                | (abi.IN_SPAWNED_THREAD if self.thread else 0))
    def observe(self, pc: int, sp: int) -> None:
        """Account for the instruction that ran since the previous stop."""
        self._follow(pc, sp)
        if self._flight and len(self.frames) < self._flight:
            self._flight = 0
        if not self._flight and pc in self._raises:
            self._flight = len(self.frames)

    def _follow(self, pc: int, sp: int) -> None:
        """The calls, returns and non-local exits."""
        if self._pending is not None:  # even when the callee starts at the return pc (a noreturn call)
            frame, self._pending = self._pending, None
            if self._resumes is not None and not has_bit(self._resumes, frame.serial):
                frame = replace(frame, resumes=False)
            self.frames.append(frame)
            self._signal_frames += frame.signal
            return
        returned = self._return_fall_through is not None and pc != self._return_fall_through
        self._return_fall_through = None
        frames = self.frames
        while len(frames) > 1 and frames[-1].sp < sp:  # NON_LOCAL_EXIT: their callees are gone
            self._signal_frames -= frames.pop().signal
        top = frames[-1]
        if len(frames) > 1 and sp == top.sp and (pc == top.pc or returned):  # the caller resumes
            set_bit(self.resumed, top.serial)
            self._signal_frames -= frames.pop().signal

    def cancel(self) -> None:
        """The instruction a call or return was noted for did not complete."""
        self._pending = self._return_fall_through = None

    def before_return(self, pc: int, length: int) -> None:
        """The instruction at pc is a return-kind instruction of `length` bytes about to execute."""
        self._return_fall_through = pc + length

    def interrupted(self, pc: int, sp: int, callee_saved: tuple[int, ...], vfp) -> None:
        """A signal handler starts, entered with no call: its caller is the
        context it interrupted, at that exact pc (SIGNAL_FRAME); sigreturn,
        restoring that pc and sp, pops it as a return would."""
        self._pending = ShadowFrame(pc, sp, callee_saved, vfp, self._serials.next(), signal=True)

    def before(self, pc: int, length: int, regs, vfp) -> None:
        """The instruction at pc is a call of `length` bytes about to execute
        (its condition holds: harness.thumb.encoding.executes)."""
        self._pending = ShadowFrame(pc + length, regs[13], tuple(regs[4:12]), vfp, self._serials.next())


class Decoded(NamedTuple):
    """What ground truth needs of an instruction in its state."""

    call_length: int  # of a call (0: not one)
    it_length: int  # of the IT block it opens (0: not an IT)
    returns: bool  # a return-kind instruction
    size: int
    first_halfword: bytes
    condition: int  # an ARM instruction's; 0xE in Thumb, where IT decides


def decode(code: bytes, thumb: bool) -> Decoded:
    """What ground truth needs of the instruction `code`. C twin: trace.c: decoded()."""
    if not thumb:
        return Decoded(arm_call_length(code), 0, arm_return_kind(code), 4, code[:2],
                       code[3] >> 4 if len(code) > 3 else 0xE)
    return Decoded(call_length(code), it_block_length(code), return_kind(code), instruction_size(code), code[:2], 0xE)
