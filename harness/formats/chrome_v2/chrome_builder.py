"""Chrome's own way from CFI rows to v2 runs (build/android/gyp/
create_unwind_table.py, as of 2023), in our code: what Chrome ships, for
the `v2-chrome` unwinder to measure beside our `v2`.

Chrome reads `dump_syms` text, where each row after a function's first
lists only the rules that change. Each such row is matched, whole, by one
of four forms, and turned into the instructions that undo it:

- return to lr: `.cfa: sp 0 + .ra: lr` -> `finish` (the entry row);
- push or sub sp: an optional `.cfa: sp N +`, an optional return address
  and core registers saved `.cfa -k + ^` -> `vsp += (N - CFA before) - 4 *
  registers` (when at least that), then a pop of r4-r15 among them
  (ascending, lr last; r0-r3 are left out and their slots stepped over).
  Where each register was saved is not read: the pop assumes the pushed
  order;
- CFA from a register: `.cfa: rK N +` alone -> `vsp = rK`, then
  `vsp += N - CFA before`;
- VFP saves: an optional `.cfa: sp N +` and VFP registers saved ->
  `vsp += N - CFA before` (Chrome restores no VFP register).

A row no form matches is left out: the row before stays in force. A
matched row whose sp-based CFA is below the one before is taken for an
epilogue, and it and every later row of the function are left out. Each
row's run is its own instructions, then the runs of the rows before it
(the newest undone first). A function whose first row is not the return
to lr gets no entry: the return-to-lr filler covers it, as the gaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from harness.formats import ehabi
from harness.formats.chrome_v2.encoder import AddressUnwind, FunctionUnwind
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, LR, SP


class Delta(NamedTuple):
    """The rules a row changes, as dump_syms writes them."""

    cfa: tuple[int, int] | None  # (register, offset) where the CFA rule changed
    return_address: int | None  # lr's new slot (offset from the CFA)
    saved: tuple[int, ...]  # core registers newly saved (not lr)
    vfp: bool  # a VFP register newly saved
    restored: bool  # a register's rule back to "same value" (`.ra: lr`, `r4: r4`)


def delta(row: CfiRow, before: CfiRow) -> Delta:
    now, then = dict(row.saved), dict(before.saved)
    changed = {reg for reg in now.keys() | then.keys() if now.get(reg) != then.get(reg)}
    cfa = (row.cfa_reg, row.cfa_offset)
    return Delta(cfa if cfa != (before.cfa_reg, before.cfa_offset) else None,
                 now.get(LR) if LR in changed else None,
                 tuple(sorted(reg for reg in changed if reg in now and reg < DWARF_D0 and reg != LR)),
                 any(reg >= DWARF_D0 and reg in now for reg in changed),
                 any(reg not in now for reg in changed))


def row_instructions(change: Delta, cfa_before: int) -> tuple[list[ehabi.Op], int] | None:
    """(the instructions undoing one row, the CFA offset after it), or None
    where no form of Chrome's matches the row (it is left out)."""
    if change.restored:
        return None
    cfa = change.cfa
    if cfa is not None and cfa[0] != SP:  # `.cfa: rK N +`, alone
        if change.return_address is not None or change.saved or change.vfp:
            return None
        return [ehabi.SetVsp(cfa[0]), *_adjust(cfa[1] - cfa_before)], cfa[1]
    offset = cfa_before if cfa is None else cfa[1]
    if change.vfp:  # VFP saves, alone: stepped over
        if change.return_address is not None or change.saved:
            return None
        return _adjust(offset - cfa_before), offset
    regs = [reg for reg in change.saved if 4 <= reg <= 15] + ([LR] if change.return_address is not None else [])
    step = offset - cfa_before
    if step >= 4 * len(regs):
        step -= 4 * len(regs)
    return [*_adjust(step), *([ehabi.Pop(tuple(regs))] if regs else [])], offset


def _adjust(amount: int) -> list[ehabi.Op]:
    return [ehabi.VspAdd(amount)] if amount else []


def chrome_function_unwind(function: FunctionCfi) -> FunctionUnwind | None:
    """The runs Chrome's builder writes for `function`, or None where it
    writes no entry (a first row other than the return to lr)."""
    entry = function.rows[0]
    if entry.problem or (entry.cfa_reg, entry.cfa_offset, entry.saved) != (SP, 0, ()):
        return None
    unwinds = [AddressUnwind(0, ehabi.encode([ehabi.FINISH], chrome=True))]
    cfa_before, dropped = 0, 0
    for number, (before, row) in enumerate(zip(function.rows, function.rows[1:]), 1):
        if (row.cfa_reg, row.cfa_offset, row.saved, row.problem) == (
                before.cfa_reg, before.cfa_offset, before.saved, before.problem):
            continue  # nothing changes: dump_syms writes no row
        found = None if row.problem else row_instructions(delta(row, before), cfa_before)
        if found is None:
            dropped += 1
            continue  # the row before stays in force
        ops, cfa = found
        if row.cfa_reg == SP and cfa < cfa_before:  # an epilogue: it and the rest are left out
            dropped += len(function.rows) - number
            break
        run = ehabi.encode(ops, chrome=True) + unwinds[-1].instructions
        if run != unwinds[-1].instructions:
            unwinds.append(AddressUnwind(row.address - function.start, run))
        cfa_before = cfa
    return FunctionUnwind(function.start, function.end, function.name, tuple(unwinds), len(function.rows), dropped)


def chrome_unwinds(functions: Sequence[FunctionCfi]) -> tuple[FunctionUnwind, ...]:
    """Chrome's runs for every function it writes an entry for."""
    return tuple(found for found in map(chrome_function_unwind, functions) if found is not None)
