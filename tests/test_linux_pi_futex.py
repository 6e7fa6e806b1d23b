"""Priority-inheritance futexes as Linux's (harness.linux.pi_futex): the
word's owner and FUTEX_WAITERS bit, the lock handed to the first waiter,
the errors, a timeout and a signal's restart, on a plain machine; then
PTHREAD_PRIO_INHERIT mutexes in a C program, run as under qemu-user."""

from __future__ import annotations

import errno
import struct

import pytest
from linux_calls import SCRATCH, call
from test_linux_process import build, qemu
from test_linux_threads import MAIN, WORD, _running, _set, _spawn

from harness.linux import signals
from harness.linux.call_table import SystemCallFault
from harness.linux.calls_threads import FUTEX_PRIVATE_FLAG, FUTEX_WAKE
from harness.linux.pi_futex import FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_TRYLOCK_PI, FUTEX_UNLOCK_PI, FUTEX_WAITERS
from harness.linux.process import LinuxRun, LinuxSystem
from harness.linux_verify.modules import process_program
from harness.verify.stops import Verify, verify_program

LOCK, UNLOCK, TRYLOCK = FUTEX_LOCK_PI | FUTEX_PRIVATE_FLAG, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, FUTEX_TRYLOCK_PI
EXPECTED = b"counter 12000\ntrylock EBUSY, timedlock ETIMEDOUT, lock 0\n"


def _word(kernel) -> int:
    return struct.unpack("<I", kernel.machine.read(WORD, 4))[0]


def _switch_to(kernel, tid: int) -> None:
    while _running(kernel) != tid:
        call(kernel, "sched_yield")


def test_a_free_word_is_taken_and_its_owner_may_not_take_it_again(kernel):
    _set(kernel, WORD, 0)
    assert call(kernel, "futex", WORD, LOCK, 0) == 0 and _word(kernel) == MAIN
    assert call(kernel, "futex", WORD, LOCK, 0) == -errno.EDEADLK
    assert call(kernel, "futex", WORD, UNLOCK, 0) == 0 and _word(kernel) == 0  # none waits: 0
    assert call(kernel, "futex", WORD, UNLOCK, 0) == -errno.EPERM  # not its owner
    _set(kernel, WORD, 9999)
    assert call(kernel, "futex", WORD, LOCK, 0) == -errno.ESRCH  # its owner is no thread
    assert call(kernel, "futex", WORD + 2, LOCK, 0) == -errno.EINVAL


def test_a_locker_waits_with_the_waiters_bit_and_the_unlock_hands_it_the_lock(kernel):
    tid = _spawn(kernel)
    _set(kernel, WORD, MAIN)  # main holds it, taken in user space
    _switch_to(kernel, tid)
    assert call(kernel, "futex", WORD, TRYLOCK, 0) == -errno.EWOULDBLOCK
    assert _word(kernel) == MAIN | FUTEX_WAITERS  # as futex_lock_pi_atomic leaves it
    call(kernel, "futex", WORD, LOCK, 0)  # waits: main runs
    assert _running(kernel) == MAIN and kernel.threads.find(tid).wait.pi
    assert call(kernel, "futex", WORD, FUTEX_WAKE, 1) == 0  # a plain wake does not end a PI wait
    assert call(kernel, "futex", WORD, UNLOCK, 0) == 0
    assert _word(kernel) == tid | FUTEX_WAITERS  # wake_futex_pi's new value
    _switch_to(kernel, tid)
    assert kernel.machine.registers.r[0] == 0  # its lock returned: it owns the word
    assert call(kernel, "futex", WORD, UNLOCK, 0) == 0 and _word(kernel) == 0


def test_a_timed_lock_times_out_on_the_emulated_clock(kernel):
    tid = _spawn(kernel)
    _set(kernel, WORD, tid)
    deadline = kernel.now_ns() + 5000  # absolute
    kernel.machine.write(SCRATCH + 0x200, struct.pack("<iI", deadline // 10**9, deadline % 10**9))
    call(kernel, "futex", WORD, FUTEX_LOCK_PI2, 0, SCRATCH + 0x200)  # main waits; the thread runs, then sleeps
    assert _running(kernel) == tid
    kernel.machine.write(SCRATCH + 0x300, struct.pack("<iI", 0, 1_000_000))
    call(kernel, "nanosleep", SCRATCH + 0x300, 0)
    assert _running(kernel) == MAIN and kernel.machine.registers.r[0] == -errno.ETIMEDOUT & 0xFFFFFFFF
    assert kernel.now_ns() == deadline and _word(kernel) == tid | FUTEX_WAITERS


def test_a_signal_ends_a_locks_wait_and_the_lock_is_asked_again_after_the_handler(kernel):
    tid = _spawn(kernel)
    kernel.signals.actions[10] = signals.Action(0x9001, signals.SA_SIGINFO, 0, 0)  # no SA_RESTART
    _set(kernel, WORD, tid)
    pc = kernel.machine.registers.r[15]
    call(kernel, "futex", WORD, LOCK, 0)  # main waits; the thread runs
    assert _running(kernel) == tid and call(kernel, "tgkill", MAIN, MAIN, 10) == 0
    call(kernel, "sched_yield")
    assert _running(kernel) == MAIN
    interrupted = signals.deliver_pending(kernel)
    assert interrupted is not None and interrupted.r[0] == WORD  # ERESTARTNOINTR: not EINTR, the call again
    assert interrupted.r[15] == pc - (2 if interrupted.cpsr & signals.THUMB else 4)


def test_the_requeue_commands_and_an_owner_that_exits_with_waiters_end_the_run_named(kernel):
    with pytest.raises(SystemCallFault, match="FUTEX_CMP_REQUEUE_PI at .*not emulated"):
        call(kernel, "futex", WORD, 12 | FUTEX_PRIVATE_FLAG, 0)
    tid = _spawn(kernel)
    _set(kernel, WORD, tid)
    call(kernel, "futex", WORD, LOCK, 0)
    assert _running(kernel) == tid
    with pytest.raises(SystemCallFault, match=f"thread {tid} exits owning the PI futex"):
        call(kernel, "exit", 0)


def test_priority_inheritance_mutexes_run_as_under_qemu(compiled):
    program = build("pi_mutex.c", "-static", "-pthread")
    assert qemu(program) == (0, EXPECTED)
    system = LinuxSystem(LinuxRun(program))
    result = verify_program(process_program(system), [], how=Verify(compiled=compiled), system=system)
    assert result.fault is None
    assert (system.outcome().exit_status, system.outcome().stdout) == (0, EXPECTED)
