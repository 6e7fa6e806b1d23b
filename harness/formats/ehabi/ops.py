"""EHABI compact unwind instructions as data: one tuple type per kind, and
the text `dump` and error messages show for them.

Each kind is a NamedTuple, so that a run of them hashes and compares in C:
every table's rows are runs, and a process numbers them by value (the
rule book). Its last field, `kind`, is the kind's own constant, so that
instructions of two kinds never compare equal (`VspAdd(4)` and
`SetVsp(4)` would as bare tuples)."""

from __future__ import annotations

from typing import Iterable, NamedTuple, Union


class VspAdd(NamedTuple):
    """vsp = vsp + amount (amount a multiple of 4, may be negative)."""

    amount: int
    kind: str = "vsp_add"

    def __str__(self) -> str:
        sign = "+" if self.amount >= 0 else "-"
        return f"vsp = vsp {sign} {abs(self.amount)}"


class SetVsp(NamedTuple):
    """vsp = r[reg] (reg is neither 13 nor 15)."""

    reg: int
    kind: str = "set_vsp"

    def __str__(self) -> str:
        return f"vsp = r{self.reg}"


class Pop(NamedTuple):
    """Pop core registers, lowest-numbered from the lowest address."""

    regs: tuple[int, ...]
    kind: str = "pop"

    def __str__(self) -> str:
        return f"pop {{{_ranges('r', self.regs)}}}"


class PopVfp(NamedTuple):
    """Pop d[first]..d[first+count-1]; `fstmfdx` frames carry one extra word."""

    first: int
    count: int
    fstmfdx: bool = False
    kind: str = "pop_vfp"

    def __str__(self) -> str:
        regs = tuple(range(self.first, self.first + self.count))
        suffix = " (fstmfdx)" if self.fstmfdx else ""
        return f"pop {{{_ranges('d', regs)}}}{suffix}"


class PopWmmx(NamedTuple):
    """Pop Intel Wireless MMX registers: data registers wR (8 bytes each)
    or, with `control`, the control registers wCGR0-3 (4 bytes each). No
    register this tool models holds them: running it moves vsp past them,
    as libunwindstack does."""

    regs: tuple[int, ...]
    control: bool = False
    kind: str = "pop_wmmx"

    @property
    def size(self) -> int:
        return len(self.regs) * (4 if self.control else 8)

    def __str__(self) -> str:
        return f"pop {{{_ranges('wCGR' if self.control else 'wR', self.regs)}}}"


class Finish(NamedTuple):
    kind: str = "finish"

    def __str__(self) -> str:
        return "finish"


class Refuse(NamedTuple):
    """0x80 0x00: the region must not be unwound."""

    kind: str = "refuse"

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
