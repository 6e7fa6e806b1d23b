"""The program's memory as Linux's system calls reach it (copy_to_user,
copy_from_user): bound by the protections the program set, where the
engine's own accesses (harness.emulation.machine.Machine) are not. A call
that would write a page the program made read-only, or read a PROT_NONE
page, fails with EFAULT (BadAddress) and changes nothing: Chromium's
PartitionAlloc checks that a page is read-only by having getrlimit write
to it. ARMv7 user pages that may be written or run may be read.

The harness's own work on the pages (a file's bytes copied into its
mapping, mremap's move, madvise's zeroing) goes to `raw`, as the kernel's
does under the page tables."""

from __future__ import annotations

from harness.emulation.machine import BadAddress, Machine
from harness.linux.maps import Vmas


class UserMemory:
    """`machine` with reads and writes checked against `vmas`' protections;
    everything else passed through."""

    def __init__(self, machine: Machine, vmas: Vmas):
        object.__setattr__(self, "raw", machine)
        object.__setattr__(self, "_vmas", vmas)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.raw, name, value)  # the machine's own state (its clock...): one copy, the machine's

    def read(self, address: int, size: int) -> bytes:
        if size > 0 and self._vmas.refuses(address, address + size, "r"):
            raise BadAddress(f"{size} bytes at {address:#x} are not readable (PROT_NONE)")
        return self.raw.read(address, size)

    def write(self, address: int, data: bytes) -> None:
        if data and self._vmas.refuses(address, address + len(data), "w"):
            raise BadAddress(f"{len(data)} bytes at {address:#x} are not writable")
        self.raw.write(address, data)
