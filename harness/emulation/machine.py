"""What the system-call layer (harness.linux) may do to the emulated
machine, and nothing more: read and write its memory, map and unmap pages,
set the TLS register, read and set the user registers (a signal's frame),
count the instructions run (the clock), end the run; and what the two tell
each other: a bad address (BadAddress), the user registers (Context), a
thread switch (Switch). harness.emulation.process_machine implements the
Machine over the engine; tests use a plain one over a dict of pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from harness.errors import HarnessError


@dataclass(frozen=True)
class Context:
    """The user registers: what a signal interrupts and sigreturn restores."""

    r: tuple[int, ...]  # r0-r15, r15 the pc (without a Thumb bit: cpsr's T says)
    cpsr: int
    d: tuple[int, ...]  # d0-d31
    fpscr: int


class Switch(NamedTuple):
    """The thread the processor went to at a system call, for the hook that
    follows the run (its shadow stack, its stack's bounds)."""

    left: int  # the tid of the thread that stopped running
    tid: int
    stack_top: int  # the top of the stack of the thread that runs now (0: the process's initial stack)


class BadAddress(HarnessError):
    """A system call's argument points at memory the program does not have (EFAULT)."""


class Machine(Protocol):
    def read(self, address: int, size: int) -> bytes:
        """`size` bytes at `address`; BadAddress where nothing is mapped."""

    def write(self, address: int, data: bytes) -> None:
        """BadAddress where nothing is mapped."""

    def map(self, address: int, size: int) -> None:
        """Map zeroed pages [address, address + size) (page-aligned, free)."""

    def map_shared(self, address: int, size: int, buffer, offset: int) -> None:
        """Map [address, address + size) (page-aligned, free) onto the
        bytes of `buffer` (a page-aligned writable buffer, an mmap.mmap)
        from `offset`: the pages and the buffer one memory."""

    def unmap(self, address: int, size: int) -> None:
        """Unmap pages that are mapped (page-aligned)."""

    def protect(self, address: int, size: int, protection: int) -> None:
        """What the program's own accesses to mapped pages may do (PROT_READ
        1, PROT_WRITE 2, PROT_EXEC 4); the system-call layer's reads and
        writes are not bound by it."""

    def set_tls(self, value: int) -> None:
        """The thread ID register user code reads (TPIDRURO)."""

    def stop(self) -> None:
        """End the run after the current instruction (the process exited)."""

    def instructions(self) -> int:
        """The instructions the process has run so far (those an IT block
        skips included: the same count whatever hook follows the run)."""

    def context(self) -> Context:
        """The user registers now (harness.linux.signals.Context)."""

    def resume(self, context: Context) -> None:
        """Go on from `context`: every register it holds, the pc in the state its cpsr says."""


def read_c_string(machine: Machine, address: int, limit: int = 4096) -> bytes:
    """The NUL-terminated bytes at `address` (without the NUL); BadAddress
    past `limit` bytes or unmapped memory."""
    out = bytearray()
    while len(out) < limit:
        chunk_size = min(256, 0x1000 - ((address + len(out)) & 0xFFF))
        chunk = machine.read(address + len(out), chunk_size)
        end = chunk.find(b"\0")
        if end >= 0:
            return bytes(out + chunk[:end])
        out += chunk
    raise BadAddress(f"a string at {address:#x} runs past {limit} bytes")
