"""Waits, and the signals that end them, as Linux has them. Signals
(harness.linux.signals._restart): each kind of call's restart code, made
EINTR or a restart by the handler's SA_RESTART, or a restart where no
handler runs; signals the process ignores end no wait. Waits on files
(harness.linux.threads): a pipe, an eventfd, poll, select and epoll_wait
woken by another thread or ended by their timeout on the emulated clock,
writes that wait for room, deadlocks named; the masks ppoll and pselect6
wait under. Unit tests on a plain machine (the real-time timer's SIGALRM
ends the waits of one thread), then tests/linux_src/file_waits.c run as
under qemu-user, twice alike, with both hooks alike.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import replace

import pytest
from linux_calls import NUMBERS, SCRATCH, call
from test_linux_process import _chains, _live, build, qemu, run_process, sysroot
from test_linux_threads import MAIN, _spawn

from harness.linux import signals, timers
from harness.linux.call_table import SystemCallFault
from harness.linux.calls_threads import FUTEX_WAIT, FUTEX_WAIT_BITSET
from harness.linux.kernel import FIXED_TIME
from harness.linux.process import LinuxRun
from harness.linux.signals import ERESTART_RESTARTBLOCK, ERESTARTNOHAND, ERESTARTSYS, SA_RESTART, SA_SIGINFO
from harness.linux_verify.verify import verify_process
from harness.unwind.registry import build_unwinders

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


# ------------------------------------------------------------- waits on files across threads

PIPE, BUFFER, POLLED, SETS = SCRATCH + 0x600, SCRATCH + 0x700, SCRATCH + 0x800, SCRATCH + 0x900


def _pipe(kernel, flags: int = 0) -> tuple[int, int]:
    assert call(kernel, "pipe2", PIPE, flags) == 0
    return struct.unpack("<ii", kernel.machine.read(PIPE, 8))


def _to(kernel, tid: int) -> None:
    """Yield until thread `tid` runs (after a turn of every thread at most)."""
    for _ in range(len(kernel.threads.all)):
        if kernel.threads.current.tid == tid:
            return
        call(kernel, "sched_yield")
    assert kernel.threads.current.tid == tid


def _write(kernel, fd: int, data: bytes) -> int:
    kernel.machine.write(BUFFER + 0x80, data)
    return call(kernel, "write", fd, BUFFER + 0x80, len(data))


def test_a_read_of_an_empty_pipe_waits_until_another_thread_writes(kernel):
    read_end, write_end = _pipe(kernel)
    tid = _spawn(kernel)
    assert call(kernel, "read", read_end, BUFFER, 16) == 0  # main waits: the thread runs
    assert kernel.threads.current.tid == tid
    assert _write(kernel, write_end, b"ping") == 4
    main = kernel.threads.find(MAIN)
    assert main.wait is None and kernel.threads.current.tid == tid  # ready; the writer goes on
    assert kernel.machine.read(BUFFER, 4) == bytes(4)  # nothing read until the reader runs
    _to(kernel, MAIN)
    assert _r0(kernel) == 4 and kernel.machine.read(BUFFER, 4) == b"ping"


def test_a_reader_that_finds_the_pipe_drained_by_another_waits_again(kernel):
    read_end, write_end = _pipe(kernel)
    first, second = _spawn(kernel), _spawn(kernel)
    call(kernel, "read", read_end, BUFFER, 16)  # main waits
    assert kernel.threads.current.tid == first
    call(kernel, "read", read_end, BUFFER + 0x20, 16)  # the first waits too
    assert kernel.threads.current.tid == second
    assert _write(kernel, write_end, b"x") == 1  # both are ready: main, first to wait, runs first
    call(kernel, "sched_yield")
    assert kernel.threads.current.tid == MAIN and _r0(kernel) == 1
    assert kernel.threads.find(first).wait is None  # ready: its read goes on when it runs
    call(kernel, "sched_yield")  # it finds the pipe drained and waits again; the second runs
    assert kernel.threads.current.tid == second and [thread.tid for thread in kernel.threads.waiting] == [first]
    call(kernel, "close", write_end)  # no writer left: the end of the file
    _to(kernel, first)
    assert _r0(kernel) == 0


def _writer_and_reader(kernel) -> tuple[int, int]:
    """A pipe, a thread, and a mapping at 0x100000 for long writes; SIGUSR1 handled."""
    ends = _pipe(kernel)
    _spawn(kernel)
    kernel.machine.map(0x100000, 0x20000)
    kernel.signals.actions[10] = signals.Action(HANDLER, 0, 0, 0)
    return ends


def test_a_write_to_a_full_pipe_puts_in_what_fits_and_waits_for_room_for_the_rest(kernel):
    read_end, write_end = _writer_and_reader(kernel)
    assert call(kernel, "write", write_end, 0x100000, 0x18000) == 0  # 96 KiB: 64 KiB in, main waits
    assert call(kernel, "read", read_end, BUFFER, 0x100) == 0x100  # the thread makes room for 256 bytes
    call(kernel, "sched_yield")  # main puts them in and waits again
    assert kernel.threads.current.tid != MAIN and len(kernel.threads.waiting) == 1
    kernel.machine.map(0x200000, 0x10000)
    assert call(kernel, "read", read_end, 0x200000, 0x10000) == 0x10000
    _to(kernel, MAIN)
    assert _r0(kernel) == 0x18000  # all in


def test_a_signal_ends_a_write_with_what_it_wrote(kernel):
    read_end, write_end = _writer_and_reader(kernel)
    assert call(kernel, "write", write_end, 0x100000, 0x18000) == 0
    assert call(kernel, "tgkill", 4242, MAIN, 10) == 0
    _to(kernel, MAIN)
    assert _r0(kernel) == 0x10000 and signals.deliver_pending(kernel) is not None


def test_a_write_of_at_most_pipe_buf_bytes_waits_for_room_for_all(kernel):
    read_end, write_end = _writer_and_reader(kernel)
    assert call(kernel, "write", write_end, 0x100000, 0xFF80) == 0xFF80  # 128 bytes of room left
    assert call(kernel, "write", write_end, 0x100000, 0x1000) == 0  # 4 KiB: all or nothing, main waits
    assert call(kernel, "read", read_end, BUFFER, 0x100) == 0x100  # room for 384: not enough
    call(kernel, "sched_yield")
    assert kernel.threads.current.tid != MAIN and kernel.threads.find(MAIN).wait is not None
    assert call(kernel, "tgkill", 4242, MAIN, 10) == 0
    _to(kernel, MAIN)
    assert _r0(kernel) == -ERESTARTSYS  # nothing written: EINTR, or again under SA_RESTART


def test_a_write_without_a_reader_fails_with_epipe_and_sigpipe(kernel):
    read_end, write_end = _pipe(kernel)
    assert call(kernel, "close", read_end) == 0
    assert _write(kernel, write_end, b"lost") == -errno.EPIPE
    assert kernel.signals.pending == [signals.Pending(13, 0)]  # SIGPIPE, SI_USER: its default ends the process


def test_an_eventfd_read_waits_for_a_write(kernel):
    event = call(kernel, "eventfd2", 0, 0)
    tid = _spawn(kernel)
    call(kernel, "read", event, BUFFER, 8)
    assert kernel.threads.current.tid == tid
    assert _write(kernel, event, struct.pack("<Q", 5)) == 8
    _to(kernel, MAIN)
    assert _r0(kernel) == 8 and struct.unpack("<Q", kernel.machine.read(BUFFER, 8))[0] == 5


def test_poll_waits_for_another_thread_and_its_timeout_moves_the_clock(kernel):
    read_end, write_end = _pipe(kernel)
    kernel.machine.write(POLLED, struct.pack("<ihh", read_end, 1, 0))
    tid = _spawn(kernel)
    call(kernel, "poll", POLLED, 1, (-1) & 0xFFFFFFFF)
    assert kernel.threads.current.tid == tid
    _write(kernel, write_end, b"!")
    _to(kernel, MAIN)
    assert _r0(kernel) == 1 and struct.unpack("<ihh", kernel.machine.read(POLLED, 8)) == (read_end, 1, 1)
    call(kernel, "read", read_end, BUFFER, 1)
    start = kernel.now_ns()
    assert call(kernel, "poll", POLLED, 1, 0) == 0 and kernel.now_ns() == start  # a timeout of 0: at once
    call(kernel, "poll", POLLED, 1, 250)  # the thread exits: nothing can come, the clock jumps 250 ms
    call(kernel, "exit", 0)
    assert kernel.threads.current.tid == MAIN and _r0(kernel) == 0 and kernel.now_ns() >= start + 250_000_000
    assert struct.unpack("<ihh", kernel.machine.read(POLLED, 8)) == (read_end, 1, 0)


def test_select_clears_its_sets_at_the_timeout_and_writes_the_time_left(kernel):
    read_end, write_end = _pipe(kernel)
    kernel.machine.write(SETS, struct.pack("<I", 1 << read_end))
    kernel.machine.write(TIMESPEC, struct.pack("<ii", 0, 1_500_000))  # 1.5 s as microseconds: carried
    start = kernel.now_ns()
    assert call(kernel, "_newselect", read_end + 1, SETS, 0, 0, TIMESPEC) == 0
    assert kernel.now_ns() == start + 1_500_000_000
    assert kernel.machine.read(SETS, 4) == bytes(4) and kernel.machine.read(TIMESPEC, 8) == bytes(8)
    tid = _spawn(kernel)
    kernel.machine.write(SETS, struct.pack("<I", 1 << read_end))
    kernel.machine.write(TIMESPEC, struct.pack("<ii", 2, 0))
    call(kernel, "_newselect", read_end + 1, SETS, 0, 0, TIMESPEC)
    assert kernel.threads.current.tid == tid
    kernel.machine.executed += 1000  # a microsecond on
    _write(kernel, write_end, b"!")
    _to(kernel, MAIN)
    assert _r0(kernel) == 1 and struct.unpack("<I", kernel.machine.read(SETS, 4))[0] == 1 << read_end
    assert struct.unpack("<ii", kernel.machine.read(TIMESPEC, 8)) == (1, 999_999)  # the time left


def test_epoll_wait_waits_for_another_thread_or_its_timeout(kernel):
    epfd, event = call(kernel, "epoll_create1", 0), call(kernel, "eventfd2", 0, 0)
    kernel.machine.write(SCRATCH + 0xA00, struct.pack("<I4xQ", 1, 77))
    assert call(kernel, "epoll_ctl", epfd, 1, event, SCRATCH + 0xA00) == 0
    tid = _spawn(kernel)
    call(kernel, "epoll_wait", epfd, BUFFER, 4, (-1) & 0xFFFFFFFF)
    assert kernel.threads.current.tid == tid
    _write(kernel, event, struct.pack("<Q", 1))
    _to(kernel, MAIN)
    assert _r0(kernel) == 1 and kernel.machine.read(BUFFER, 16) == struct.pack("<I4xQ", 1, 77)
    call(kernel, "read", event, BUFFER, 8)
    start = kernel.now_ns()
    call(kernel, "epoll_wait", epfd, BUFFER, 4, 30)
    call(kernel, "exit", 0)  # the thread exits: nothing can come, the clock jumps 30 ms
    assert _r0(kernel) == 0 and kernel.now_ns() >= start + 30_000_000


def test_waits_on_files_no_thread_can_end_are_a_deadlock_naming_each(kernel):
    read_end, _ = _pipe(kernel)
    tid = _spawn(kernel)
    call(kernel, "read", read_end, BUFFER, 4)
    with pytest.raises(SystemCallFault, match=f"a deadlock \\(thread {MAIN} on read from an empty pipe \\(fd {read_end}\\), "
                                              f"thread {tid} on the futex at {WORD:#x}\\)"):
        call(kernel, "futex", WORD, FUTEX_WAIT, 0)


# ------------------------------------------------------------- signals and waits on files


def test_a_pipe_read_restarts_under_sa_restart_and_fails_with_eintr_without(kernel):
    read_end, _ = _pipe(kernel)
    for flags, expected in ((SA_RESTART, read_end), (0, -errno.EINTR & 0xFFFFFFFF)):
        kernel.signals.blocked = 0
        _alarm(kernel, 1000, flags)
        _at_svc(kernel, number="read")
        call(kernel, "read", read_end, BUFFER, 16)
        assert _r0(kernel) == -ERESTARTSYS
        saved = _delivered(kernel)
        assert saved.r[0] == expected and saved.r[15] == (SVC if flags else SVC + 2)


@pytest.mark.parametrize("name", ["poll", "epoll_wait"])
def test_poll_and_epoll_wait_fail_with_eintr_whatever_sa_restart_says(kernel, name):
    read_end, _ = _pipe(kernel)
    kernel.machine.write(POLLED, struct.pack("<ihh", read_end, 1, 0))
    epfd = call(kernel, "epoll_create1", 0)
    kernel.machine.write(SCRATCH + 0xA00, struct.pack("<I4xQ", 1, 0))
    assert call(kernel, "epoll_ctl", epfd, 1, read_end, SCRATCH + 0xA00) == 0
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel, number=name)
    start = kernel.now_ns()
    if name == "poll":
        call(kernel, "poll", POLLED, 1, 5000)
        assert _r0(kernel) == -ERESTART_RESTARTBLOCK
    else:
        call(kernel, "epoll_wait", epfd, BUFFER, 4, 5000)
        assert _r0(kernel) == -errno.EINTR  # ep_poll's own
    assert kernel.now_ns() == start + 1_000_000  # the alarm, before the 5 s
    saved = _delivered(kernel)
    assert saved.r[0] == -errno.EINTR & 0xFFFFFFFF and saved.r[15] == SVC + 2


def test_an_interrupted_ppoll_writes_the_time_left(kernel):
    read_end, _ = _pipe(kernel)
    kernel.machine.write(POLLED, struct.pack("<ihh", read_end, 1, 0))
    kernel.machine.write(TIMESPEC, struct.pack("<qq", 2, 0))
    _alarm(kernel, 500_000, SA_RESTART)
    _at_svc(kernel, number="ppoll_time64")
    call(kernel, "ppoll_time64", POLLED, 1, TIMESPEC, 0, 8)
    assert _r0(kernel) == -ERESTARTNOHAND
    assert struct.unpack("<qq", kernel.machine.read(TIMESPEC, 16)) == (1, 500_000_000)
    assert _delivered(kernel).r[0] == -errno.EINTR & 0xFFFFFFFF


# ------------------------------------------------------------- the masks ppoll, pselect6 and epoll_pwait wait under

SIGUSR1_BIT, SIGALRM_BIT, SIGTERM_BIT = 1 << 9, 1 << (timers.SIGALRM - 1), 1 << 14


def test_pselect_lets_a_pending_signal_through_its_mask_at_once(kernel):
    """The classic use: SIGUSR1 blocked, already pending; pselect6 with a
    mask without it ends at once (a zero timeout too), the handler runs,
    and its sigreturn brings the blocking mask back."""
    read_end, _ = _pipe(kernel)
    kernel.signals.actions[10] = signals.Action(HANDLER, 0, 0, 0)
    kernel.signals.blocked = SIGUSR1_BIT | SIGTERM_BIT
    assert call(kernel, "kill", 4242, 10) == 0 and kernel.signals.pending == [signals.Pending(10, 0)]
    kernel.machine.write(SETS, struct.pack("<I", 1 << read_end))
    kernel.machine.write(TIMESPEC, struct.pack("<ii", 0, 0))
    kernel.machine.write(SCRATCH + 0xB00, struct.pack("<QII", 0, SCRATCH + 0xB00, 8))  # the mask, then its pack
    _at_svc(kernel, number="pselect6")
    call(kernel, "pselect6", read_end + 1, SETS, 0, 0, TIMESPEC, SCRATCH + 0xB08)
    assert _r0(kernel) == -ERESTARTNOHAND and kernel.signals.blocked == 0  # under its mask until delivered
    saved = _delivered(kernel)
    assert saved.r[0] == -errno.EINTR & 0xFFFFFFFF
    assert kernel.signals.blocked == SIGUSR1_BIT  # the handler's: the call's mask and its signal
    call(kernel, "sigreturn")  # a handler without SA_SIGINFO: the plain frame
    assert kernel.signals.blocked == SIGUSR1_BIT | SIGTERM_BIT  # the thread's own
    assert kernel.machine.registers.r[15] == SVC + 2


def test_a_signal_ppoll_blocks_waits_until_the_call_is_over(kernel):
    read_end, _ = _pipe(kernel)
    kernel.machine.write(POLLED, struct.pack("<ihh", read_end, 1, 0))
    kernel.machine.write(TIMESPEC, struct.pack("<qq", 0, 5_000_000))
    kernel.machine.write(SCRATCH + 0xB00, struct.pack("<Q", SIGALRM_BIT))
    _alarm(kernel, 1000, SA_RESTART)
    _at_svc(kernel, number="ppoll_time64")
    start = kernel.now_ns()
    call(kernel, "ppoll_time64", POLLED, 1, TIMESPEC, SCRATCH + 0xB00, 8)  # SIGALRM at 1 ms: blocked
    assert _r0(kernel) == 0 and kernel.now_ns() == start + 5_000_000  # timed out
    assert kernel.signals.blocked == 0 and kernel.signals.pending == [signals.Pending(timers.SIGALRM, 0x80)]
    assert _delivered(kernel).r[0] == 0  # delivered once the call is over: no restart
    assert call(kernel, "ppoll_time64", POLLED, 1, TIMESPEC, SCRATCH + 0xB00, 4) == -errno.EINVAL
    assert call(kernel, "epoll_pwait", call(kernel, "epoll_create1", 0), BUFFER, 1, 0, SCRATCH + 0xB00, 4) \
        == -errno.EINVAL


# ------------------------------------------------------------- a program that waits on files

FILE_WAITS_OUTPUT = (b"reader got 5 bytes: hello\neventfd read 7\npoll woke: 1, POLLIN yes\n"
                     b"epoll_wait woke: 1, data 42, count 3\npoll timed out: 0, revents 0, 50 ms passed: yes\n"
                     b"select timed out: 0, set cleared, time left 0.000000, 30 ms passed: yes\n"
                     b"nanosleep: -1 EINTR, rem between 900 and 960 ms: yes\nread without SA_RESTART: -1 EINTR\n"
                     b"read with SA_RESTART: 1 x, alarms 3\n"
                     b"pselect: -1 EINTR, handler ran 1, SIGUSR1 blocked again: yes\n")


@pytest.mark.parametrize("link", ["-static", "-Wl,-z,now"])
def test_a_program_waiting_on_files_runs_as_under_qemu_and_repeats(link):
    program = build("file_waits.c", link)
    root = None if link == "-static" else sysroot()
    assert qemu(program, root=root) == (0, FILE_WAITS_OUTPUT)
    runs = []
    for _ in range(2):
        result, system = run_process(program, root=root, unwinders=["dwarf", "framepointer"])
        assert result.fault is None
        assert (system.outcome().exit_status, system.outcome().stdout) == (0, FILE_WAITS_OUTPUT)
        runs.append((result.instructions, result.counts, result.tally.counter(), result.failure_log.first(50),
                     system.kernel.now_ns()))
    assert runs[0] == runs[1]  # byte for byte: the same schedule, the same waits, the same clock


def test_the_shadow_stack_crosses_restarted_calls_alike_in_both_hooks():
    """Both hooks record the same stacks through the waits and the
    restarted read (its handler's frame holds the svc it returns to), and
    dwarf crossing signal frames is never wrong in the handlers."""
    program = build("file_waits.c", "-static")
    chains = _chains(program, compiled=True)
    assert chains == _chains(program, compiled=False)
    _live(chains)
    # the handler's caller: the interrupted svc (in glibc's __libc_do_syscall, called by read)
    assert any(name == "on_alarm" and callers[1] == "read" for name, callers, _, _ in chains)
    result = verify_process(LinuxRun(program), ["dwarf"], lambda built: build_unwinders(built, ["dwarf"]),
                            signal_frames=True)
    assert result.fault is None
    wrong = sum(stops for (_, traits, _, kind), stops in result.counts.items()
                if kind is not None and not kind.startswith("stopped"))
    assert wrong == 0
