"""rt_sigtimedwait (sigwaitinfo, sigtimedwait, sigwait): a thread takes
a pending signal of a set itself, its siginfo copied out and no handler
run; glibc's SIGEV_THREAD helper thread takes its timers' signals so.

With none pending, the thread waits (SignalWait) until a signal of the
set is sent to it, which ends the call at once with that signal
(`takes`), or until its timeout (EAGAIN); a signal outside the set that
it does not block ends the wait with EINTR, its handler then running: the
call is not restarted, whatever SA_RESTART says (do_sigtimedwait returns
EINTR itself, not a restart code). One the process ignores is dropped as
it is sent (harness.linux.kernel's signal_thread) and ends no wait. It
takes the signals pending on its own thread: a signal sent to the process
is pending on the thread chosen when it was sent (one that does not block
it, or that waits for it: harness.linux.kernel's signal_process).
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass

from harness.emulation.machine import BadAddress
from harness.linux import signals
from harness.linux.call_table import GuestError, handles
from harness.linux.posix_timers import KTIME_MAX
from harness.linux.threads import Thread, Wait

NSEC = 1_000_000_000
TIMESPEC = {False: struct.Struct("<ii"), True: struct.Struct("<qi4x")}  # time64's tv_nsec: its low word


@dataclass
class SignalWait(Wait):
    """A thread in rt_sigtimedwait: the signals it waits for (bit signal - 1), where their siginfo goes."""

    wanted: int = 0
    info: int = 0
    restart: int = errno.EINTR  # no restart code: EINTR whatever the handler asks (do_sigtimedwait)

    def timed_out(self) -> int:
        return -errno.EAGAIN

    def named(self) -> str:
        wanted = ", ".join(str(signal) for signal in range(1, 65) if self.wanted >> (signal - 1) & 1)
        return f"in rt_sigtimedwait for signals {wanted or 'none'}"


def waits_for(thread: Thread, signal: int) -> bool:
    """Whether `thread` is in rt_sigtimedwait for `signal` (which it takes, blocked or not)."""
    return isinstance(thread.wait, SignalWait) and bool(thread.wait.wanted >> (signal - 1) & 1)


def takes(kernel, thread: Thread, signal: int) -> bool:
    """`signal` was just sent to `thread`: where it waits for it, its call
    returns it (taken off the list, its siginfo copied out); whether so."""
    if not waits_for(thread, signal):
        return False
    wait = thread.wait
    kernel.threads.wake(thread, _give(kernel, thread.signals.take(wait.wanted), wait.info))
    return True


def _give(kernel, taken: signals.Pending, info: int) -> int:
    """The call's result for a signal taken: the signal, or EFAULT where its siginfo cannot be copied out."""
    data = signals.siginfo(kernel, taken)
    if info:
        try:
            kernel.machine.write(info, data.ljust(signals.SIGINFO_SIZE, b"\0"))
        except BadAddress:
            return -errno.EFAULT
    return taken.signal


@handles(177, "rt_sigtimedwait")
def sys_rt_sigtimedwait(kernel, wanted, info, timeout, set_size):
    return _sigtimedwait(kernel, wanted, info, timeout, set_size, time64=False)


@handles(421, "rt_sigtimedwait_time64")
def sys_rt_sigtimedwait_time64(kernel, wanted, info, timeout, set_size):
    return _sigtimedwait(kernel, wanted, info, timeout, set_size, time64=True)


def _sigtimedwait(kernel, wanted: int, info: int, timeout: int, set_size: int, time64: bool) -> int:
    if set_size != 8:
        raise GuestError(errno.EINVAL)
    mask = struct.unpack("<Q", kernel.machine.read(wanted, 8))[0] & ~signals.UNBLOCKABLE
    wait_ns = None
    if timeout:
        seconds, nanoseconds = TIMESPEC[time64].unpack(kernel.machine.read(timeout, TIMESPEC[time64].size))
        if seconds < 0 or not 0 <= nanoseconds < NSEC:
            raise GuestError(errno.EINVAL)
        wait_ns = min(KTIME_MAX, seconds * NSEC + nanoseconds)
    taken = kernel.signals.take(mask)
    if taken is not None:
        return _give(kernel, taken, info)
    if wait_ns == 0:
        raise GuestError(errno.EAGAIN)
    deadline = None if wait_ns is None else kernel.now_ns() + wait_ns
    kernel.threads.block(SignalWait(None, deadline_ns=deadline, wanted=mask, info=info))
    return 0
