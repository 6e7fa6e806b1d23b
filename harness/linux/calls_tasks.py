"""System calls about other processes and the scheduler
(harness.linux.call_table). The process is alone: pid PID, leading its own
process group in the session of the shell that started it, with one CPU
and the normal policy, as root; it can make no other process (fork
fails as in a sandbox that allows one task, exec as on a file system
mounted noexec) and has no child to wait for."""

from __future__ import annotations

import errno
import struct

from harness.linux.call_table import SystemCallFault, handles, signed
from harness.linux.calls_files import _at, _path
from harness.linux.calls_process import PID
from harness.linux.files import GuestError

SESSION = 1  # the session it is in, not its own: it leads only its process group
SCHED_OTHER, SCHED_FIFO, SCHED_RR, SCHED_BATCH, SCHED_IDLE, SCHED_DEADLINE = 0, 1, 2, 3, 5, 6
RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD = 0, -1, 1
CAPABILITY_VERSION_3 = 0x20080522
CAPABILITY_VERSIONS = {0x19980330: 1, 0x20071026: 2, CAPABILITY_VERSION_3: 2}  # version -> sets of 32 bits
CAPABILITY_COUNT = 41  # CAP_LAST_CAP + 1: Linux 6.1's capabilities


# ---- scheduling: one CPU, the normal policy, each thread's nice value


def _this_process(kernel, pid: int) -> None:
    """0, the process's own pid or one of its threads'; no other process exists (ESRCH)."""
    if pid not in (0, PID) and kernel.threads.find(pid) is None:
        raise GuestError(errno.ESRCH)


@handles(157, "sched_getscheduler")
def sys_sched_getscheduler(kernel, pid):
    _this_process(kernel, pid)
    return SCHED_OTHER


@handles(155, "sched_getparam")
def sys_sched_getparam(kernel, pid, param):
    _this_process(kernel, pid)
    kernel.machine.write(param, struct.pack("<i", 0))  # SCHED_OTHER's priority
    return 0


@handles(241, "sched_setaffinity")
def sys_sched_setaffinity(kernel, pid, size, mask):
    """One CPU: a mask that has it is taken (nothing changes), one without
    it allows no CPU at all (EINVAL)."""
    _this_process(kernel, pid)
    if not size or not kernel.machine.read(mask, 1)[0] & 1:
        raise GuestError(errno.EINVAL)
    return 0


PRIO_PROCESS, PRIO_PGRP, PRIO_USER = 0, 1, 2
SCHED_ATTR = struct.Struct("<IIQiIQQQII")  # struct sched_attr (SCHED_ATTR_SIZE_VER1): 56 bytes
SCHED_ATTR_SIZE_VER0 = 48
UCLAMP_MAX = 1024  # the utilisation clamps a task has by default: 0 to 1024


def _niced(kernel, which: int, who: int) -> list:
    """The threads `which` and `who` name: one thread (PRIO_PROCESS: 0 is
    the caller, else a tid), or all of them (the process's group, root's
    processes); ESRCH for any other, EINVAL for another `which`."""
    if which not in (PRIO_PROCESS, PRIO_PGRP, PRIO_USER):
        raise GuestError(errno.EINVAL)
    if which != PRIO_PROCESS:
        if who not in (0, PID if which == PRIO_PGRP else 0):
            raise GuestError(errno.ESRCH)
        return kernel.threads.live()
    thread = kernel.threads.current if who == 0 else kernel.threads.find(who)
    if thread is None:
        raise GuestError(errno.ESRCH)
    return [thread]


@handles(97, "setpriority")
def sys_setpriority(kernel, which, who, value):
    """The nice value, kept in -20..19 (root may lower it); it changes no
    thread's share here: one CPU, turns of a fixed length."""
    for thread in _niced(kernel, which, who):
        thread.nice = min(max(signed(value), -20), 19)
    return 0


@handles(96, "getpriority")
def sys_getpriority(kernel, which, who):
    return max(20 - thread.nice for thread in _niced(kernel, which, who))  # the kernel's 40..1 form


@handles(381, "sched_getattr")
def sys_sched_getattr(kernel, pid, attr, size, flags):
    """SCHED_OTHER at the thread's nice value, no deadline, the default clamps."""
    if not attr or flags or not SCHED_ATTR_SIZE_VER0 <= size <= 4096:
        raise GuestError(errno.EINVAL)
    thread = kernel.threads.current if pid == 0 else kernel.threads.find(pid)
    if thread is None:
        raise GuestError(errno.ESRCH)
    given = min(size, SCHED_ATTR.size)
    kernel.machine.write(attr, SCHED_ATTR.pack(given, SCHED_OTHER, 0, thread.nice, 0, 0, 0, 0, 0, UCLAMP_MAX)[:given])
    return 0


@handles(380, "sched_setattr")
def sys_sched_setattr(kernel, pid, attr, flags):
    """SCHED_OTHER at a nice value: the thread's nice value set (as
    setpriority); another policy or a scheduling flag is not emulated."""
    if not attr or flags:
        raise GuestError(errno.EINVAL)
    size = struct.unpack("<I", kernel.machine.read(attr, 4))[0] or SCHED_ATTR_SIZE_VER0
    if not SCHED_ATTR_SIZE_VER0 <= size <= 4096:
        raise GuestError(errno.E2BIG)
    _, policy, sched_flags, nice, priority = struct.unpack("<IIQiI", kernel.machine.read(attr, 24))
    if policy != SCHED_OTHER or sched_flags or priority:
        raise SystemCallFault(f"sched_setattr policy {policy} flags {sched_flags:#x} priority {priority}: "
                              "only SCHED_OTHER at a nice value is emulated")
    thread = kernel.threads.current if pid == 0 else kernel.threads.find(pid)
    if thread is None:
        raise GuestError(errno.ESRCH)
    thread.nice = min(max(nice, -20), 19)
    return 0


@handles(444, "landlock_create_ruleset")
def sys_landlock_create_ruleset(kernel, attr, size, flags):
    """The kernel has no Landlock (as one built without it): the program
    goes on unconfined, as it does where Landlock is missing."""
    raise GuestError(errno.ENOSYS)


@handles(445, "landlock_add_rule")
def sys_landlock_add_rule(kernel, ruleset, kind, attr, flags):
    raise GuestError(errno.ENOSYS)


@handles(446, "landlock_restrict_self")
def sys_landlock_restrict_self(kernel, ruleset, flags):
    raise GuestError(errno.ENOSYS)


def _priority_range(policy: int) -> tuple[int, int]:
    if policy in (SCHED_FIFO, SCHED_RR):
        return 1, 99
    if policy in (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE, SCHED_DEADLINE):
        return 0, 0
    raise GuestError(errno.EINVAL)


@handles(159, "sched_get_priority_max")
def sys_sched_get_priority_max(kernel, policy):
    return _priority_range(policy)[1]


@handles(160, "sched_get_priority_min")
def sys_sched_get_priority_min(kernel, policy):
    return _priority_range(policy)[0]


# ---- process groups and sessions: the process leads its own group, in
# the session of the shell that started it (sid SESSION)


@handles(65, "getpgrp")
def sys_getpgrp(kernel):
    return PID


@handles(147, "getsid")
def sys_getsid(kernel, pid):
    _this_process(kernel, pid)
    return SESSION


@handles(57, "setpgid")
def sys_setpgid(kernel, pid, group):
    """Only into its own group, which it leads already; no other group
    exists in its session (EPERM)."""
    _this_process(kernel, pid)
    if signed(group) < 0:
        raise GuestError(errno.EINVAL)
    if group not in (0, PID):
        raise GuestError(errno.EPERM)
    return 0


@handles(66, "setsid")
def sys_setsid(kernel):
    raise GuestError(errno.EPERM)  # a process group leader cannot start a session


@handles(205, "getgroups32")
def sys_getgroups32(kernel, size, groups):
    if signed(size) < 0:
        raise GuestError(errno.EINVAL)
    return 0  # root, in no supplementary group


@handles(184, "capget")
def sys_capget(kernel, header, data):
    """Root's capabilities: every one Linux 6.1 has, effective and
    permitted, none inheritable. An unknown version is answered with the
    one Linux prefers, written into the header (EINVAL unless `data` is
    NULL: a program asking which version to use)."""
    version, pid = struct.unpack("<Ii", kernel.machine.read(header, 8))
    if version not in CAPABILITY_VERSIONS:
        kernel.machine.write(header, struct.pack("<I", CAPABILITY_VERSION_3))
        if data:
            raise GuestError(errno.EINVAL)
        return 0
    if not data:
        return 0
    if pid < 0:
        raise GuestError(errno.EINVAL)
    _this_process(kernel, pid)
    words = struct.unpack("<II", ((1 << CAPABILITY_COUNT) - 1).to_bytes(8, "little"))
    sets = [struct.pack("<III", word, word, 0) for word in words]
    kernel.machine.write(data, b"".join(sets[: CAPABILITY_VERSIONS[version]]))
    return 0


# ---- other processes: none can be made



@handles(2, "fork")
def sys_fork(kernel):
    """A sandbox that allows one task (a pids cgroup of 1): Linux's fork
    fails with EAGAIN there; a program says it cannot fork and goes on or
    exits, as it would on such a system."""
    raise GuestError(errno.EAGAIN)


@handles(190, "vfork")
def sys_vfork(kernel):
    raise GuestError(errno.EAGAIN)  # as fork


@handles(435, "clone3")
def sys_clone3(kernel, arguments, size):
    """Refused as container sandboxes refuse it (ENOSYS, Docker's default
    seccomp profile): glibc then falls back to clone."""
    raise GuestError(errno.ENOSYS)


def _exec(kernel, guest: str, argv: int) -> int:
    """No new program can run: the file is looked up (ENOENT, ENOTDIR...)
    and its arguments read (EFAULT) as Linux does first, then the run is
    refused as a file system mounted noexec refuses it (EACCES)."""
    kernel.files.lookup(guest)
    kernel.machine.read(argv, 4)
    raise GuestError(errno.EACCES)


@handles(11, "execve")
def sys_execve(kernel, path, argv, environment):
    return _exec(kernel, kernel.files.guest_path(_path(kernel, path), kernel.cwd), argv)


@handles(387, "execveat")
def sys_execveat(kernel, dirfd, path, argv, environment, flags):
    return _exec(kernel, _at(kernel, dirfd, path), argv)


@handles(114, "wait4")
def sys_wait4(kernel, pid, status, options, usage):
    raise GuestError(errno.ECHILD)  # no child was ever made


@handles(280, "waitid")
def sys_waitid(kernel, kind, pid, info, options, usage):
    raise GuestError(errno.ECHILD)


@handles(77, "getrusage")
def sys_getrusage(kernel, who, usage):
    """The time the process used is the clock's (times() says the same,
    in ticks of 10 ms), nothing for children (there are none)."""
    who = signed(who)
    if who not in (RUSAGE_SELF, RUSAGE_CHILDREN, RUSAGE_THREAD):
        raise GuestError(errno.EINVAL)
    ticks = kernel.ticks if who != RUSAGE_CHILDREN else 0
    kernel.machine.write(usage, struct.pack("<ii", ticks // 100, ticks % 100 * 10_000) + bytes(64))
    return 0
