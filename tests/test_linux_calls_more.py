"""The system calls, devices and /proc files a program brings in expects
(issue 47), on the plain machine of tests/test_linux_syscalls.py: each
answers as Linux 6.1 does for one process alone in a sandbox without
network, and each the harness cannot answer faithfully ends the run as a
fault naming it."""

from __future__ import annotations

import errno
import re
import struct

import pytest

from harness.linux.kernel import LinuxKernel
from harness.linux.names import NAMES
from harness.linux.table import ARM_PRIVATE, CALLS, SystemCallFault
from tests.test_linux_syscalls import SCRATCH, PageMachine, call, kernel, open_path, put_string, roots  # noqa: F401

AT_FDCWD = (-100) & 0xFFFFFFFF
HEADER = "/usr/arm-linux-gnueabihf/include/asm/unistd-eabi.h"


# ------------------------------------------------------------- names


def test_the_name_table_is_the_toolchain_header():
    """Every call asm/unistd-eabi.h (Linux 6.1's ARM EABI table) defines,
    by number and name, and ARM's private calls; no other."""
    declared = {int(number): name for name, number in
                re.findall(r"#define __NR_(\w+) \(__NR_SYSCALL_BASE \+ (\d+)\)", open(HEADER).read())}
    assert len(declared) > 390
    assert {number: name for number, name in NAMES.items() if number < ARM_PRIVATE} == declared
    assert NAMES[ARM_PRIVATE + 2] == "cacheflush" and NAMES[ARM_PRIVATE + 5] == "set_tls"
    assert all(NAMES[number] == handler.name for number, handler in CALLS.items())


def test_an_unknown_call_is_named_when_linux_has_it(kernel):
    with pytest.raises(SystemCallFault, match=r"^unknown system call kexec_load \(347, 0x15b\) at pc 0x8000$"):
        kernel.system_call(347, (0,) * 6, 0x8000)
    with pytest.raises(SystemCallFault, match=r"^unknown system call 987 \(0x3db\) at pc 0x8000$"):
        kernel.system_call(987, (0,) * 6, 0x8000)


def test_stat_access_and_lstat_of_a_relative_path(kernel):
    """stat64, lstat64 and access pass AT_FDCWD on as -100: it was taken
    for a descriptor (EBADF), sign-converted twice."""
    path = put_string(kernel, "input.txt")
    assert call(kernel, "stat64", path, SCRATCH + 0x400) == 0
    assert call(kernel, "lstat64", path, SCRATCH + 0x400) == 0
    assert call(kernel, "access", path, 4) == 0
    assert call(kernel, "access", put_string(kernel, "missing"), 4) == -errno.ENOENT
