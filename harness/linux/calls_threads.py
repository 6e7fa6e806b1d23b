"""System calls on threads (harness.linux.threads runs them): clone as
glibc's pthread_create makes one, thread exit, futexes, ids, sleeps and
yields. A call that waits blocks its thread; the scheduler runs another.
A signal ends a wait as Linux's: an untimed futex wait returns
ERESTARTSYS (restarted under SA_RESTART, else EINTR), a timed one and a
relative sleep ERESTART_RESTARTBLOCK (EINTR where a handler runs, else
restart_syscall goes on to the same deadline; the sleep writes the time
left), an absolute sleep ERESTARTNOHAND (harness.linux.signals._restart).
Priority-inheritance futexes: harness.linux.pi_futex; their requeue
commands end the run as a fault naming them."""

from __future__ import annotations

import errno
import struct
from dataclasses import replace

from harness.emulation.machine import BadAddress
from harness.linux import pi_futex
from harness.linux.call_table import SystemCallFault, handles
from harness.linux.files import GuestError
from harness.linux.signals import ERESTART_RESTARTBLOCK, ERESTARTNOHAND
from harness.linux.threads import FUTEX_BITSET_ANY, MAX_THREADS, Wait

CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND = 0x100, 0x200, 0x400, 0x800
CLONE_VFORK, CLONE_THREAD, CLONE_SYSVSEM, CLONE_SETTLS = 0x4000, 0x10000, 0x40000, 0x80000
CLONE_PARENT_SETTID, CLONE_CHILD_CLEARTID, CLONE_DETACHED, CLONE_CHILD_SETTID = 0x100000, 0x200000, 0x400000, 0x1000000
EXIT_SIGNAL = 0xFF  # the low byte: the signal a child process sends its parent at exit (none for a thread)
# What a thread may ask besides CLONE_VM|CLONE_SIGHAND|CLONE_THREAD: shared state it has anyway, or ids written.
THREAD_FLAGS = (CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS
                | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | CLONE_DETACHED | CLONE_CHILD_SETTID)
NSEC = 1_000_000_000
TIMER_ABSTIME = 1
TIMESPEC, TIMESPEC64 = "<iI", "<qI4x"  # struct timespec (old_timespec32), __kernel_timespec: as read
REMAINING = {TIMESPEC: "<ii", TIMESPEC64: "<qq"}  # as written

FUTEX_WAIT, FUTEX_WAKE, FUTEX_FD, FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_WAKE_OP = 0, 1, 2, 3, 4, 5
FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET = 9, 10
REQUEUE_PI = {11: "FUTEX_WAIT_REQUEUE_PI", 12: "FUTEX_CMP_REQUEUE_PI"}
FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME = 128, 256  # one process, one clock: neither changes anything


@handles(120, "clone")
def sys_clone(kernel, flags, stack, parent_tid, tls, child_tid):
    """A thread as pthread_create makes one (ARM's order: flags, stack,
    parent_tid, tls, child_tid): it starts after this call with r0 = 0 and
    sp = `stack`; the creator gets its tid. A new process (no CLONE_VM:
    fork) is refused as fork is; one sharing memory without being a thread
    (vfork, posix_spawn) ends the run, named."""
    if not flags & CLONE_VM:
        raise GuestError(errno.EAGAIN)
    if not flags & CLONE_THREAD:
        raise SystemCallFault(f"clone sharing the address space without CLONE_THREAD (flags {flags:#x}): "
                              "a vfork-like process is not emulated")
    if flags & ~THREAD_FLAGS & ~EXIT_SIGNAL or not flags & CLONE_SIGHAND:
        raise GuestError(errno.EINVAL)
    if len(kernel.threads.live()) >= MAX_THREADS:
        raise GuestError(errno.EAGAIN)
    if stack & 7 or not stack:
        raise SystemCallFault(f"clone of a thread with the stack {stack:#x}: not an 8-byte aligned stack")
    context = kernel.machine.context()
    registers = list(context.r)
    registers[0], registers[13] = 0, stack
    # Its stack's top: the end of the mapping the stack is in (glibc's clone
    # pops the start routine and its argument from above `stack`, and keeps
    # the thread's descriptor above them).
    top = kernel.space.region_end(stack - 1) or stack
    thread = kernel.threads.spawn(replace(context, r=tuple(registers)), top,
                                  tls if flags & CLONE_SETTLS else kernel.threads.current.tls,
                                  child_tid if flags & CLONE_CHILD_CLEARTID else 0)
    for flag, address in ((CLONE_PARENT_SETTID, parent_tid), (CLONE_CHILD_SETTID, child_tid)):
        if flags & flag:
            kernel.machine.write(address, struct.pack("<I", thread.tid))
    return thread.tid


@handles(1, "exit")
def sys_exit(kernel, status):
    """The calling thread ends; the last one's end is the process's. Its
    clear_child_tid word is zeroed and woken (pthread_join waits there)."""
    threads = kernel.threads
    thread = threads.current
    if len(threads.live()) == 1:
        kernel.end(status & 0xFF)
        return 0
    pi_futex.check_exit(kernel, thread)
    thread.exited = True
    if thread.clear_child_tid:
        try:
            kernel.machine.write(thread.clear_child_tid, bytes(4))
        except BadAddress:  # Linux ignores a word it cannot write
            pass
        threads.wake_futex(thread.clear_child_tid, 1)
    return 0


@handles(248, "exit_group")
def sys_exit_group(kernel, status):
    kernel.end(status & 0xFF)
    return 0


@handles(224, "gettid")
def sys_gettid(kernel):
    return kernel.threads.current.tid


@handles(256, "set_tid_address")
def sys_set_tid_address(kernel, address):
    kernel.threads.current.clear_child_tid = address
    return kernel.threads.current.tid


@handles(338, "set_robust_list")
def sys_set_robust_list(kernel, head, length):
    """Accepted; the list matters only when a thread dies holding a robust
    mutex, which a thread here cannot (a killed thread kills the process)."""
    if length != 12:  # sizeof(struct robust_list_head) on ARM
        raise GuestError(errno.EINVAL)
    return 0


@handles(158, "sched_yield")
def sys_sched_yield(kernel):
    kernel.threads.yielded = True
    return 0


@handles(240, "futex")
def sys_futex(kernel, address, operation, value, timeout, address2, value3):
    return _futex(kernel, address, operation, value, timeout, address2, value3, TIMESPEC)


@handles(422, "futex_time64")
def sys_futex_time64(kernel, address, operation, value, timeout, address2, value3):
    return _futex(kernel, address, operation, value, timeout, address2, value3, TIMESPEC64)


def _futex(kernel, address: int, operation: int, value: int, timeout: int, address2: int, value3: int,
           timespec: str) -> int:
    command = operation & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
    if command in REQUEUE_PI:
        raise SystemCallFault(f"futex {REQUEUE_PI[command]} at {address:#x}: requeueing to a "
                              "priority-inheritance futex is not emulated")
    if address & 3:
        raise GuestError(errno.EINVAL)
    threads = kernel.threads
    if command in (pi_futex.FUTEX_LOCK_PI, pi_futex.FUTEX_LOCK_PI2, pi_futex.FUTEX_TRYLOCK_PI):
        # An absolute time (CLOCK_REALTIME, or LOCK_PI2's CLOCK_MONOTONIC: the one emulated clock)
        deadline = _timespec(kernel, timeout, timespec) if timeout and command != pi_futex.FUTEX_TRYLOCK_PI else None
        return pi_futex.lock(kernel, address, deadline, command == pi_futex.FUTEX_TRYLOCK_PI)
    if command == pi_futex.FUTEX_UNLOCK_PI:
        return pi_futex.unlock(kernel, address)
    if command in (FUTEX_WAIT, FUTEX_WAIT_BITSET):
        bitset = FUTEX_BITSET_ANY if command == FUTEX_WAIT else value3
        if not bitset:
            raise GuestError(errno.EINVAL)
        deadline = None
        if timeout:
            deadline = _timespec(kernel, timeout, timespec) + (kernel.now_ns() if command == FUTEX_WAIT else 0)
        return _futex_wait(kernel, address, value, bitset, deadline)
    if command in (FUTEX_WAKE, FUTEX_WAKE_BITSET):
        bitset = FUTEX_BITSET_ANY if command == FUTEX_WAKE else value3
        if not bitset:
            raise GuestError(errno.EINVAL)
        return threads.wake_futex(address, value, bitset)
    if command in (FUTEX_REQUEUE, FUTEX_CMP_REQUEUE):
        if command == FUTEX_CMP_REQUEUE and _word(kernel, address) != value3:
            raise GuestError(errno.EAGAIN)
        woken = threads.wake_futex(address, value)
        return woken + threads.requeue(address, address2, timeout)  # the timeout slot holds val2: how many move
    if command == FUTEX_WAKE_OP:
        return _wake_op(kernel, address, value, timeout, address2, value3)
    raise GuestError(errno.ENOSYS)  # FUTEX_FD (gone since Linux 2.6.26) and unknown commands


def _futex_wait(kernel, address: int, value: int, bitset: int, deadline: int | None) -> int:
    """Wait on the word at `address` while it holds `value`, until woken
    or `deadline`; a signal ends an untimed wait with ERESTARTSYS, a timed
    one with ERESTART_RESTARTBLOCK, whose restart waits again to the same
    deadline (futex_wait_restart)."""
    if _word(kernel, address) != value:
        raise GuestError(errno.EAGAIN)
    if deadline is None:
        kernel.threads.block(Wait(address, bitset))
        return 0
    if deadline <= kernel.now_ns():
        raise GuestError(errno.ETIMEDOUT)
    thread = kernel.threads.current

    def interrupted() -> int:
        thread.restart_block = lambda: _futex_wait(kernel, address, value, bitset, deadline)
        return -ERESTART_RESTARTBLOCK

    kernel.threads.block(Wait(address, bitset, deadline, ERESTART_RESTARTBLOCK, interrupted=interrupted))
    return 0


def _timespec(kernel, address: int, layout: str) -> int:
    """A timespec's nanoseconds; EINVAL where Linux finds it invalid."""
    seconds, nanoseconds = struct.unpack(layout, kernel.machine.read(address, struct.calcsize(layout)))
    if seconds < 0 or not 0 <= nanoseconds < NSEC:
        raise GuestError(errno.EINVAL)
    return seconds * NSEC + nanoseconds


def _word(kernel, address: int) -> int:
    return struct.unpack("<I", kernel.machine.read(address, 4))[0]


def _signed12(value: int) -> int:
    return value - 0x1000 if value & 0x800 else value


def _wake_op(kernel, address: int, count: int, count2: int, address2: int, encoded: int) -> int:
    """FUTEX_WAKE_OP: *address2 = old OP argument atomically, wake `count`
    on address, and `count2` on address2 where old CMP compare holds."""
    op, cmp, argument, compare = encoded >> 28 & 7, encoded >> 24 & 15, encoded >> 12 & 0xFFF, encoded & 0xFFF
    argument, compare = _signed12(argument), _signed12(compare)
    if encoded >> 31:  # FUTEX_OP_OPARG_SHIFT
        argument = 1 << (argument & 31)
    old = _word(kernel, address2)
    operations = {0: lambda: argument, 1: lambda: old + argument, 2: lambda: old | argument,
                  3: lambda: old & ~argument, 4: lambda: old ^ argument}
    if op not in operations or cmp > 5:
        raise GuestError(errno.ENOSYS)
    kernel.machine.write(address2, struct.pack("<I", operations[op]() & 0xFFFFFFFF))
    signed_old = old - (1 << 32) if old & 0x80000000 else old
    holds = (signed_old == compare, signed_old != compare, signed_old < compare, signed_old <= compare,
             signed_old > compare, signed_old >= compare)[cmp]
    threads = kernel.threads
    return threads.wake_futex(address, count) + (threads.wake_futex(address2, count2) if holds else 0)


# ---- sleeps


@handles(162, "nanosleep")
def sys_nanosleep(kernel, request, remaining):
    return _sleep(kernel, _timespec(kernel, request, TIMESPEC), False, remaining, TIMESPEC)


@handles(265, "clock_nanosleep")
def sys_clock_nanosleep(kernel, clock, flags, request, remaining):
    return _sleep(kernel, _timespec(kernel, request, TIMESPEC), flags & TIMER_ABSTIME, remaining, TIMESPEC)


@handles(407, "clock_nanosleep_time64")
def sys_clock_nanosleep_time64(kernel, clock, flags, request, remaining):
    return _sleep(kernel, _timespec(kernel, request, TIMESPEC64), flags & TIMER_ABSTIME, remaining, TIMESPEC64)


@handles(0, "restart_syscall")
def sys_restart_syscall(kernel):
    """The call a signal interrupted with ERESTART_RESTARTBLOCK and no
    handler goes on where it left off (the same deadline); with none to go
    on (after a handler's sigreturn, or never), EINTR (do_no_restart_syscall)."""
    again = kernel.threads.current.restart_block
    if again is None:
        raise GuestError(errno.EINTR)
    return again()


def _sleep(kernel, requested: int, absolute: int, remaining: int, layout: str) -> int:
    """The thread waits `requested` ns from now, or until that time where
    `absolute` (TIMER_ABSTIME): other threads run meanwhile, and where
    none is ready the clock jumps (harness.linux.threads)."""
    if absolute:
        if requested > kernel.now_ns():
            kernel.threads.block(Wait(deadline_ns=requested, restart=ERESTARTNOHAND))
        return 0
    return _sleep_until(kernel, kernel.now_ns() + requested, remaining, layout)


def _sleep_until(kernel, deadline: int, remaining: int, layout: str) -> int:
    """A relative sleep to `deadline`: a signal ends it with
    ERESTART_RESTARTBLOCK, having written the time left at `remaining`
    where given (0 where none is left: the sleep is over), as Linux's
    do_nanosleep."""
    if deadline <= kernel.now_ns():
        return 0
    thread = kernel.threads.current

    def interrupted() -> int:
        left = deadline - kernel.now_ns()
        if remaining:
            if left <= 0:
                return 0
            try:
                kernel.machine.write(remaining, struct.pack(REMAINING[layout], *divmod(left, NSEC)))
            except BadAddress:
                return -errno.EFAULT
        thread.restart_block = lambda: _sleep_until(kernel, deadline, remaining, layout)
        return -ERESTART_RESTARTBLOCK

    kernel.threads.block(Wait(deadline_ns=deadline, restart=ERESTART_RESTARTBLOCK, interrupted=interrupted))
    return 0
