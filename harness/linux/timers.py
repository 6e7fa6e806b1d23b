"""Interval timers (setitimer, getitimer) on the emulated clock.

ITIMER_REAL counts the emulated time (harness.linux.kernel's now_ns:
instructions run and time slept), ITIMER_VIRTUAL and ITIMER_PROF the
process's CPU time (its instructions: no time in the kernel is counted).
A timer expires at an exact instruction: the hook that follows the run
stops before the instruction at which its clock reaches the timer's
due time (harness.emulation.emulator), the signal is sent to the process,
and a handler runs there, interrupting whatever ran, as a device's timer
interrupt does. The process's POSIX timers (harness.linux.posix_timers)
expire with them. Where every thread waits, the clock jumps to the first
due time on the emulated clock (ITIMER_REAL's or a POSIX timer's) as to a
sleep's end. The same run, the same expiries.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass

from harness.linux.call_table import handles
from harness.linux.files import GuestError
from harness.linux.posix_timers import PosixTimers

ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF = 0, 1, 2
SIGALRM, SIGVTALRM, SIGPROF = 14, 26, 27
SIGNAL_OF = {ITIMER_REAL: SIGALRM, ITIMER_VIRTUAL: SIGVTALRM, ITIMER_PROF: SIGPROF}
ITIMERVAL = struct.Struct("<iiii")  # it_interval (tv_sec, tv_usec), it_value (tv_sec, tv_usec)
NSEC, USEC = 1_000_000_000, 1_000


@dataclass
class Timer:
    due: int  # ns on its clock
    interval: int  # ns; 0: once


class Timers:
    """The process's three interval timers, and its POSIX timers."""

    def __init__(self):
        self.armed: dict[int, Timer] = {}
        self.posix = PosixTimers()

    @staticmethod
    def clock(kernel, which: int) -> int:
        """Now on the clock of timer `which`, in ns."""
        return kernel.now_ns() if which == ITIMER_REAL else kernel.cpu_ns()

    def next_instruction(self, kernel) -> int | None:
        """The instruction count at which the first armed timer expires,
        where nothing sleeps meanwhile (None: none is armed)."""
        counts = [kernel.machine.instructions() + max(0, timer.due - self.clock(kernel, which))
                  for which, timer in self.armed.items()]  # a nanosecond an instruction (kernel.NS_PER_INSTRUCTION)
        counts.append(self.posix.next_instruction(kernel))
        return min((count for count in counts if count is not None), default=None)

    def real_due(self, kernel) -> int | None:
        """The first due time (ns) on the emulated clock: ITIMER_REAL's, or
        a POSIX timer's (PosixTimers.real_due)."""
        timer = self.armed.get(ITIMER_REAL)
        dues = [None if timer is None else timer.due, self.posix.real_due(kernel)]
        return min((due for due in dues if due is not None), default=None)

    def expire(self, kernel, send) -> bool:
        """Send the signal of each interval timer whose time has come
        (`send(signal)`), arming it again where it repeats, then expire the
        POSIX timers; whether any expired."""
        expired = False
        for which in sorted(self.armed):
            timer, now = self.armed[which], self.clock(kernel, which)
            if timer.due > now:
                continue
            expired = True
            send(SIGNAL_OF[which])
            if timer.interval:
                timer.due += ((now - timer.due) // timer.interval + 1) * timer.interval  # overruns are not queued
            else:
                del self.armed[which]
        return self.posix.expire(kernel) or expired


def _as_ns(seconds: int, microseconds: int) -> int:
    if seconds < 0 or not 0 <= microseconds < 1_000_000:
        raise GuestError(errno.EINVAL)
    return seconds * NSEC + microseconds * USEC


def _packed(kernel, which: int) -> bytes:
    """getitimer's itimerval: the interval, and what is left (rounded up to a microsecond)."""
    timer = kernel.timers.armed.get(which)
    if timer is None:
        return ITIMERVAL.pack(0, 0, 0, 0)
    left = max(USEC, timer.due - Timers.clock(kernel, which) + USEC - 1) // USEC
    return ITIMERVAL.pack(timer.interval // NSEC, timer.interval % NSEC // USEC, left // 1_000_000, left % 1_000_000)


@handles(104, "setitimer")
def sys_setitimer(kernel, which, new_value, old_value):
    if which not in SIGNAL_OF:
        raise GuestError(errno.EINVAL)
    interval_s, interval_us, value_s, value_us = ITIMERVAL.unpack(kernel.machine.read(new_value, 16)) \
        if new_value else (0, 0, 0, 0)
    interval, value = _as_ns(interval_s, interval_us), _as_ns(value_s, value_us)
    if old_value:
        kernel.machine.write(old_value, _packed(kernel, which))
    kernel.timers.armed.pop(which, None)
    if value:
        kernel.timers.armed[which] = Timer(Timers.clock(kernel, which) + value, interval)
    return 0


@handles(105, "getitimer")
def sys_getitimer(kernel, which, value):
    if which not in SIGNAL_OF:
        raise GuestError(errno.EINVAL)
    kernel.machine.write(value, _packed(kernel, which))
    return 0
