"""System calls on the process: exit, ids, time, randomness, signals
(harness.linux.signals delivers them), limits, TLS."""

from __future__ import annotations

import errno
import struct

from harness.linux import signals
from harness.linux.call_table import ARM_PRIVATE, handles, signed
from harness.linux.files import GuestError
from harness.linux.posix_timers import MAX_TIMERS, clock_of

UTS_FIELDS = (b"Linux", b"unwind-harness", b"6.1.0", b"#1 SMP", b"armv7l", b"(none)")  # struct utsname
RLIMIT_STACK, RLIMIT_NOFILE, RLIMIT_SIGPENDING = 3, 7, 11
RLIM_INFINITY = (1 << 64) - 1
NSEC = 1_000_000_000
GRND_RANDOM, GRND_INSECURE = 0x2, 0x4
GRND_FLAGS = 0x1 | GRND_RANDOM | GRND_INSECURE  # GRND_NONBLOCK too
PID = 4242  # the process's pid and tid, whatever the host's


@handles(37, "kill")
def sys_kill(kernel, pid, signal):
    return _send(kernel, signed(pid), signal, signals.SI_USER)


@handles(268, "tgkill")
def sys_tgkill(kernel, group, tid, signal):
    if group != PID:
        raise GuestError(errno.ESRCH)
    return _send(kernel, signed(tid), signal, signals.SI_TKILL, thread=True)


@handles(238, "tkill")
def sys_tkill(kernel, tid, signal):
    return _send(kernel, signed(tid), signal, signals.SI_TKILL, thread=True)


def _send(kernel, target: int, signal: int, code: int, thread: bool = False) -> int:
    """kill (to this process: its pid, 0 or -1, every process it may
    signal, itself alone here) or tgkill/tkill (to one of its threads): the
    signal is pending, delivered when the target next returns to user mode;
    its wait ends where the target does not block it (harness.linux.kernel's
    signal_thread). Any other process or thread does not exist (ESRCH)."""
    if not 0 <= signal <= 64:
        raise GuestError(errno.EINVAL)
    if thread:
        receiver = kernel.threads.find(target)
        if receiver is None:
            raise GuestError(errno.ESRCH)
        if signal:  # signal 0 only asks whether the target exists
            kernel.signal_thread(receiver, signal, code)
    elif target not in (PID, 0, -1, -PID):
        raise GuestError(errno.ESRCH)
    elif signal:
        kernel.signal_process(signal, code)
    return 0


@handles(173, "rt_sigreturn")
def sys_rt_sigreturn(kernel):
    return signals.sigreturn(kernel, rt=True)


@handles(119, "sigreturn")
def sys_sigreturn(kernel):
    return signals.sigreturn(kernel, rt=False)


for _number, _name, _value in ((20, "getpid", "pid"), (64, "getppid", "parent"),
                               (132, "getpgid", "pid"), (199, "getuid32", "id"), (200, "getgid32", "id"),
                               (201, "geteuid32", "id"), (202, "getegid32", "id"), (60, "umask", "umask")):
    def _constant(kernel, *, _value=_value):  # keyword-only: no register reaches it
        return {"pid": PID, "parent": 1, "id": 0, "umask": 0o022}[_value]

    handles(_number, _name)(_constant)


@handles(209, "getresuid32")
def sys_getresuid32(kernel, real, effective, saved):
    for address in (real, effective, saved):
        kernel.machine.write(address, bytes(4))
    return 0


@handles(211, "getresgid32")
def sys_getresgid32(kernel, real, effective, saved):
    return sys_getresuid32(kernel, real, effective, saved)


@handles(398, "rseq")
def sys_rseq(kernel, area, length, flags, signature):
    raise GuestError(errno.ENOSYS)  # glibc then runs without restartable sequences


@handles(122, "uname")
def sys_uname(kernel, buffer):
    kernel.machine.write(buffer, b"".join(field.ljust(65, b"\0") for field in UTS_FIELDS))
    return 0


@handles(384, "getrandom")
def sys_getrandom(kernel, buffer, length, flags):
    if flags & ~GRND_FLAGS or flags & GRND_INSECURE and flags & GRND_RANDOM:
        raise GuestError(errno.EINVAL)
    length = min(length, 1 << 20)
    kernel.machine.write(buffer, kernel.random_bytes(length))
    return length


@handles(263, "clock_gettime")
def sys_clock_gettime(kernel, clock, address):
    now = clock_of(kernel, signed(clock)).now(kernel)  # the emulated clock, or CPU time (posix_timers)
    kernel.machine.write(address, struct.pack("<iI", now // NSEC, now % NSEC))
    return 0


@handles(403, "clock_gettime64")
def sys_clock_gettime64(kernel, clock, address):
    now = clock_of(kernel, signed(clock)).now(kernel)
    kernel.machine.write(address, struct.pack("<qI4x", now // NSEC, now % NSEC))
    return 0


@handles(78, "gettimeofday")
def sys_gettimeofday(kernel, address, zone):
    now = kernel.now_ns()
    if address:
        kernel.machine.write(address, struct.pack("<iI", now // NSEC, now % NSEC // 1000))
    return 0


@handles(264, "clock_getres")
def sys_clock_getres(kernel, clock, address):
    if address:
        kernel.machine.write(address, struct.pack("<iI", 0, 1))
    return 0


@handles(406, "clock_getres_time64")
def sys_clock_getres_time64(kernel, clock, address):
    if address:
        kernel.machine.write(address, struct.pack("<qI4x", 0, 1))
    return 0


@handles(43, "times")
def sys_times(kernel, buffer):
    ticks = kernel.ticks
    if buffer:
        kernel.machine.write(buffer, struct.pack("<iiii", ticks, 0, 0, 0))
    return ticks


@handles(174, "rt_sigaction")
def sys_rt_sigaction(kernel, signal, action, old_action, set_size):
    if not 1 <= signal <= 64 or set_size != 8 or (action and signal in (signals.SIGKILL, signals.SIGSTOP)):
        raise GuestError(errno.EINVAL)
    new = signals.Action.of(kernel.machine.read(action, 20)) if action else None
    if old_action:
        kernel.machine.write(old_action, kernel.signals.action(signal).packed())
    if new is not None:
        kernel.signals.actions[signal] = new
        if signals.ignored(new, signal):  # Linux flushes it from every thread's pending signals (do_sigaction)
            signals.discard(kernel.threads.all, signal)
    return 0


@handles(175, "rt_sigprocmask")
def sys_rt_sigprocmask(kernel, how, new_set, old_set, set_size):
    if set_size != 8:
        raise GuestError(errno.EINVAL)
    state = kernel.signals
    change = struct.unpack("<Q", kernel.machine.read(new_set, 8))[0] if new_set else None
    if change is not None and how not in (0, 1, 2):  # SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK
        raise GuestError(errno.EINVAL)
    if old_set:
        kernel.machine.write(old_set, struct.pack("<Q", state.blocked))
    if change is not None:
        blocked = (state.blocked | change, state.blocked & ~change, change)[how]
        state.blocked = blocked & ~signals.UNBLOCKABLE
    return 0


@handles(176, "rt_sigpending")
def sys_rt_sigpending(kernel, address, set_size):
    if set_size != 8:
        raise GuestError(errno.EINVAL)
    pending = 0
    for entry in kernel.signals.pending:
        pending |= 1 << (entry.signal - 1)
    kernel.machine.write(address, struct.pack("<Q", pending & kernel.signals.blocked))
    return 0


@handles(186, "sigaltstack")
def sys_sigaltstack(kernel, new_stack, old_stack):
    state = kernel.signals
    if old_stack:
        kernel.machine.write(old_stack, struct.pack("<IiI", *state.altstack))
    if new_stack:
        stack_sp, flags, size = struct.unpack("<IiI", kernel.machine.read(new_stack, 12))
        if flags & ~signals.SS_DISABLE:
            raise GuestError(errno.EINVAL)
        if not flags & signals.SS_DISABLE and size < signals.MINSIGSTKSZ:
            raise GuestError(errno.ENOMEM)
        state.altstack = (0, signals.SS_DISABLE, 0) if flags & signals.SS_DISABLE else (stack_sp, 0, size)
    return 0


def _limit(resource: int) -> tuple[int, int]:
    if resource == RLIMIT_STACK:
        return 8 << 20, RLIM_INFINITY
    if resource == RLIMIT_NOFILE:
        return 1024, 4096
    if resource == RLIMIT_SIGPENDING:  # the POSIX timers a process may have (posix_timers.MAX_TIMERS)
        return MAX_TIMERS, MAX_TIMERS
    return RLIM_INFINITY, RLIM_INFINITY


@handles(369, "prlimit64")
def sys_prlimit64(kernel, pid, resource, new_limit, old_limit):
    if old_limit:
        kernel.machine.write(old_limit, struct.pack("<QQ", *_limit(resource)))
    return 0


@handles(191, "ugetrlimit")
def sys_ugetrlimit(kernel, resource, address):
    kernel.machine.write(address, struct.pack("<II", *(min(v, 0xFFFFFFFF) for v in _limit(resource))))
    return 0


@handles(242, "sched_getaffinity")
def sys_sched_getaffinity(kernel, pid, size, mask):
    if size < 4:
        raise GuestError(errno.EINVAL)
    kernel.machine.write(mask, struct.pack("<I", 1))  # one CPU
    return 4


@handles(116, "sysinfo")
def sys_sysinfo(kernel, buffer):
    kernel.machine.write(buffer, struct.pack("<i3I4IHxxIII", 1, 0, 0, 0, 1 << 30, 1 << 29, 0, 0, 1, 0, 0, 1))
    return 0


@handles(ARM_PRIVATE + 2, "cacheflush")
def sys_cacheflush(kernel, start, end, flags):
    return 0


@handles(ARM_PRIVATE + 5, "set_tls")
def sys_set_tls(kernel, value):
    kernel.threads.current.tls = value  # the thread's, restored when it runs again
    kernel.machine.set_tls(value)
    return 0
