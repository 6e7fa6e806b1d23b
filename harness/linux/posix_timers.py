"""POSIX timers (their calls: harness.linux.calls_timers) on the emulated
clock, kept as Linux 6.1 keeps them (kernel/time/posix-timers.c and
posix-cpu-timers.c), and the clocks they count on.

CLOCK_REALTIME, MONOTONIC, BOOTTIME and TAI are the emulated clock
(kernel.now_ns: one clock here); CLOCK_PROCESS_CPUTIME_ID counts the
process's instructions, CLOCK_THREAD_CPUTIME_ID one thread's (CpuTimes),
as do the CPU clocks glibc encodes for a pid or tid (timer_create passes
them for these two). A timer expires before an exact instruction, as the
interval timers do (harness.linux.timers), and queues its signal (si_code
SI_TIMER, with the timer's id, overrun count and sigev_value) for the
process or for one of its threads. A periodic timer is armed again where
Linux arms it: when its signal is taken off the pending list (a handler
runs, sigtimedwait returns it), the periods that passed meanwhile counted
as its overrun; while its signal waits, the timer does not stop the run.
An expiry whose signal would be ignored is not queued: the timer goes on.
The same run, the same expiries.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import NamedTuple

from harness.linux.call_table import GuestError
from harness.linux.threads import Thread

SIGEV_SIGNAL, SIGEV_NONE, SIGEV_THREAD, SIGEV_THREAD_ID = 0, 1, 2, 4
SI_TIMER = -2
INT_MAX = 0x7FFFFFFF
KTIME_MAX = (1 << 63) - 1  # ns: where Linux's times saturate (the hook's instruction counts stay in 64 bits)
JIFFY = 10_000_000  # ns (CONFIG_HZ=100, ARM's): a periodic timer whose signal is ignored ticks no faster
MAX_TIMERS = 1024  # RLIMIT_SIGPENDING here: each timer holds a queued signal's place (EAGAIN past it)
CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID = 2, 3
TIMER_CLOCKS = {0, 1, 7, 11}  # CLOCK_REALTIME, MONOTONIC, BOOTTIME, TAI
READ_ONLY_CLOCKS = {4, 5, 6}  # MONOTONIC_RAW, REALTIME_COARSE, MONOTONIC_COARSE: no timers (EOPNOTSUPP)
ALARM_CLOCKS = {8, 9}  # REALTIME_ALARM, BOOTTIME_ALARM: timers need CAP_WAKE_ALARM (EPERM)
CPUCLOCK_PERTHREAD, CPUCLOCK_WHICH, CLOCKFD = 4, 3, 3  # a negative id's low bits; 3: a clock fd


class Clock(NamedTuple):
    """A clock: the emulated time, or CPU time (the process's, or `thread`'s)."""

    cpu: bool = False
    thread: Thread | None = None

    def now(self, kernel) -> int:
        """Its time now, in ns."""
        if not self.cpu:
            return kernel.now_ns()
        return kernel.cpu_ns() if self.thread is None else kernel.thread_cpu_ns(self.thread)

    def instructions_to(self, kernel, due: int) -> int | None:
        """How many instructions until it reads `due` (one a nanosecond:
        kernel.NS_PER_INSTRUCTION), where the run moves it: a thread's CPU
        clock only while that thread runs."""
        if self.thread is not None and self.thread is not kernel.threads.current:
            return None
        return max(0, due - self.now(kernel))


def clock_of(kernel, clock_id: int, timer: bool = False) -> Clock:
    """The clock `clock_id` (signed) names, as clockid_to_kclock and
    pid_for_clock find it: EINVAL where there is none. With `timer`, a
    process's CPU clock must be named by its pid (clock_gettime also
    takes the calling thread's tid)."""
    if not known_clock(clock_id):
        raise GuestError(errno.EINVAL)
    if clock_id >= 0:
        if clock_id == CLOCK_PROCESS_CPUTIME_ID:
            return Clock(True)
        return Clock(True, kernel.threads.current) if clock_id == CLOCK_THREAD_CPUTIME_ID else Clock()
    pid = ~(clock_id >> 3)
    if clock_id & CPUCLOCK_WHICH == CLOCKFD:  # a clock fd's (PTP): no such device here, or a thread's bad kind
        raise GuestError(errno.EINVAL)
    if clock_id & CPUCLOCK_PERTHREAD:
        thread = kernel.threads.current if pid == 0 else kernel.threads.find(pid)
        if thread is None:
            raise GuestError(errno.EINVAL)
        return Clock(True, thread)
    if pid not in (0, kernel.pid) and (timer or pid != kernel.threads.current.tid):
        raise GuestError(errno.EINVAL)
    return Clock(True)


def known_clock(clock_id: int) -> bool:
    """Whether `clock_id` (signed) may name a clock: one of Linux's, or an encoded CPU clock or clock fd."""
    return clock_id < 0 or clock_id in TIMER_CLOCKS | READ_ONLY_CLOCKS | ALARM_CLOCKS | {
        CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID}


def has_timers(clock_id: int) -> bool:
    """Whether the clock `clock_id` (signed) can have timers at all (EOPNOTSUPP where not)."""
    return clock_id not in READ_ONLY_CLOCKS and not (clock_id < 0 and clock_id & 7 == CLOCKFD)


class CpuTimes:
    """Each thread's CPU time: the instructions it ran, kept at each switch."""

    def __init__(self):
        self.before: dict[int, int] = {}  # tid -> instructions it ran before its current turn
        self.since = 0  # the instruction count when the running thread got the processor

    def switched(self, left: int, instructions: int) -> None:
        """Thread `left` gave the processor up at `instructions`."""
        self.before[left] = self.before.get(left, 0) + instructions - self.since
        self.since = instructions

    def of(self, thread: Thread, running: Thread, instructions: int) -> int:
        """`thread`'s instructions so far, `running` being the thread that runs now."""
        return self.before.get(thread.tid, 0) + (instructions - self.since if thread is running else 0)


@dataclass(eq=False)
class PosixTimer:
    """One timer: k_itimer's state, in ns on its clock."""

    id: int
    clock: Clock
    notify: int  # SIGEV_SIGNAL, SIGEV_NONE, SIGEV_THREAD (the kernel's: a signal) or SIGEV_THREAD_ID
    signal: int
    value: int  # sigev_value (32 bits)
    target: Thread | None = None  # SIGEV_THREAD_ID's thread; None: the process
    due: int | None = None  # when it expires next (None: disarmed)
    interval: int = 0
    active: bool = False  # it expires at `due` (armed, not SIGEV_NONE, not waiting for its signal to be taken)
    overrun: int = -1  # periods passed since the last rearm, less one (it_overrun)
    overrun_last: int = 0  # the count at the last rearm: timer_getoverrun's
    sequence: int = 0  # +2 at each timer_settime; odd while a periodic timer waits for its signal to be taken
    sent_sequence: int = 0  # the sequence at its last expiry: a rearm needs it unchanged (si_sys_private)
    queued: bool = False  # its signal waits on a pending list
    queued_overrun: int = 0  # expiries while it waited there (the queued siginfo's si_overrun)
    deleted: bool = False

    @property
    def alive(self) -> bool:
        """A thread's CPU-time timer dies with its thread."""
        return self.clock.thread is None or not self.clock.thread.exited

    def forward(self, now: int) -> int:
        """Move `due` past `now` by whole intervals (hrtimer_forward): by how many."""
        if now < self.due:
            return 0
        periods = (now - self.due) // self.interval + 1
        self.due = min(KTIME_MAX, self.due + periods * self.interval)
        return periods

    def set(self, kernel, value: int, interval: int, absolute: bool) -> None:
        """timer_settime's new setting: `value` from now (or the clock's
        time with `absolute`) and every `interval` after; a value of 0
        disarms it. A signal already queued stays, but will not rearm it."""
        self.active, self.interval, self.sequence = False, 0, (self.sequence + 2) & ~1
        self.overrun_last, self.overrun = 0, -1
        if not value:
            self.due = None
            return
        self.interval = interval
        self.due = min(KTIME_MAX, value if absolute else self.clock.now(kernel) + value)
        self.active = self.notify != SIGEV_NONE

    def reading(self, kernel) -> tuple[int, int]:
        """timer_gettime's (time left, interval): a SIGEV_NONE timer or one
        whose signal waits is moved past now first, its periods counted; a
        timer due but not yet expired has 1 ns left."""
        silent = self.notify == SIGEV_NONE
        if not self.alive or self.due is None or not (self.interval or self.active or silent):
            return 0, 0
        now = self.clock.now(kernel)
        if self.interval and (self.sequence & 1 or silent):
            self.overrun += self.forward(now)
        left = self.due - now
        return (left if left > 0 else 0 if silent else 1), self.interval

    def expire(self, kernel) -> None:
        """Its time came (posix_timer_fn): its signal is queued (a second
        expiry before the first is taken counts in the queued signal's
        overrun); a periodic timer waits for it to be taken to be armed
        again, unless the signal is ignored."""
        self.active = False
        if self.interval:
            self.sequence += 1
        self.sent_sequence = self.sequence if self.interval else 0
        receiver = _receiver(kernel, self)
        if receiver.exited and self.notify & SIGEV_THREAD_ID:  # no one to send to: the timer stops
            return
        if receiver.signals.ignores(self.signal):
            if self.interval:
                now = self.clock.now(kernel)
                self.overrun += self.forward(now + (JIFFY if self.interval < JIFFY else 0))
                self.active, self.sequence = True, self.sequence + 1
        elif self.queued:
            self.queued_overrun += 1
        else:
            self.queued, self.queued_overrun = True, 0
            if self.notify & SIGEV_THREAD_ID:
                kernel.signal_thread(receiver, self.signal, SI_TIMER, self)
            else:
                kernel.signal_process(self.signal, SI_TIMER, self)

    def dequeued(self, kernel) -> tuple[int, int, int]:
        """Its signal is taken off the pending list (posixtimer_rearm): a
        periodic timer not set since is armed again past now, the periods
        missed its overrun. The siginfo's (si_timerid, si_overrun, si_value)."""
        self.queued, overrun = False, self.queued_overrun
        if not self.deleted and self.alive and self.interval and self.sequence == self.sent_sequence:
            self.overrun += self.forward(self.clock.now(kernel))
            self.active = True
            self.overrun_last, self.overrun = self.overrun, -1
            self.sequence += 1
            overrun = min(INT_MAX, self.overrun_last + overrun)
        return self.id, overrun, self.value


@dataclass
class PosixTimers:
    """The process's POSIX timers, by id."""

    by_id: dict[int, PosixTimer] = field(default_factory=dict)
    next_id: int = 0  # the process's counter: ids are not reused until it wraps (posix_timer_add)

    def new_id(self) -> int:
        while self.next_id in self.by_id:
            self.next_id = (self.next_id + 1) & INT_MAX
        found, self.next_id = self.next_id, (self.next_id + 1) & INT_MAX
        return found

    def find(self, timer_id: int) -> PosixTimer:
        timer = self.by_id.get(timer_id)
        if timer is None:
            raise GuestError(errno.EINVAL)
        return timer

    def next_instruction(self, kernel) -> int | None:
        """The instruction count at which the first active timer expires,
        where nothing sleeps meanwhile."""
        counts = [timer.clock.instructions_to(kernel, timer.due) for timer in self.by_id.values() if timer.active]
        return min((kernel.machine.instructions() + count for count in counts if count is not None), default=None)

    def real_due(self, kernel) -> int | None:
        """The earliest due time of an active timer on the emulated clock
        whose signal would not be ignored (one that would be leaves the
        clock where it is: its periods are counted when it next expires)."""
        return min((timer.due for timer in self.by_id.values() if timer.active and not timer.clock.cpu
                    and not _receiver(kernel, timer).signals.ignores(timer.signal)), default=None)

    def expire(self, kernel) -> bool:
        """The timers whose time came expire, in the order of their ids; whether any did."""
        expired = False
        for timer in sorted(self.by_id.values(), key=lambda timer: timer.id):
            if timer.active and timer.due <= timer.clock.now(kernel):
                timer.expire(kernel)
                expired = True
        return expired


def _receiver(kernel, timer: PosixTimer) -> Thread:
    """The thread whose signal state decides whether the timer's signal is
    ignored: its SIGEV_THREAD_ID thread, else the thread group's leader."""
    return timer.target if timer.notify & SIGEV_THREAD_ID else kernel.threads.all[0]
