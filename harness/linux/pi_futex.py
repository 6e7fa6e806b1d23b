"""Priority-inheritance futexes (FUTEX_LOCK_PI, LOCK_PI2, TRYLOCK_PI,
UNLOCK_PI), as glibc's PTHREAD_PRIO_INHERIT mutexes use them: the word
holds its owner's tid, FUTEX_WAITERS while threads wait in the kernel, and
FUTEX_OWNER_DIED. A locker finding the word owned sets FUTEX_WAITERS and
waits; the owner's unlock hands the lock to the first waiter (every
thread here is SCHED_OTHER, which rt_mutex orders first come first served),
the word then its tid with FUTEX_WAITERS, as wake_futex_pi writes it, or 0
where none waits. A signal ends a lock's wait with ERESTARTNOINTR: the
call runs again after the handler. Priorities do not matter on the one
processor the scheduler runs every thread on. The requeue-PI commands and
a thread that exits owning a PI futex others wait on end the run, named."""

from __future__ import annotations

import errno
import struct

from harness.linux.call_table import SystemCallFault
from harness.linux.files import GuestError
from harness.linux.signals import ERESTARTNOINTR
from harness.linux.threads import Thread, Wait

FUTEX_LOCK_PI, FUTEX_UNLOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_LOCK_PI2 = 6, 7, 8, 13
FUTEX_WAITERS, FUTEX_OWNER_DIED, FUTEX_TID_MASK = 0x80000000, 0x40000000, 0x3FFFFFFF


def _word(kernel, address: int) -> int:
    return struct.unpack("<I", kernel.machine.read(address, 4))[0]


def _set(kernel, address: int, value: int) -> None:
    kernel.machine.write(address, struct.pack("<I", value))


def waiters(kernel, address: int) -> list[Thread]:
    """The threads waiting to lock the PI futex at `address`, first come first."""
    return [thread for thread in kernel.threads.waiting if thread.wait.futex == address and thread.wait.pi]


def lock(kernel, address: int, deadline: int | None, trylock: bool) -> int:
    """FUTEX_LOCK_PI (LOCK_PI2; TRYLOCK_PI where `trylock`): the word
    taken where it has no owner; else FUTEX_WAITERS set in it and the
    thread waits until an unlock hands it the lock (0), or `deadline`
    (absolute, on the emulated clock: ETIMEDOUT). EDEADLK where the caller
    owns it, ESRCH where its owner is no thread, EWOULDBLOCK for a
    trylock."""
    word = _word(kernel, address)
    owner, me = word & FUTEX_TID_MASK, kernel.threads.current.tid
    if not owner:
        if waiters(kernel, address):
            raise SystemCallFault(f"futex PI lock at {address:#x}: the word names no owner ({word:#x}) while "
                                  "threads wait on it in the kernel: not emulated")
        _set(kernel, address, me | word & FUTEX_OWNER_DIED)
        return 0
    if owner == me:
        raise GuestError(errno.EDEADLK)
    if kernel.threads.find(owner) is None:
        raise GuestError(errno.ESRCH)
    _set(kernel, address, word | FUTEX_WAITERS)
    if trylock:
        raise GuestError(errno.EWOULDBLOCK)
    if deadline is not None and deadline <= kernel.now_ns():
        raise GuestError(errno.ETIMEDOUT)
    kernel.threads.block(Wait(address, deadline_ns=deadline, restart=ERESTARTNOINTR, pi=True))
    return 0


def unlock(kernel, address: int) -> int:
    """FUTEX_UNLOCK_PI: the caller must own the word (else EPERM); the
    first waiter gets the lock, else the word becomes 0."""
    if _word(kernel, address) & FUTEX_TID_MASK != kernel.threads.current.tid:
        raise GuestError(errno.EPERM)
    queued = waiters(kernel, address)
    if not queued:
        _set(kernel, address, 0)
        return 0
    _set(kernel, address, FUTEX_WAITERS | queued[0].tid)
    kernel.threads.wake(queued[0], 0)
    return 0


def check_exit(kernel, thread: Thread) -> None:
    """A thread exits: where it owns a PI futex that others wait on, Linux
    hands the lock on (exit_pi_state_list) and marks a robust one's owner
    dead; that is not emulated, and ends the run named."""
    for waiter in kernel.threads.waiting:
        if waiter.wait.pi and _word(kernel, waiter.wait.futex) & FUTEX_TID_MASK == thread.tid:
            raise SystemCallFault(f"thread {thread.tid} exits owning the PI futex at {waiter.wait.futex:#x}, "
                                  f"which thread {waiter.tid} waits on: not emulated")
