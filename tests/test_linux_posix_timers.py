"""POSIX timers (harness.linux.posix_timers, calls_timers) and
rt_sigtimedwait (calls_sigwait) call by call on a plain machine: ids,
clocks and sigevents as Linux checks them, expiry at an exact instruction,
siginfo as ARM lays it out, periodic timers armed again as their signal is
taken with the periods missed counted, the clock's jump to a timer's due
time when every thread waits. Then a C program with timers of each kind
(tests/linux_src/posix_timers.c) run as under qemu-user."""

from __future__ import annotations

import errno
import struct
from dataclasses import replace

import pytest
from linux_calls import SCRATCH, call
from test_linux_process import build, qemu
from test_linux_threads import MAIN, WORD, _running, _spawn

from harness.linux import calls_timers, signals
from harness.linux.call_table import SystemCallFault
from harness.linux.calls_threads import FUTEX_WAIT
from harness.linux.posix_timers import KTIME_MAX, SI_TIMER, SIGEV_NONE, SIGEV_SIGNAL, SIGEV_THREAD, SIGEV_THREAD_ID
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import process_program
from harness.linux_verify.verify import verify_process
from harness.unwind.registry import build_unwinders
from harness.verify.stops import Verify, verify_program

EVENT, CREATED, SPEC, OLD, INFO, SET = (SCRATCH + offset for offset in (0x600, 0x680, 0x700, 0x740, 0x800, 0x900))
REALTIME, MONOTONIC, PROCESS_CPU, THREAD_CPU, BOOTTIME = 0, 1, 2, 3, 7
GLIBC_PROCESS_CPU, GLIBC_THREAD_CPU = -6, -2  # what glibc's timer_create passes for the two (CPUCLOCK_SCHED of pid 0)
NSEC = 1_000_000_000
HANDLER = signals.Action(0x9001, signals.SA_SIGINFO | signals.SA_RESTORER, 0x8000, 0)


def _create(kernel, clock: int, notify: int | None = SIGEV_SIGNAL, signal: int = 10, value: int = 0x1234,
            tid: int = 0) -> int:
    """timer_create; the new timer's id, or the call's error (negative)."""
    if notify is not None:
        kernel.machine.write(EVENT, struct.pack("<Iiii", value, signal, notify, tid).ljust(64, b"\0"))
    result = call(kernel, "timer_create", clock & 0xFFFFFFFF, EVENT if notify is not None else 0, CREATED)
    return result if result < 0 else struct.unpack("<i", kernel.machine.read(CREATED, 4))[0]


def _set(kernel, timer_id: int, value: int, interval: int = 0, flags: int = 0, old: int = 0) -> int:
    kernel.machine.write(SPEC, struct.pack("<iiii", interval // NSEC, interval % NSEC, value // NSEC, value % NSEC))
    return call(kernel, "timer_settime", timer_id & 0xFFFFFFFF, flags, SPEC, old)


def _get(kernel, timer_id: int) -> tuple[int, int]:
    """timer_gettime's (interval, value) in ns."""
    assert call(kernel, "timer_gettime", timer_id, OLD) == 0
    interval_s, interval_ns, value_s, value_ns = struct.unpack("<iiii", kernel.machine.read(OLD, 16))
    return interval_s * NSEC + interval_ns, value_s * NSEC + value_ns


def _mask(kernel, how: int, *numbers: int) -> None:
    kernel.machine.write(SET, struct.pack("<Q", sum(1 << (number - 1) for number in numbers)))
    assert call(kernel, "rt_sigprocmask", how, SET, 0, 8) == 0


def _handled_siginfo(kernel) -> tuple[int, ...]:
    """Deliver the pending signal to HANDLER, on a stack in SCRATCH, as if
    it then returned: its siginfo's signo, errno, code, timerid, overrun
    and value (ARM's layout)."""
    kernel.signals.actions[10] = HANDLER
    registers, blocked = kernel.machine.registers, kernel.signals.blocked
    kernel.machine.registers = replace(registers, r=registers.r[:13] + (SCRATCH + 0x4000,) + registers.r[14:])
    assert signals.deliver_pending(kernel) is not None
    info = struct.unpack("<iiiiiI", kernel.machine.read(kernel.machine.registers.r[1], 24))
    kernel.machine.registers, kernel.signals.blocked = registers, blocked
    return info


# ------------------------------------------------------------- timer_create


def test_ids_count_up_from_0_and_are_not_reused(kernel):
    assert [_create(kernel, MONOTONIC) for _ in range(3)] == [0, 1, 2]
    assert call(kernel, "timer_delete", 1) == 0
    assert _create(kernel, MONOTONIC) == 3  # the process's counter, as posix_timer_add's
    assert _create(kernel, 12) == -errno.EINVAL  # no such clock: no id spent
    assert _create(kernel, 8) == -errno.EPERM  # CLOCK_REALTIME_ALARM: no CAP_WAKE_ALARM, after the id was spent
    assert _create(kernel, MONOTONIC, notify=3) == -errno.EINVAL  # a bad sigevent too
    assert _create(kernel, MONOTONIC) == 6


def test_a_timer_without_a_sigevent_sends_sigalrm_with_its_id_as_value(kernel):
    _create(kernel, MONOTONIC)
    timer_id = _create(kernel, REALTIME, notify=None)
    timer = kernel.timers.posix.by_id[timer_id]
    assert (timer.signal, timer.value, timer.notify) == (14, timer_id, SIGEV_SIGNAL)


@pytest.mark.parametrize("clock, answer", [
    (REALTIME, 0), (MONOTONIC, 0), (BOOTTIME, 0), (11, 0), (PROCESS_CPU, 0), (THREAD_CPU, 0),  # CLOCK_TAI: 11
    (GLIBC_PROCESS_CPU, 0), (GLIBC_THREAD_CPU, 0), ((~4242) << 3 | 2, 0), ((~4242) << 3 | 6, 0),  # pid/tid 4242's
    (4, -errno.EOPNOTSUPP), (5, -errno.EOPNOTSUPP), (6, -errno.EOPNOTSUPP),  # MONOTONIC_RAW and the COARSE ones
    (8, -errno.EPERM), (9, -errno.EPERM),  # the _ALARM clocks
    (10, -errno.EINVAL), (12, -errno.EINVAL), (1000, -errno.EINVAL),  # no such clock
    ((~3) << 3 | 3, -errno.EOPNOTSUPP),  # a clock fd's: no timers
    ((~4243) << 3 | 2, -errno.EINVAL), ((~4243) << 3 | 6, -errno.EINVAL),  # no such process or thread
    ((~4242) << 3 | 7, -errno.EINVAL),  # a thread clock of no kind
])
def test_clocks_as_linux_resolves_them(kernel, clock, answer):
    assert min(0, _create(kernel, clock)) == answer


def test_sigevents_as_linux_checks_them(kernel, monkeypatch):
    tid = _spawn(kernel)
    assert _create(kernel, MONOTONIC, SIGEV_THREAD_ID, tid=tid) >= 0
    assert _create(kernel, MONOTONIC, SIGEV_THREAD_ID, tid=9999) == -errno.EINVAL  # not a thread of the process
    assert _create(kernel, MONOTONIC, SIGEV_THREAD) >= 0  # the kernel's SIGEV_THREAD is a signal to the process
    assert _create(kernel, MONOTONIC, SIGEV_NONE, signal=0) >= 0  # no signal: none checked
    for signal in (0, 65, -1):
        assert _create(kernel, MONOTONIC, signal=signal) == -errno.EINVAL
    for notify in (3, 5, 6, 8):
        assert _create(kernel, MONOTONIC, notify=notify) == -errno.EINVAL
    assert call(kernel, "timer_create", MONOTONIC, 0x10, CREATED) == -errno.EFAULT
    assert call(kernel, "timer_create", MONOTONIC, 0, 0x10) == -errno.EFAULT
    monkeypatch.setattr(calls_timers, "MAX_TIMERS", len(kernel.timers.posix.by_id) + 1)
    assert _create(kernel, MONOTONIC) >= 0
    assert _create(kernel, MONOTONIC) == -errno.EAGAIN  # as past RLIMIT_SIGPENDING


# ------------------------------------------------------------- expiry and siginfo


def test_a_timer_expires_at_an_exact_instruction_and_its_siginfo_names_it(kernel):
    _create(kernel, MONOTONIC)
    timer_id = _create(kernel, MONOTONIC, value=0xCAFE)
    assert kernel.deadline() is None
    assert _set(kernel, timer_id, 1000) == 0
    assert kernel.deadline() == kernel.machine.executed + 1000  # a nanosecond an instruction
    kernel.machine.executed += 999
    assert not kernel.expire_timers()
    kernel.machine.executed += 1
    assert kernel.expire_timers() and kernel.deadline() is None
    assert [(entry.signal, entry.code) for entry in kernel.signals.pending] == [(10, SI_TIMER)]
    assert _handled_siginfo(kernel) == (10, 0, SI_TIMER, timer_id, 0, 0xCAFE)
    assert _get(kernel, timer_id) == (0, 0)  # a one-shot timer that expired


def test_an_absolute_time_on_the_timers_clock(kernel):
    timer_id = _create(kernel, REALTIME)
    assert _set(kernel, timer_id, kernel.now_ns() + 2500, flags=1) == 0  # TIMER_ABSTIME
    assert kernel.deadline() == kernel.machine.executed + 2500 and _get(kernel, timer_id) == (0, 2500)
    assert _set(kernel, timer_id, kernel.now_ns() - 1, flags=1) == 0  # past: it expires at once
    assert kernel.expire_timers() and kernel.signals.pending


def test_a_periodic_timer_waits_for_its_signal_to_be_taken_and_counts_the_periods_missed(kernel):
    _mask(kernel, 0, 10)  # SIG_BLOCK
    timer_id = _create(kernel, MONOTONIC)
    assert _set(kernel, timer_id, 1000, interval=1000) == 0
    kernel.machine.executed += 1000
    assert kernel.expire_timers() and kernel.deadline() is None  # its signal waits: it is not armed meanwhile
    kernel.machine.executed += 3500
    assert not kernel.expire_timers() and len(kernel.signals.pending) == 1
    assert _get(kernel, timer_id) == (1000, 500)  # moved on to its next period (5000)
    assert call(kernel, "timer_getoverrun", timer_id) == 0  # counted when the signal is taken
    _mask(kernel, 1, 10)  # SIG_UNBLOCK
    assert _handled_siginfo(kernel)[3:5] == (timer_id, 3)  # 2000, 3000 and 4000 missed
    assert call(kernel, "timer_getoverrun", timer_id) == 3
    assert kernel.deadline() == kernel.machine.executed + 500  # armed again, on its period
    kernel.machine.executed += 500
    assert kernel.expire_timers() and _handled_siginfo(kernel)[4] == 0


def test_an_expiry_while_its_signal_waits_counts_in_the_queued_signal(kernel):
    _mask(kernel, 0, 10)
    timer_id = _create(kernel, MONOTONIC)
    _set(kernel, timer_id, 1000, interval=1000)
    kernel.machine.executed += 1000
    kernel.expire_timers()
    _set(kernel, timer_id, 100)  # set again: its old signal stays queued, and will not arm it
    kernel.machine.executed += 100
    assert kernel.expire_timers() and len(kernel.signals.pending) == 1
    _mask(kernel, 1, 10)
    assert _handled_siginfo(kernel)[3:5] == (timer_id, 1)
    assert kernel.deadline() is None and call(kernel, "timer_getoverrun", timer_id) == 0


def test_an_ignored_signal_is_not_queued_and_the_timer_goes_on(kernel):
    kernel.signals.actions[10] = signals.Action(signals.SIG_IGN, 0, 0, 0)
    timer_id = _create(kernel, MONOTONIC)
    _set(kernel, timer_id, 20_000_000, interval=20_000_000)  # 20 ms: more than a jiffy
    kernel.machine.executed += 20_000_000
    assert kernel.expire_timers() and not kernel.signals.pending
    assert kernel.deadline() == kernel.machine.executed + 20_000_000


def test_sigev_none_never_signals_but_gettime_follows_it(kernel):
    timer_id = _create(kernel, MONOTONIC, SIGEV_NONE)
    _set(kernel, timer_id, 1000, interval=400)
    assert kernel.deadline() is None  # no signal: no stop
    kernel.machine.executed += 1500
    assert _get(kernel, timer_id) == (400, 300)  # expired at 1000 and 1400; next at 1800
    once = _create(kernel, MONOTONIC, SIGEV_NONE)
    _set(kernel, once, 1000)
    kernel.machine.executed += 999
    assert _get(kernel, once) == (0, 1)
    kernel.machine.executed += 1
    assert _get(kernel, once) == (0, 0)  # expired
    assert not kernel.expire_timers() and not kernel.signals.pending


def test_timer_settime_gives_the_old_setting_and_time64_calls_lay_times_out_in_64_bits(kernel):
    timer_id = _create(kernel, MONOTONIC)
    assert _set(kernel, timer_id, 5 * NSEC + 7, interval=NSEC + 3) == 0
    assert _set(kernel, timer_id, 0, old=OLD) == 0  # disarmed, the old setting given
    assert struct.unpack("<iiii", kernel.machine.read(OLD, 16)) == (1, 3, 5, 7)
    assert _get(kernel, timer_id) == (0, 0) and kernel.deadline() is None
    kernel.machine.write(SPEC, struct.pack("<qiiqii", 2, 9, -1, 1 << 32, 11, -1))  # tv_nsec's high words: padding
    assert call(kernel, "timer_settime64", timer_id, 0, SPEC, 0) == 0
    assert call(kernel, "timer_gettime64", timer_id, OLD) == 0
    assert struct.unpack("<qqqq", kernel.machine.read(OLD, 32)) == (2, 9, 1 << 32, 11)
    kernel.machine.write(SPEC, struct.pack("<qqqq", 0, 0, 1 << 62, 0))  # far past what ktime holds: it saturates
    assert call(kernel, "timer_settime64", timer_id, 0, SPEC, 0) == 0
    assert kernel.timers.posix.by_id[timer_id].due == KTIME_MAX and kernel.deadline() < 1 << 64


def test_bad_ids_and_times(kernel):
    timer_id = _create(kernel, MONOTONIC)
    for bad in (timer_id + 1, -1):
        assert _set(kernel, bad, 1000) == -errno.EINVAL
        assert call(kernel, "timer_gettime", bad & 0xFFFFFFFF, OLD) == -errno.EINVAL
        assert call(kernel, "timer_getoverrun", bad & 0xFFFFFFFF) == -errno.EINVAL
        assert call(kernel, "timer_delete", bad & 0xFFFFFFFF) == -errno.EINVAL
    assert call(kernel, "timer_settime", timer_id, 0, 0, 0) == -errno.EINVAL  # no new setting
    assert _set(kernel, timer_id, NSEC - 1) == 0
    kernel.machine.write(SPEC, struct.pack("<iiii", 0, NSEC, 0, 1))  # tv_nsec of a second
    assert call(kernel, "timer_settime", timer_id, 0, SPEC, 0) == -errno.EINVAL
    kernel.machine.write(SPEC, struct.pack("<iiii", 0, 0, -1, 0))
    assert call(kernel, "timer_settime", timer_id, 0, SPEC, 0) == -errno.EINVAL
    assert call(kernel, "timer_gettime", timer_id, 0x10) == -errno.EFAULT
    assert call(kernel, "timer_delete", timer_id) == 0
    assert call(kernel, "timer_delete", timer_id) == -errno.EINVAL and kernel.deadline() is None


def test_a_deleted_timers_pending_signal_is_still_delivered(kernel):
    _mask(kernel, 0, 10)
    timer_id = _create(kernel, MONOTONIC)
    _set(kernel, timer_id, 10, interval=10)
    kernel.machine.executed += 10
    kernel.expire_timers()
    assert call(kernel, "timer_delete", timer_id) == 0
    _mask(kernel, 1, 10)
    assert _handled_siginfo(kernel)[:4] == (10, 0, SI_TIMER, timer_id)
    assert kernel.deadline() is None  # not armed again


# ------------------------------------------------------------- CPU-time clocks and threads


def test_cpu_time_timers_count_the_process_or_one_thread(kernel):
    process = _create(kernel, GLIBC_PROCESS_CPU)
    own = _create(kernel, GLIBC_THREAD_CPU, SIGEV_THREAD_ID, signal=12, tid=MAIN)
    _set(kernel, process, 3000)
    _set(kernel, own, 2000)
    tid = _spawn(kernel)
    kernel.machine.executed += 500
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)  # MAIN waits, having run 500: the thread runs
    assert _running(kernel) == tid and kernel.deadline() == kernel.machine.executed + 2500  # the process's timer
    kernel.machine.executed += 2500
    assert kernel.expire_timers()  # the process's timer: its signal goes to the thread (MAIN waits on)
    assert [entry.signal for entry in kernel.threads.find(tid).signals.pending] == [10]
    assert kernel.thread_cpu_ns(kernel.threads.find(MAIN)) == 500 and kernel.deadline() is None
    call(kernel, "futex", WORD, 1, 1)  # FUTEX_WAKE: MAIN is ready
    call(kernel, "sched_yield")
    assert _running(kernel) == MAIN and kernel.timers.next_instruction(kernel) == kernel.machine.executed + 1500
    assert _get(kernel, own) == (0, 1500)


def _clock(kernel, clock: int) -> int:
    """clock_gettime64 of `clock`, in ns (or its error, negative)."""
    result = call(kernel, "clock_gettime64", clock & 0xFFFFFFFF, OLD)
    seconds, nanoseconds = struct.unpack("<qI4x", kernel.machine.read(OLD, 16))
    return result if result < 0 else seconds * NSEC + nanoseconds


def test_clock_gettime_reads_cpu_time_on_the_cpu_clocks_that_timers_count_on(kernel):
    kernel.machine.executed = 700
    tid = _spawn(kernel)
    call(kernel, "sched_yield")
    kernel.machine.executed += 300  # the thread runs 300
    assert _clock(kernel, PROCESS_CPU) == _clock(kernel, GLIBC_PROCESS_CPU) == 1000  # an instruction a nanosecond
    assert _clock(kernel, (~MAIN) << 3 | 2) == _clock(kernel, (~tid) << 3 | 2) == 1000  # a pid's; a tid's, its own
    assert _clock(kernel, THREAD_CPU) == _clock(kernel, GLIBC_THREAD_CPU) == 300
    assert _clock(kernel, (~MAIN) << 3 | 6) == 700  # MAIN's own, as pthread_getcpuclockid names it
    assert _clock(kernel, MONOTONIC) == _clock(kernel, REALTIME) == kernel.now_ns()
    for bad in (10, 12, (~4300) << 3 | 6, (~3) << 3 | 3):  # no such clock, thread or clock fd
        assert _clock(kernel, bad) == -errno.EINVAL
    kernel.machine.write(OLD, bytes(16))
    assert call(kernel, "prlimit64", 0, 11, 0, OLD) == 0  # RLIMIT_SIGPENDING: the timers allowed
    assert struct.unpack("<QQ", kernel.machine.read(OLD, 16)) == (calls_timers.MAX_TIMERS,) * 2


def test_an_absolute_time_on_a_cpu_clock(kernel):
    timer_id = _create(kernel, PROCESS_CPU)
    assert _set(kernel, timer_id, _clock(kernel, PROCESS_CPU) + 400, flags=1) == 0
    assert kernel.deadline() == kernel.machine.executed + 400


def test_a_thread_cpu_timer_dies_with_its_thread(kernel):
    tid = _spawn(kernel)
    call(kernel, "sched_yield")
    assert _running(kernel) == tid
    timer_id = _create(kernel, THREAD_CPU)
    assert kernel.timers.posix.by_id[timer_id].clock.thread.tid == tid
    _set(kernel, timer_id, 1000)
    call(kernel, "exit", 0)
    assert _get(kernel, timer_id) == (0, 0) and _set(kernel, timer_id, 1000) == -errno.ESRCH


def test_a_thread_timer_signals_its_thread(kernel):
    tid = _spawn(kernel)
    timer_id = _create(kernel, MONOTONIC, SIGEV_THREAD_ID, tid=tid)
    _set(kernel, timer_id, 100)
    kernel.machine.executed += 100
    assert kernel.expire_timers()
    assert kernel.signals.pending == [] and len(kernel.threads.find(tid).signals.pending) == 1


# ------------------------------------------------------------- rt_sigtimedwait


def _sigwait(kernel, *numbers: int, timeout: tuple[int, int] | None = None, info: int = INFO) -> int:
    kernel.machine.write(SET, struct.pack("<Q", sum(1 << (number - 1) for number in numbers)))
    if timeout is not None:
        kernel.machine.write(SET + 8, struct.pack("<ii", *timeout))
    return call(kernel, "rt_sigtimedwait", SET, info, SET + 8 if timeout is not None else 0, 8)


def test_sigtimedwait_takes_a_pending_signal_without_its_handler(kernel):
    kernel.signals.actions[10] = HANDLER
    _mask(kernel, 0, 10, 12)
    call(kernel, "kill", MAIN, 12)
    call(kernel, "kill", MAIN, 10)
    assert _sigwait(kernel, 10) == 10 and [entry.signal for entry in kernel.signals.pending] == [12]
    assert struct.unpack("<iiiiI", kernel.machine.read(INFO, 20)) == (10, 0, signals.SI_USER, MAIN, 0)
    assert _sigwait(kernel, 10, timeout=(0, 0)) == -errno.EAGAIN  # none pending, no time to wait
    assert _sigwait(kernel, 10, timeout=(0, NSEC)) == -errno.EINVAL
    assert call(kernel, "rt_sigtimedwait", SET, INFO, 0, 4) == -errno.EINVAL
    assert _sigwait(kernel, 12, info=0x10) == -errno.EFAULT and kernel.signals.pending == []  # taken, all the same


def test_sigtimedwait_times_out_with_eagain(kernel):
    start = kernel.now_ns()
    assert _sigwait(kernel, 10, timeout=(0, 7000)) == -errno.EAGAIN
    assert kernel.now_ns() == start + 7000


def test_a_waiting_thread_takes_its_timers_signal_at_once_and_the_timer_is_armed_again(kernel):
    helper = _spawn(kernel)
    call(kernel, "sched_yield")
    assert _running(kernel) == helper
    _mask(kernel, 0, 32)  # glibc's helper thread blocks SIGTIMER (32) and waits for it
    timer_id = _create(kernel, MONOTONIC, SIGEV_THREAD_ID, signal=32, value=0xBEEF, tid=helper)
    _set(kernel, timer_id, 1000, interval=1000)
    assert _sigwait(kernel, 32) == 0 and _running(kernel) == MAIN  # the helper waits
    kernel.machine.executed += 1000
    assert kernel.expire_timers()
    thread = kernel.threads.find(helper)
    assert thread.wait is None and thread.context.r[0] == 32 and thread.signals.pending == []
    assert struct.unpack("<iiiiiI", kernel.machine.read(INFO, 24)) == (32, 0, SI_TIMER, timer_id, 0, 0xBEEF)
    assert kernel.deadline() == kernel.machine.executed + 1000  # taken: armed again at once


def test_an_unblocked_signal_with_a_handler_ends_a_sigwait_with_eintr(kernel):
    helper = _spawn(kernel)
    kernel.signals.actions[12] = HANDLER
    call(kernel, "sched_yield")
    assert _sigwait(kernel, 10) == 0 and _running(kernel) == MAIN
    call(kernel, "tgkill", MAIN, helper, 12)
    thread = kernel.threads.find(helper)
    assert thread.wait is None and thread.context.r[0] == (-errno.EINTR) & 0xFFFFFFFF
    assert [entry.signal for entry in thread.signals.pending] == [12]  # its handler runs as it returns


def test_when_every_thread_waits_the_clock_jumps_to_the_next_timer_whose_signal_wakes_one(kernel):
    """MAIN waits on a futex with no deadline, the helper for SIGTIMER: the
    first timer's signal (blocked by MAIN) wakes no one, the second's wakes
    the helper, at its due time."""
    _mask(kernel, 0, 10)
    helper = _spawn(kernel)  # it blocks 10 too: MAIN's mask
    blocked = _create(kernel, MONOTONIC)
    waking = _create(kernel, MONOTONIC, SIGEV_THREAD_ID, signal=32, tid=helper)
    start = kernel.now_ns()
    _set(kernel, blocked, 1000)
    _set(kernel, waking, 5000)
    call(kernel, "sched_yield")
    _mask(kernel, 0, 32)
    assert _sigwait(kernel, 32) == 0
    call(kernel, "futex", WORD, FUTEX_WAIT, 0)
    assert _running(kernel) == helper and kernel.machine.registers.r[0] == 32
    assert kernel.now_ns() == start + 5000
    assert [entry.signal for entry in kernel.threads.find(MAIN).signals.pending] == [10]


def test_every_thread_waiting_for_a_signal_no_timer_sends_is_a_deadlock(kernel):
    _mask(kernel, 0, 10)
    timer_id = _create(kernel, MONOTONIC)
    _set(kernel, timer_id, 1000)
    with pytest.raises(SystemCallFault, match="the timer's signal wakes none: a deadlock"):
        _sigwait(kernel, 12)


# ------------------------------------------------------------- a program with timers of each kind

EXPECTED = (b"monotonic hits at least 3: 1, cpu-time hits at least 2: 1, siginfo SI_TIMER with its value: 1\n"
            b"overrun at least 9: 1, timer_getoverrun agrees: 1, next expiry within a period: 1\n"
            b"gettime relative 1, absolute 1, disarmed 1, sigev_none expired silently 1\n"
            b"thread cpu-time hits at least 2: 1, in its own thread with its value: 1\n"
            b"sigev_thread callbacks at least 3: 1, off the main thread with its value: 1\n")


def _timed_run(program: str, every: int, compiled: bool) -> int:
    system = LinuxSystem(LinuxRun(program))
    result = verify_program(process_program(system), [], how=Verify(every=every, compiled=compiled), system=system)
    assert result.fault is None
    assert (system.outcome().exit_status, system.outcome().stdout) == (0, EXPECTED)
    return result.instructions


def test_a_program_with_timers_of_each_kind_runs_as_under_qemu_at_the_same_instructions_however_stopped():
    """Timers land in busy loops, in a thread's own loop, and wake glibc's
    SIGEV_THREAD helper while main waits: the same output as qemu-user's,
    at the same instructions whether the hook stops before every
    instruction or at block entries."""
    program = build("posix_timers.c", "-static")
    assert qemu(program) == (0, EXPECTED)
    assert _timed_run(program, 1, True) == _timed_run(program, 97, True)


def test_the_python_hook_places_posix_timers_as_the_compiled_one():
    program = build("posix_timers.c", "-static")
    assert _timed_run(program, 1, False) == _timed_run(program, 1, True)


def test_a_verified_run_of_timers_repeats_its_first_runs_schedule():
    program = build("posix_timers.c", "-static")
    result = verify_process(LinuxRun(program), ["dwarf"], lambda built: build_unwinders(built, ["dwarf"]),
                            how=Verify(every=97))
    assert result.fault is None and result.self_check_ok and result.stops > 1000
