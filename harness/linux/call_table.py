"""The system-call table: ARM EABI numbers (r7) to handlers.

Each handler is registered by `handles(number, name)` where it is defined
(harness.linux.calls_files, calls_memory, calls_process) and receives the
process (harness.linux.kernel.LinuxKernel) and the six argument registers
r0-r5 as unsigned 32-bit values; it returns the result (r0), a negative
errno by raising GuestError. Numbers are those of Linux's
arch/arm/tools/syscall.tbl (a test checks them against the cross
toolchain's asm/unistd-eabi.h where one is installed).
"""

from __future__ import annotations

import errno
from typing import Callable, NamedTuple

from harness.errors import HarnessError

ARM_PRIVATE = 0x0F0000  # __ARM_NR_BASE: ARM's own calls (cacheflush, set_tls)


class GuestError(HarnessError):
    """A system call's error: its errno (returned to the program as -errno)."""

    def __init__(self, code: int):
        super().__init__(errno.errorcode.get(code, str(code)))
        self.code = code


class SystemCallFault(HarnessError):
    """The program made a system call the harness does not emulate, or one
    that cannot go on (more output than the cap, a wait no one can end)."""


class Handler(NamedTuple):
    name: str
    run: Callable[..., int]
    arity: int  # argument registers it takes


CALLS: dict[int, Handler] = {}


def handles(number: int, name: str):
    """Register the decorated function as system call `number`."""

    def register(run: Callable[..., int]) -> Callable[..., int]:
        if number in CALLS:
            raise RuntimeError(f"system call {number} registered twice ({CALLS[number].name}, {name})")
        CALLS[number] = Handler(name, run, run.__code__.co_argcount - 1)
        return run

    return register


def signed(value: int) -> int:
    """A 32-bit register as a signed number (a number already negative,
    such as AT_FDCWD passed on by a handler, stays as it is)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
