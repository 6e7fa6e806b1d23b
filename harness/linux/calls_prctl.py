"""prctl and personality (harness.linux.call_table): the settings a process
keeps about itself, as Linux 6.1 on ARM answers them. An option Linux
has that changes what the harness does not emulate (seccomp, the memory
map, capabilities, I/O flushing) ends the run as a fault naming it; one
Linux does not have, or has only on other architectures, is EINVAL."""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass

from harness.linux.call_table import SystemCallFault, handles
from harness.linux.files import GuestError

PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_DUMPABLE = 1, 2, 3, 4
PR_GET_KEEPCAPS, PR_SET_KEEPCAPS = 7, 8
PR_SET_NAME, PR_GET_NAME, PR_GET_SECCOMP, PR_CAPBSET_READ = 15, 16, 21, 23
PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 36, 37, 38, 39
PR_GET_THP_DISABLE, PR_CAP_AMBIENT = 42, 47
PR_CAP_AMBIENT_IS_SET, PR_CAP_AMBIENT_CLEAR_ALL = 1, 4
PR_SET_VMA = 0x53564D41
CAP_LAST_CAP = 40  # CAP_CHECKPOINT_RESTORE, Linux 6.1's last
TASK_COMM_LEN = 16
NOT_EMULATED = {13: "PR_GET_TIMING", 14: "PR_SET_TIMING", 22: "PR_SET_SECCOMP", 24: "PR_CAPBSET_DROP",
                27: "PR_GET_SECUREBITS", 28: "PR_SET_SECUREBITS", 31: "PR_TASK_PERF_EVENTS_DISABLE",
                32: "PR_TASK_PERF_EVENTS_ENABLE", 33: "PR_MCE_KILL", 34: "PR_MCE_KILL_GET", 35: "PR_SET_MM",
                40: "PR_GET_TID_ADDRESS", 41: "PR_SET_THP_DISABLE", 57: "PR_SET_IO_FLUSHER",
                58: "PR_GET_IO_FLUSHER", 62: "PR_SCHED_CORE"}
PER_MASK = 0xFF
PERSONALITY_QUERY = 0xFFFFFFFF


@dataclass
class Settings:
    """What a process has set about itself (prctl, personality)."""

    dumpable: int = 1
    death_signal: int = 0
    keep_capabilities: int = 0
    timer_slack: int = 50_000  # nanoseconds, Linux's default
    subreaper: int = 0
    no_new_privileges: int = 0
    personality: int = 0  # PER_LINUX


def _set_name(kernel, address: int) -> int:
    """The task's name: up to 15 bytes of the string, as strncpy_from_user copies it."""
    name = bytearray()
    while len(name) < TASK_COMM_LEN - 1:
        byte = kernel.machine.read(address + len(name), 1)
        if byte == b"\0":
            break
        name += byte
    kernel.comm = bytes(name).decode("utf-8", "surrogateescape")
    return 0


def _get_name(kernel, address: int) -> int:
    name = kernel.comm.encode("utf-8", "surrogateescape")
    kernel.machine.write(address, name.ljust(TASK_COMM_LEN, b"\0"))
    return 0


def _setting(kernel, option: int, value: int) -> int:
    """The options that set or read one number of Settings."""
    settings = kernel.settings
    if option == PR_SET_PDEATHSIG:
        if value > 64:
            raise GuestError(errno.EINVAL)
        settings.death_signal = value
    elif option == PR_SET_DUMPABLE:
        if value not in (0, 1):
            raise GuestError(errno.EINVAL)
        settings.dumpable = value
    elif option == PR_SET_KEEPCAPS:
        if value not in (0, 1):
            raise GuestError(errno.EINVAL)
        settings.keep_capabilities = value
    elif option == PR_SET_TIMERSLACK:
        settings.timer_slack = value or 50_000  # 0: back to the default
    elif option == PR_SET_CHILD_SUBREAPER:
        settings.subreaper = int(bool(value))
    elif option == PR_GET_PDEATHSIG:
        kernel.machine.write(value, struct.pack("<i", settings.death_signal))
    return 0


GETTERS = {PR_GET_DUMPABLE: "dumpable", PR_GET_KEEPCAPS: "keep_capabilities", PR_GET_TIMERSLACK: "timer_slack",
           PR_GET_NO_NEW_PRIVS: "no_new_privileges"}


@handles(172, "prctl")
def sys_prctl(kernel, option, arg2, arg3, arg4, arg5):
    if option == PR_SET_NAME:
        return _set_name(kernel, arg2)
    if option == PR_GET_NAME:
        return _get_name(kernel, arg2)
    if option in GETTERS:
        return getattr(kernel.settings, GETTERS[option])
    if option in (PR_SET_PDEATHSIG, PR_GET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_KEEPCAPS, PR_SET_TIMERSLACK,
                  PR_SET_CHILD_SUBREAPER):
        return _setting(kernel, option, arg2)
    if option == PR_GET_CHILD_SUBREAPER:
        kernel.machine.write(arg2, struct.pack("<i", kernel.settings.subreaper))
        return 0
    if option == PR_SET_NO_NEW_PRIVS:
        if arg2 != 1 or arg3 or arg4 or arg5:
            raise GuestError(errno.EINVAL)
        kernel.settings.no_new_privileges = 1
        return 0
    if option in (PR_GET_SECCOMP, PR_GET_THP_DISABLE):
        return 0  # no filter, huge pages not refused
    if option == PR_CAPBSET_READ:
        if arg2 > CAP_LAST_CAP:
            raise GuestError(errno.EINVAL)
        return 1  # root: every capability in the bounding set
    if option == PR_CAP_AMBIENT and arg2 in (PR_CAP_AMBIENT_IS_SET, PR_CAP_AMBIENT_CLEAR_ALL):
        if arg2 == PR_CAP_AMBIENT_IS_SET and arg3 > CAP_LAST_CAP:
            raise GuestError(errno.EINVAL)
        return 0  # the ambient set is empty
    if option in NOT_EMULATED or option == PR_CAP_AMBIENT:
        raise SystemCallFault(f"prctl {NOT_EMULATED.get(option, 'PR_CAP_AMBIENT')} ({option}) is not emulated")
    # PR_SET_VMA among them: a 6.1 kernel without CONFIG_ANON_VMA_NAME does not know it
    raise GuestError(errno.EINVAL)


@handles(136, "personality")
def sys_personality(kernel, persona):
    """The execution domain: Linux's (PER_LINUX) and the flags a program
    sets (ADDR_NO_RANDOMIZE...: the harness never randomises); another
    domain changes the system call table, which is not emulated."""
    old = kernel.settings.personality
    if persona != PERSONALITY_QUERY:
        if persona & PER_MASK:
            raise SystemCallFault(f"personality {persona:#x}: only PER_LINUX's table is emulated")
        kernel.settings.personality = persona
    return old
