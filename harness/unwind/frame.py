"""Register state of one frame, and the bounded stack reader unwinders read from."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Protocol

from harness.errors import BadRead
from harness.registers import LR, PC, SP


@dataclass(frozen=True)
class Frame:
    """Registers of one frame. `d` holds d0-d31; None where nothing is known.
    `cpsr` (flags and IT state) is known for the innermost frame only."""

    r: tuple[int, ...]
    d: tuple[int | None, ...] = (None,) * 32
    cpsr: int = 0

    @property
    def pc(self) -> int:
        return self.r[PC]

    @property
    def sp(self) -> int:
        return self.r[SP]

    def with_core(self, **regs: int) -> "Frame":
        """A copy with core registers replaced, e.g. with_core(r4=1, pc=2)."""
        names = {"sp": SP, "lr": LR, "pc": PC}
        values = list(self.r)
        for name, value in regs.items():
            values[names.get(name) or int(name[1:])] = value & 0xFFFFFFFF
        return replace(self, r=tuple(values))


def make_frame(pc: int, sp: int, lr: int = 0, **regs: int) -> Frame:
    """A frame with the named registers set and every other core register 0."""
    values = [0] * 16
    values[PC], values[SP], values[LR] = pc, sp, lr
    for name, value in regs.items():
        values[int(name[1:])] = value
    return Frame(r=tuple(values))


class StackReader(Protocol):
    """The only memory an unwinder reads: the stack [low, high) of one stop.
    A read outside it raises BadRead (a `bad_read` UnwindFailure).
    Implementations: `Stack` (a copy) and the emulator's live stack
    (harness.emulation.livestack.LiveStack)."""

    low: int
    high: int

    def contains(self, address: int) -> bool:
        """low <= address <= high: an address a stack pointer may hold."""

    def read_u32(self, address: int) -> int: ...

    def read_u64(self, address: int) -> int: ...


class Stack:
    """Stack memory [low, high) as a copy: `data` holds the bytes from
    `start` on (default: low, and high is then the end of data). A copy of
    only the lines some walks read (a replayed stop) leaves the rest out:
    those bytes read as zeros, as the walks never read them."""

    __slots__ = ("low", "high", "start", "data")

    def __init__(self, low: int, data: bytes, high: int | None = None, start: int | None = None):
        self.low = low
        self.data = data
        self.start = low if start is None else start
        self.high = self.start + len(data) if high is None else high

    def contains(self, address: int) -> bool:
        return self.low <= address <= self.high

    def _bytes(self, address: int, size: int) -> bytes:
        if address < self.low or address + size > self.high:
            raise BadRead(address, size, self.low, self.high)
        offset = address - self.start
        if 0 <= offset and offset + size <= len(self.data):
            return self.data[offset : offset + size]
        return bytes(self.data[i] if 0 <= i < len(self.data) else 0 for i in range(offset, offset + size))

    def read_u32(self, address: int) -> int:
        offset = address - self.start
        if self.low <= address and address + 4 <= self.high and 0 <= offset <= len(self.data) - 4:
            return _U32(self.data, offset)[0]  # the common case, kept short
        return int.from_bytes(self._bytes(address, 4), "little")

    def read_u64(self, address: int) -> int:
        return int.from_bytes(self._bytes(address, 8), "little")


_U32 = struct.Struct("<I").unpack_from
