"""Waits a signal ends, as Linux ends them (harness.linux.signals._restart):
each kind of call's restart code, made EINTR or a restart by the handler's
SA_RESTART, or a restart where no handler runs; signals the process
ignores end no wait. Unit tests on a plain machine: a thread waits, the
real-time timer's SIGALRM ends the wait, and the delivery decides."""

from __future__ import annotations

import errno
import struct
from dataclasses import replace

import pytest
from linux_calls import NUMBERS, SCRATCH, call

from harness.linux import signals, timers
from harness.linux.calls_threads import FUTEX_WAIT, FUTEX_WAIT_BITSET
from harness.linux.kernel import FIXED_TIME
from harness.linux.signals import ERESTART_RESTARTBLOCK, ERESTARTNOHAND, ERESTARTSYS, SA_RESTART, SA_SIGINFO

NSEC = 1_000_000_000
WORD, TIMESPEC, REMAINING = SCRATCH + 0x100, SCRATCH + 0x200, SCRATCH + 0x300
HANDLER = 0x9001  # a Thumb handler
SVC = 0x1236  # the call's svc: the pc after it is SVC + 2 in Thumb
THUMB, ARM = 0x30, 0x10  # cpsr: USR mode, with and without the T bit


def _at_svc(kernel, cpsr: int = THUMB, number: str = "futex") -> None:
    """The registers as a call at SVC leaves them: the pc after the svc, r7 its number."""
    registers = list(kernel.machine.registers.r)
    registers[7], registers[13] = NUMBERS[number], SCRATCH + 0x4000
    registers[15] = SVC + (2 if cpsr & 0x20 else 4)
    kernel.machine.registers = replace(kernel.machine.registers, r=tuple(registers), cpsr=cpsr)


def _alarm(kernel, microseconds: int, flags: int | None) -> None:
    """SIGALRM in `microseconds`, to a handler with `flags` (None: no handler)."""
    if flags is not None:
        kernel.signals.actions[timers.SIGALRM] = signals.Action(HANDLER, flags | SA_SIGINFO, 0, 0)
    kernel.machine.write(SCRATCH + 0x400, struct.pack("<iiii", 0, 0, 0, microseconds))
    assert call(kernel, "setitimer", timers.ITIMER_REAL, SCRATCH + 0x400, 0) == 0


def _r0(kernel) -> int:
    value = kernel.machine.registers.r[0]
    return value - (1 << 32) if value & 0x80000000 else value


def _delivered(kernel):
    """The context the handler's frame keeps (its sigreturn's)."""
    interrupted = signals.deliver_pending(kernel)
    assert interrupted is not None and kernel.machine.registers.r[15] == HANDLER & ~1
    return interrupted


@pytest.mark.parametrize("cpsr", [THUMB, ARM])
def test_an_untimed_futex_wait_restarts_under_sa_restart(kernel, cpsr):
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel, cpsr)  # the pc 2 bytes past the svc in Thumb, 4 in ARM
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)  # one thread: the clock jumps to the alarm
    assert _r0(kernel) == -ERESTARTSYS
    saved = _delivered(kernel)
    # Back on the svc with the call's r0 and r7: its sigreturn runs the same call again
    assert (saved.r[0], saved.r[7], saved.r[15]) == (WORD, NUMBERS["futex"], SVC)


def test_an_untimed_futex_wait_fails_with_eintr_without_sa_restart(kernel):
    _alarm(kernel, 1000, 0)
    _at_svc(kernel)
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)
    saved = _delivered(kernel)
    assert saved.r[0] == -errno.EINTR & 0xFFFFFFFF and saved.r[15] == SVC + 2


def test_a_timed_futex_wait_fails_with_eintr_even_under_sa_restart(kernel):
    kernel.machine.write(TIMESPEC, struct.pack("<iI", 5, 0))
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel)
    call(kernel, "futex", WORD, FUTEX_WAIT, 0, TIMESPEC)
    assert _r0(kernel) == -ERESTART_RESTARTBLOCK
    saved = _delivered(kernel)
    assert saved.r[0] == -errno.EINTR & 0xFFFFFFFF and saved.r[15] == SVC + 2
    assert call(kernel, "rt_sigreturn") is not None and call(kernel, "restart_syscall") == -errno.EINTR


def test_without_a_handler_a_timed_wait_goes_on_to_its_deadline_through_restart_syscall(kernel):
    """The handler is gone (SIG_IGN flushes the pending SIGALRM) before the
    thread runs: no handler, so the call restarts as restart_syscall,
    which waits to the deadline the call had."""
    start = kernel.now_ns()
    deadline = start + 5 * NSEC
    kernel.machine.write(TIMESPEC, struct.pack("<qI4x", deadline // NSEC, deadline % NSEC))
    _alarm(kernel, 1000, 0)
    _at_svc(kernel)
    call(kernel, "futex_time64", WORD, FUTEX_WAIT_BITSET, 0, TIMESPEC, 0, 0xFFFFFFFF)
    assert _r0(kernel) == -ERESTART_RESTARTBLOCK
    kernel.signals.actions[timers.SIGALRM] = signals.Action(signals.SIG_IGN, 0, 0, 0)
    kernel.signals.pending.clear()
    assert signals.deliver_pending(kernel) is None
    now = kernel.machine.registers
    assert now.r[15] == SVC and now.r[7] == 0 and now.r[0] == WORD  # svc again, as restart_syscall
    assert call(kernel, "restart_syscall") == -errno.ETIMEDOUT and kernel.now_ns() == deadline


def test_an_interrupted_sleep_writes_the_time_left_and_fails_with_eintr(kernel):
    kernel.machine.write(TIMESPEC, struct.pack("<iI", 5, 0))
    _alarm(kernel, 3000, SA_RESTART)
    _at_svc(kernel, number="nanosleep")
    start = kernel.now_ns()
    call(kernel, "nanosleep", TIMESPEC, REMAINING)
    assert kernel.now_ns() == start + 3_000_000 and _r0(kernel) == -ERESTART_RESTARTBLOCK
    assert struct.unpack("<ii", kernel.machine.read(REMAINING, 8)) == (4, 997_000_000)
    assert _delivered(kernel).r[0] == -errno.EINTR & 0xFFFFFFFF


def test_a_sleep_whose_handler_went_away_sleeps_on_to_its_end(kernel):
    kernel.machine.write(TIMESPEC, struct.pack("<iI", 5, 0))
    _alarm(kernel, 3000, 0)
    _at_svc(kernel, number="nanosleep")
    start = kernel.now_ns()
    call(kernel, "nanosleep", TIMESPEC, 0)
    interrupted = kernel.machine.registers
    # Before the thread runs, the process ignores SIGALRM (rt_sigaction drops it from every thread)
    assert kernel.signals.pending and call(kernel, "rt_sigaction", timers.SIGALRM, _ignore(kernel), 0, 8) == 0
    assert kernel.signals.pending == []
    kernel.machine.registers = interrupted
    assert signals.deliver_pending(kernel) is None and kernel.machine.registers.r[7] == 0
    assert call(kernel, "restart_syscall") == 0 and kernel.now_ns() == start + 5 * NSEC


def test_an_absolute_sleep_fails_with_eintr_or_runs_again_as_it_was_made(kernel):
    until = (FIXED_TIME + 10) * NSEC
    kernel.machine.write(TIMESPEC, struct.pack("<iI", until // NSEC, 0))
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel, number="clock_nanosleep")
    call(kernel, "clock_nanosleep", 0, 1, TIMESPEC, REMAINING)  # TIMER_ABSTIME
    assert _r0(kernel) == -ERESTARTNOHAND and kernel.machine.read(REMAINING, 8) == bytes(8)  # no time left written
    assert _delivered(kernel).r[0] == -errno.EINTR & 0xFFFFFFFF  # SA_RESTART or not
    kernel.signals.blocked = 0  # as the handler's sigreturn leaves it
    _alarm(kernel, 1000, 0)
    _at_svc(kernel, number="clock_nanosleep")
    call(kernel, "clock_nanosleep", 0, 1, TIMESPEC, REMAINING)
    kernel.signals.pending.clear()  # the handler went away: no handler runs
    assert signals.deliver_pending(kernel) is None
    now = kernel.machine.registers
    assert (now.r[0], now.r[7], now.r[15]) == (0, NUMBERS["clock_nanosleep"], SVC)  # the same call again


def test_a_signal_the_process_ignores_ends_no_wait(kernel):
    kernel.signals.actions[timers.SIGALRM] = signals.Action(signals.SIG_IGN, 0, 0, 0)
    kernel.machine.write(TIMESPEC, struct.pack("<iI", 2, 0))
    start = kernel.now_ns()
    _alarm(kernel, 1000, None)
    call(kernel, "nanosleep", TIMESPEC, 0)  # the alarm rings at 1 ms: dropped, the sleep runs its course
    assert kernel.now_ns() == start + 2 * NSEC and _r0(kernel) == 0 and kernel.signals.pending == []


def test_a_signal_ignored_by_default_ends_no_wait_of_another_thread(kernel):
    kernel.machine.write(TIMESPEC, struct.pack("<iI", 2, 0))
    call(kernel, "clone", 0x3D0F00, SCRATCH + 0x3000, SCRATCH + 0x108, 0, SCRATCH + 0x108)
    call(kernel, "nanosleep", TIMESPEC, 0)  # main sleeps: the thread runs
    thread = kernel.threads.current
    assert thread.tid != 4242 and call(kernel, "tgkill", 4242, 4242, 17) == 0  # SIGCHLD: dropped
    main = kernel.threads.find(4242)
    assert main.wait is not None and main.signals.pending == []
    kernel.signals.actions[17] = signals.Action(HANDLER, 0, 0, 0)
    assert call(kernel, "tgkill", 4242, 4242, 17) == 0 and main.wait is None  # with a handler it ends the sleep


def _ignore(kernel) -> int:
    kernel.machine.write(SCRATCH + 0x500, signals.Action(signals.SIG_IGN, 0, 0, 0).packed())
    return SCRATCH + 0x500
