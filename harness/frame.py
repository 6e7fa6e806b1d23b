"""Register state of one frame, and the bounded stack reader unwinders read from."""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.errors import BadRead

SP, LR, PC = 13, 14, 15
CALLEE_SAVED = (4, 5, 6, 7, 8, 9, 10, 11)
VFP_CALLEE_SAVED = tuple(range(8, 16))  # d8-d15
DWARF_D0 = 256  # DWARF register number of d0 (d0-d31 are 256-287)


def reg_name(reg: int) -> str:
    """r0..r15 for core registers, d0..d31 for DWARF numbers 256-287."""
    if DWARF_D0 <= reg < DWARF_D0 + 32:
        return f"d{reg - DWARF_D0}"
    return f"r{reg}"


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


@dataclass(frozen=True)
class Stack:
    """A copy of stack memory [low, low + len(data)), the only memory unwinders read."""

    low: int
    data: bytes

    @property
    def high(self) -> int:
        return self.low + len(self.data)

    def contains(self, address: int) -> bool:
        return self.low <= address <= self.high

    def read_u32(self, address: int) -> int:
        offset = address - self.low
        if offset < 0 or offset + 4 > len(self.data):
            raise BadRead(address, 4, self.low, self.high)
        return int.from_bytes(self.data[offset : offset + 4], "little")

    def read_u64(self, address: int) -> int:
        offset = address - self.low
        if offset < 0 or offset + 8 > len(self.data):
            raise BadRead(address, 8, self.low, self.high)
        return int.from_bytes(self.data[offset : offset + 8], "little")
