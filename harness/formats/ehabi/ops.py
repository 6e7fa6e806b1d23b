"""EHABI compact unwind instructions as data: one dataclass per kind, and
the text `dump` and error messages show for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union


@dataclass(frozen=True)
class VspAdd:
    """vsp = vsp + amount (amount a multiple of 4, may be negative)."""

    amount: int

    def __str__(self) -> str:
        sign = "+" if self.amount >= 0 else "-"
        return f"vsp = vsp {sign} {abs(self.amount)}"


@dataclass(frozen=True)
class SetVsp:
    """vsp = r[reg] (reg is neither 13 nor 15)."""

    reg: int

    def __str__(self) -> str:
        return f"vsp = r{self.reg}"


@dataclass(frozen=True)
class Pop:
    """Pop core registers, lowest-numbered from the lowest address."""

    regs: tuple[int, ...]

    def __str__(self) -> str:
        return f"pop {{{_ranges('r', self.regs)}}}"


@dataclass(frozen=True)
class PopVfp:
    """Pop d[first]..d[first+count-1]; `fstmfdx` frames carry one extra word."""

    first: int
    count: int
    fstmfdx: bool = False

    def __str__(self) -> str:
        regs = tuple(range(self.first, self.first + self.count))
        suffix = " (fstmfdx)" if self.fstmfdx else ""
        return f"pop {{{_ranges('d', regs)}}}{suffix}"


@dataclass(frozen=True)
class PopWmmx:
    """Pop Intel Wireless MMX registers: data registers wR (8 bytes each)
    or, with `control`, the control registers wCGR0-3 (4 bytes each). No
    register this tool models holds them: running it moves vsp past them,
    as libunwindstack does."""

    regs: tuple[int, ...]
    control: bool = False

    @property
    def size(self) -> int:
        return len(self.regs) * (4 if self.control else 8)

    def __str__(self) -> str:
        return f"pop {{{_ranges('wCGR' if self.control else 'wR', self.regs)}}}"


@dataclass(frozen=True)
class Finish:
    def __str__(self) -> str:
        return "finish"


@dataclass(frozen=True)
class Refuse:
    """0x80 0x00: the region must not be unwound."""

    def __str__(self) -> str:
        return "refuse to unwind"


Op = Union[VspAdd, SetVsp, Pop, PopVfp, PopWmmx, Finish, Refuse]
FINISH = Finish()
REFUSE = Refuse()


def _ranges(prefix: str, regs: Iterable[int]) -> str:
    parts: list[str] = []
    run: list[int] = []
    for reg in sorted(regs):
        if run and reg == run[-1] + 1:
            run.append(reg)
            continue
        if run:
            parts.append(_run_text(prefix, run))
        run = [reg]
    if run:
        parts.append(_run_text(prefix, run))
    return ", ".join(parts)


def _run_text(prefix: str, run: list[int]) -> str:
    if len(run) == 1:
        return f"{prefix}{run[0]}"
    return f"{prefix}{run[0]}-{prefix}{run[-1]}"


def text(ops: Iterable[Op]) -> str:
    return "; ".join(str(op) for op in ops)
