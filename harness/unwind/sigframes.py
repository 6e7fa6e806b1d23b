"""Crossing a signal frame as libunwindstack does (RegsArm::StepIfSignalHandler):
an option for any unwinder (`verify-elf --signal-frames`), measured beside
it as it is.

A handler returns to a sigreturn trampoline: `mov r7, #119; svc 0`
(sigreturn) or `mov r7, #173; svc 0` (rt_sigreturn), in ARM or Thumb
(glibc's sa_restorer, the kernel's own). A frame whose pc is the first
instruction of one, innermost or as the handler's return address, is the
signal frame: sp points at the frame the kernel wrote, and the sigcontext
in it holds every register of the interrupted context, whose pc is exact
(not a return address: the next step looks it up as it is).

The trampolines are found by their instructions in the process's code
(`trampolines_in`), as libunwindstack reads them at the frame's pc.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from typing import Iterable

from harness.errors import UnwindFailure
from harness.unwind.frame import Frame, StackReader
from harness.unwind.rule import EVERYWHERE, NOWHERE, RuleRange
from harness.unwind.walk import Restores, Unwinder

# The trampolines' instructions, whether each is rt_sigreturn's, and their
# alignment. libunwindstack knows the ARM and 16-bit Thumb forms; Debian's
# armhf glibc builds its restorers as Thumb-2 (`mov.w r7, #173; svc 0`), a
# form it does not know, so they are here too.
PATTERNS = (
    (struct.pack("<II", 0xE3A07077, 0xEF000000), False, 4),  # ARM: mov r7, #119; svc 0
    (struct.pack("<II", 0xE3A070AD, 0xEF000000), True, 4),  # ARM: mov r7, #173; svc 0
    (struct.pack("<HH", 0x2777, 0xDF00), False, 2),  # Thumb: movs r7, #119; svc 0
    (struct.pack("<HH", 0x27AD, 0xDF00), True, 2),  # Thumb: movs r7, #173; svc 0
    (struct.pack("<HHH", 0xF04F, 0x0777, 0xDF00), False, 2),  # Thumb-2: mov.w r7, #119; svc 0
    (struct.pack("<HHH", 0xF04F, 0x07AD, 0xDF00), True, 2),  # Thumb-2: mov.w r7, #173; svc 0
)
SIGINFO_SIZE = 0x80  # an rt frame's siginfo, before its ucontext
SIGCONTEXT_REGISTERS = 0x14 + 0xC  # ucontext's sigcontext, then trap_no, error_code and oldmask: r0 here
VFP_RECORD = 232  # the ucontext's uc_regspace: the VFP record first
VFP_MAGIC, VFP_SIZE = 0x56465001, 288
USER_MODE = 0x10  # the mode of any context a signal interrupted


def trampolines_in(segments: Iterable[tuple[int, bytes]]) -> dict[int, bool]:
    """Every sigreturn trampoline in the code `segments` hold: its address ->
    whether it is rt_sigreturn's."""
    found: dict[int, bool] = {}
    for start, data in segments:
        for pattern, rt, alignment in PATTERNS:
            at = data.find(pattern)
            while at >= 0:
                if (start + at) % alignment == 0:
                    found[start + at] = rt
                at = data.find(pattern, at + 1)
    return found


class SignalFrames(Unwinder):
    """`unwinder`, crossing signal frames: a step that lands on a trampoline
    (or starts in one) gives the interrupted context instead.

    Its rules are the unwinder's, but none (only `step` can say) for a
    frame in a trampoline, innermost or at its first instruction as a
    caller, or innermost where no code is; and it `looks_ahead`: the
    compiled kernel defers a walk whose step gives a caller there before
    comparing that caller. So the kernel walks every stop with no signal
    frame to cross, and the walks that cross one run here."""

    looks_ahead = True

    def __init__(self, unwinder: Unwinder, trampolines: dict[int, bool],
                 code: Iterable[tuple[int, int]] = ()):
        self.unwinder = unwinder
        self._code = sorted(code)  # [start, end) of the process's code
        self.name = unwinder.name
        self.restores: Restores = unwinder.restores
        self._trampolines = trampolines
        self._starts = sorted(trampolines)
        # The registers (r4-r11, sp, lr, pc) of the context the last crossing
        # restored: the walk's next step starts from it (scratch registers
        # cleared), and its pc is exact. Kept here, not in the frame, where
        # steps that copy their callee's frame would carry it on.
        self._restored: tuple[int, ...] | None = None

    def _rt(self, pc: int) -> bool | None:
        """Is pc in a trampoline, and is it rt_sigreturn's? None outside them."""
        index = bisect_right(self._starts, pc & ~1) - 1
        if index < 0:
            return None
        start = self._starts[index]
        return self._trampolines[start] if pc & ~1 < start + 8 else None

    def rule_at(self, pc: int, innermost: bool) -> RuleRange:
        pc &= ~1
        index = bisect_right(self._starts, pc) - 1
        before = self._starts[index] if index >= 0 else None
        after = self._starts[index + 1] if index + 1 < len(self._starts) else EVERYWHERE
        if innermost:
            if before is not None and pc < before + 8:
                return RuleRange(None, before, before + 8)
            code = bisect_right(self._code, (pc, EVERYWHERE)) - 1
            if self._code and not (code >= 0 and pc < self._code[code][1]):  # where no code is
                return RuleRange(None, self._code[code][1] if code >= 0 else NOWHERE,
                                 self._code[code + 1][0] if code + 1 < len(self._code) else EVERYWHERE)
            low = max(before + 8 if before is not None else NOWHERE, self._code[code][0] if self._code else NOWHERE)
            high = min(after, self._code[code][1] if self._code else EVERYWHERE)
        else:
            if pc == before:
                return RuleRange(None, pc, pc + 2)
            low, high = before + 2 if before is not None else NOWHERE, after
        found = self.unwinder.rule_at(pc, innermost) if self.unwinder.rule_at is not None \
            else RuleRange(None, NOWHERE, EVERYWHERE)
        return RuleRange(found.rule, max(found.low, low), min(found.high, high))

    def step(self, frame: Frame, stack: StackReader, innermost: bool) -> Frame:
        if innermost:
            self._restored = None  # a new walk
        exact = innermost or _kept(frame) == self._restored  # innermost, or restored from a signal frame
        rt = self._rt(frame.pc) if exact else None
        if rt is not None:  # stopped in the trampoline itself: sp is the signal frame
            return self._interrupted(frame.sp, stack, rt)
        if exact and self._code and not self._in_code(frame.pc):
            # The signal came from fetching where no code is: a call through a
            # bad pointer (csegv's NULL function pointer). The call left its
            # return address in lr and sp as it was: that is the caller.
            return Frame(r=frame.r[:15] + (frame.r[14] & ~1,), d=frame.d)
        caller = self.unwinder.step(frame, stack, exact)
        rt = self._trampolines.get(caller.pc & ~1)  # the handler returns to the trampoline's first instruction
        return caller if rt is None else self._interrupted(caller.sp, stack, rt)

    def _in_code(self, pc: int) -> bool:
        index = bisect_right(self._code, (pc, 1 << 32)) - 1
        return index >= 0 and pc < self._code[index][1]

    def _interrupted(self, sp: int, stack: StackReader, rt: bool) -> Frame:
        """The context the signal frame at sp holds (its cpsr marks it restored)."""
        ucontext = sp + (SIGINFO_SIZE if rt else 0)
        registers = tuple(stack.read_u32(ucontext + SIGCONTEXT_REGISTERS + 4 * n) for n in range(16))
        cpsr = stack.read_u32(ucontext + SIGCONTEXT_REGISTERS + 64)
        if cpsr & 0x1F != USER_MODE:
            raise UnwindFailure("bad_read", f"the signal frame at {sp:#x} holds no user context (cpsr {cpsr:#x})")
        record = ucontext + VFP_RECORD
        d = (None,) * 32
        if (stack.read_u32(record), stack.read_u32(record + 4)) == (VFP_MAGIC, VFP_SIZE):
            d = tuple(stack.read_u64(record + 8 + 8 * n) for n in range(32))
        restored = Frame(r=registers[:15] + (registers[15] & ~1,), d=d, cpsr=cpsr)
        self._restored = _kept(restored)
        return restored


def _kept(frame: Frame) -> tuple[int, ...]:
    """What a walk keeps of a frame for the next step: r4-r11, sp, lr, pc."""
    return frame.r[4:12] + frame.r[13:]
