"""The POSIX timer calls, with Linux's checks in Linux's order
(harness.linux.posix_timers keeps the timers): timer_create,
timer_settime and timer_gettime (with 32-bit times and time64),
timer_getoverrun, timer_delete."""

from __future__ import annotations

import errno
import struct

from harness.linux.call_table import GuestError, handles, signed
from harness.linux.posix_timers import (
    ALARM_CLOCKS,
    INT_MAX,
    KTIME_MAX,
    MAX_TIMERS,
    SIGEV_NONE,
    SIGEV_SIGNAL,
    SIGEV_THREAD,
    SIGEV_THREAD_ID,
    PosixTimer,
    clock_of,
    has_timers,
    known_clock,
)
from harness.linux.threads import Thread

SIGEVENT = struct.Struct("<Iiii")  # sigev_value, sigev_signo, sigev_notify, sigev_notify_thread_id
SIGEVENT_SIZE = 64  # what the kernel copies in
SIGALRM, SIGRTMAX = 14, 64
TIMER_ABSTIME = 1
NSEC = 1_000_000_000
# struct itimerspec: it_interval then it_value, each (tv_sec, tv_nsec); 32-bit Linux keeps
# the low word of time64's 64-bit tv_nsec (the high one is padding there).
ITIMERSPEC_IN = {False: struct.Struct("<iiii"), True: struct.Struct("<qi4xqi4x")}
ITIMERSPEC_OUT = {False: struct.Struct("<iiii"), True: struct.Struct("<qqqq")}


@handles(257, "timer_create")
def sys_timer_create(kernel, clock_id, event, created):
    clock_id = signed(clock_id)
    fields = SIGEVENT.unpack(kernel.machine.read(event, SIGEVENT_SIZE)[: SIGEVENT.size]) if event else None
    if not known_clock(clock_id):
        raise GuestError(errno.EINVAL)
    if not has_timers(clock_id):
        raise GuestError(errno.EOPNOTSUPP)
    timers = kernel.timers.posix
    if len(timers.by_id) >= MAX_TIMERS:
        raise GuestError(errno.EAGAIN)
    timer_id = timers.new_id()  # spent from here on, whatever fails after (as posix_timer_add's)
    value, signal, notify, tid = fields if fields else (timer_id, SIGALRM, SIGEV_SIGNAL, 0)
    target = _target(kernel, notify, signal, tid)
    kernel.machine.write(created, struct.pack("<i", timer_id))
    if clock_id in ALARM_CLOCKS:  # alarm_timer_create: the process lacks CAP_WAKE_ALARM
        raise GuestError(errno.EPERM)
    timers.by_id[timer_id] = PosixTimer(timer_id, clock_of(kernel, clock_id, timer=True), notify, signal, value,
                                        target)
    return 0


def _target(kernel, notify: int, signal: int, tid: int) -> Thread | None:
    """The thread a SIGEV_THREAD_ID timer signals (None: the process), as
    good_sigevent checks the sigevent: EINVAL for another kind, a thread
    not of this process, a signal out of 1-64 (SIGEV_NONE has none)."""
    if notify not in (SIGEV_SIGNAL, SIGEV_NONE, SIGEV_THREAD, SIGEV_THREAD_ID):
        raise GuestError(errno.EINVAL)
    target = None
    if notify == SIGEV_THREAD_ID:
        target = kernel.threads.find(tid)
        if target is None:
            raise GuestError(errno.EINVAL)
    if notify != SIGEV_NONE and not 1 <= signal <= SIGRTMAX:
        raise GuestError(errno.EINVAL)
    return target


@handles(258, "timer_settime")
def sys_timer_settime(kernel, timer_id, flags, new_value, old_value):
    return _settime(kernel, timer_id, flags, new_value, old_value, time64=False)


@handles(409, "timer_settime64")
def sys_timer_settime64(kernel, timer_id, flags, new_value, old_value):
    return _settime(kernel, timer_id, flags, new_value, old_value, time64=True)


def _settime(kernel, timer_id: int, flags: int, new_value: int, old_value: int, time64: bool) -> int:
    if not new_value:
        raise GuestError(errno.EINVAL)
    layout = ITIMERSPEC_IN[time64]
    interval_s, interval_ns, value_s, value_ns = layout.unpack(kernel.machine.read(new_value, layout.size))
    interval, value = _as_ns(interval_s, interval_ns), _as_ns(value_s, value_ns)
    timer = kernel.timers.posix.find(signed(timer_id))
    if not timer.alive:  # a thread's CPU-time timer whose thread is gone
        raise GuestError(errno.ESRCH)
    previous = timer.reading(kernel) if old_value else (0, 0)
    timer.set(kernel, value, interval, bool(flags & TIMER_ABSTIME))
    if old_value:
        kernel.machine.write(old_value, _packed(previous, time64))
    return 0


@handles(259, "timer_gettime")
def sys_timer_gettime(kernel, timer_id, setting):
    kernel.machine.write(setting, _packed(kernel.timers.posix.find(signed(timer_id)).reading(kernel), False))
    return 0


@handles(408, "timer_gettime64")
def sys_timer_gettime64(kernel, timer_id, setting):
    kernel.machine.write(setting, _packed(kernel.timers.posix.find(signed(timer_id)).reading(kernel), True))
    return 0


@handles(260, "timer_getoverrun")
def sys_timer_getoverrun(kernel, timer_id):
    return min(INT_MAX, kernel.timers.posix.find(signed(timer_id)).overrun_last)


@handles(261, "timer_delete")
def sys_timer_delete(kernel, timer_id):
    """The timer goes; a signal of its that is pending stays, and is delivered (not arming it again)."""
    timers = kernel.timers.posix
    timer = timers.find(signed(timer_id))
    timer.deleted, timer.active = True, False
    del timers.by_id[timer.id]
    return 0


def _as_ns(seconds: int, nanoseconds: int) -> int:
    """A timespec as timespec64_valid takes it, in ns (at most KTIME_MAX, as timespec64_to_ktime)."""
    if seconds < 0 or not 0 <= nanoseconds < NSEC:
        raise GuestError(errno.EINVAL)
    return min(KTIME_MAX, seconds * NSEC + nanoseconds)


def _packed(reading: tuple[int, int], time64: bool) -> bytes:
    """An itimerspec of (value, interval) in ns; 32-bit seconds wrap as old_time32_t does."""
    value, interval = reading
    seconds = [interval // NSEC, value // NSEC]
    if not time64:
        seconds = [signed(second & 0xFFFFFFFF) for second in seconds]
    return ITIMERSPEC_OUT[time64].pack(seconds[0], interval % NSEC, seconds[1], value % NSEC)
