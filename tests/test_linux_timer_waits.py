"""Timers and signal waits with the waits that signals end: rt_sigtimedwait
ended by another signal fails with EINTR whatever SA_RESTART says (Linux's
do_sigtimedwait returns it itself, not a restart code); a POSIX timer's
signal ends a wait on files with that call's restart code, its handler
getting the timer's siginfo; signals the process ignores end neither a
wait on files nor a signal wait; the clock's jump when every thread waits
goes to a timer's due time or a file wait's deadline, whichever comes
first; a deadlock names the threads in rt_sigtimedwait too. Unit tests on
a plain machine."""

from __future__ import annotations

import errno
import struct

import pytest
from linux_calls import NUMBERS, SCRATCH, call
from test_linux_posix_timers import MONOTONIC, _create, _mask, _set, _sigwait
from test_linux_threads import MAIN, WORD, _running, _spawn
from test_linux_waits import HANDLER, SVC, _alarm, _at_svc, _delivered, _pipe, _r0, _to

from harness.linux import signals, timers
from harness.linux.call_table import SystemCallFault
from harness.linux.calls_threads import FUTEX_WAIT
from harness.linux.posix_timers import SI_TIMER, SIGEV_THREAD_ID
from harness.linux.signals import ERESTART_RESTARTBLOCK, ERESTARTSYS, SA_RESTART, SA_SIGINFO, SI_USER

POLL, READ = SCRATCH + 0xA00, SCRATCH + 0xA40  # clear of the helpers' buffers
SIG_BLOCK, SIG_UNBLOCK = 0, 1
SIGUSR1 = 10


def _ignore(kernel, signal: int) -> None:
    kernel.signals.actions[signal] = signals.Action(signals.SIG_IGN, 0, 0, 0)


@pytest.mark.parametrize("timeout", [None, (5, 0)])
def test_rt_sigtimedwait_ended_by_a_handled_signal_fails_with_eintr_even_under_sa_restart(kernel, timeout):
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel, number="rt_sigtimedwait")
    start = kernel.now_ns()
    _sigwait(kernel, 12, timeout=timeout)  # one thread: the clock jumps to the alarm, whose SIGALRM ends the wait
    assert kernel.now_ns() == start + 1_000_000 and _r0(kernel) == -errno.EINTR
    saved = _delivered(kernel)
    assert (saved.r[0], saved.r[7], saved.r[15]) == (-errno.EINTR & 0xFFFFFFFF, NUMBERS["rt_sigtimedwait"], SVC + 2)


def test_rt_sigtimedwait_whose_handler_went_away_still_fails_with_eintr(kernel):
    """No handler runs, but the call's EINTR is no restart code: nothing runs again."""
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel, number="rt_sigtimedwait")
    _sigwait(kernel, 12)
    kernel.signals.pending.clear()
    assert signals.deliver_pending(kernel) is None
    now = kernel.machine.registers
    assert (now.r[0], now.r[7], now.r[15]) == (-errno.EINTR & 0xFFFFFFFF, NUMBERS["rt_sigtimedwait"], SVC + 2)


@pytest.mark.parametrize("blocked", [False, True])
def test_rt_sigtimedwait_for_an_ignored_signal_gets_it_only_where_it_is_blocked(kernel, blocked):
    """sig_ignored: a blocked signal is never ignored (the mask before the
    wait, real_blocked); one that is not is dropped as it is sent, so the
    wait runs to its timeout (sigwait's classic mistake)."""
    _ignore(kernel, timers.SIGALRM)
    if blocked:
        _mask(kernel, SIG_BLOCK, timers.SIGALRM)
    _alarm(kernel, 1000, None)
    start = kernel.now_ns()
    result = _sigwait(kernel, timers.SIGALRM, timeout=(0, 5_000_000))
    if blocked:
        assert result == timers.SIGALRM and kernel.now_ns() == start + 1_000_000
    else:
        assert result == -errno.EAGAIN and kernel.now_ns() == start + 5_000_000
    assert kernel.signals.pending == []


def _timer(kernel, value: int, interval: int = 0, flags: int = SA_SIGINFO) -> int:
    """A monotonic timer for SIGUSR1, handled with `flags`; its id."""
    kernel.signals.actions[SIGUSR1] = signals.Action(HANDLER, flags, 0, 0)
    timer_id = _create(kernel, MONOTONIC, value=0x55)
    assert _set(kernel, timer_id, value, interval) == 0
    return timer_id


def test_a_posix_timers_signal_ends_a_poll_and_its_handler_gets_the_timers_siginfo(kernel):
    read_end, _ = _pipe(kernel)
    timer_id = _timer(kernel, 3_000_000, flags=SA_SIGINFO | SA_RESTART)
    kernel.machine.write(POLL, struct.pack("<ihh", read_end, 1, 0))
    _at_svc(kernel, number="poll")
    start = kernel.now_ns()
    call(kernel, "poll", POLL, 1, -1 & 0xFFFFFFFF)  # only a handler could write: the clock jumps to the timer
    assert kernel.now_ns() == start + 3_000_000 and _r0(kernel) == -ERESTART_RESTARTBLOCK
    assert _delivered(kernel).r[0] == -errno.EINTR & 0xFFFFFFFF  # poll's: EINTR whatever SA_RESTART says
    info = struct.unpack("<iiiiiI", kernel.machine.read(kernel.machine.registers.r[1], 24))
    assert info == (SIGUSR1, 0, SI_TIMER, timer_id, 0, 0x55)


def test_a_periodic_timers_signal_restarts_a_pipe_read_under_sa_restart_and_the_timer_goes_on(kernel):
    read_end, _ = _pipe(kernel)
    timer_id = _timer(kernel, 2_000_000, interval=1_000_000, flags=SA_SIGINFO | SA_RESTART)
    _at_svc(kernel, number="read")
    call(kernel, "read", read_end, READ, 16)
    assert _r0(kernel) == -ERESTARTSYS
    timer = kernel.timers.posix.by_id[timer_id]
    assert not timer.active  # its signal waits to be taken
    saved = _delivered(kernel)
    assert (saved.r[0], saved.r[15]) == (read_end, SVC)  # back on the svc: the read runs again
    assert timer.active and timer.due == kernel.now_ns() + 1_000_000  # taken: armed again


def test_a_timer_whose_signal_is_ignored_ends_no_wait_on_files(kernel):
    read_end, _ = _pipe(kernel)
    _timer(kernel, 1_000_000, interval=1_000_000)
    _ignore(kernel, SIGUSR1)
    kernel.machine.write(POLL, struct.pack("<ihh", read_end, 1, 0))
    start = kernel.now_ns()
    assert call(kernel, "poll", POLL, 1, 5) == 0  # the clock goes to the poll's deadline, past the timer's
    assert kernel.now_ns() == start + 5_000_000 and kernel.signals.pending == []


def test_a_signal_to_the_process_is_dropped_as_its_first_thread_would_drop_it(kernel):
    """sig_ignored asks the task the pid names, the first thread: where it
    blocks an ignored signal, the signal is queued on a thread that does
    not block it, ends its wait, and is dropped as it is delivered: no
    handler runs, so the sleep goes on through restart_syscall."""
    _ignore(kernel, SIGUSR1)
    _mask(kernel, SIG_BLOCK, SIGUSR1)
    tid = _spawn(kernel)  # with MAIN's mask
    call(kernel, "sched_yield")
    assert _running(kernel) == tid
    _mask(kernel, SIG_UNBLOCK, SIGUSR1)
    kernel.machine.write(READ, struct.pack("<iI", 2, 0))
    _at_svc(kernel, number="nanosleep")
    call(kernel, "nanosleep", READ, 0)  # the thread sleeps: MAIN runs
    assert _running(kernel) == MAIN and call(kernel, "kill", MAIN, SIGUSR1) == 0
    thread = kernel.threads.find(tid)
    assert thread.wait is None and thread.signals.pending == [signals.Pending(SIGUSR1, SI_USER)]
    _to(kernel, tid)
    assert signals.deliver_pending(kernel) is None and thread.signals.pending == []
    now = kernel.machine.registers
    assert (now.r[7], now.r[15]) == (0, SVC)  # restart_syscall, on the svc


def test_every_thread_waiting_the_clock_jumps_to_a_timer_that_ends_a_signal_wait_then_to_a_polls_deadline(kernel):
    read_end, _ = _pipe(kernel)
    _mask(kernel, SIG_BLOCK, 34)
    tid = _spawn(kernel)  # it blocks 34 too, as glibc's SIGEV_THREAD helper
    timer_id = _create(kernel, MONOTONIC, SIGEV_THREAD_ID, signal=34, tid=tid)
    start = kernel.now_ns()
    _set(kernel, timer_id, 3_000_000)
    kernel.machine.write(POLL, struct.pack("<ihh", read_end, 1, 0))
    call(kernel, "poll", POLL, 1, 10)  # MAIN waits 10 ms at most: the thread runs
    assert _running(kernel) == tid
    assert _sigwait(kernel, 34) == 34 and kernel.now_ns() == start + 3_000_000  # the timer first
    assert kernel.threads.find(MAIN).wait is not None
    _sigwait(kernel, 34)  # nothing is due before the poll's deadline
    assert _running(kernel) == MAIN and _r0(kernel) == 0 and kernel.now_ns() == start + 10_000_000


def test_a_deadlock_names_the_threads_waiting_in_rt_sigtimedwait(kernel):
    read_end, _ = _pipe(kernel)
    _spawn(kernel)
    _spawn(kernel)
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)
    call(kernel, "read", read_end, READ, 16)
    with pytest.raises(SystemCallFault, match=f"a deadlock \\(thread {MAIN} on the futex at {WORD:#x}, "
                                              f"thread {MAIN + 1} on read from an empty pipe \\(fd {read_end}\\), "
                                              f"thread {MAIN + 2} in rt_sigtimedwait for signals 12, 34\\)"):
        _sigwait(kernel, 12, 34)


def test_one_thread_alone_in_rt_sigtimedwait_with_no_timer_is_a_deadlock_named(kernel):
    with pytest.raises(SystemCallFault, match=f"a deadlock \\(thread {MAIN} in rt_sigtimedwait for signals 12\\)"):
        _sigwait(kernel, 12)
