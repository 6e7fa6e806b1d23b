"""Encode-time epilogue synthesis (encoder policy `synthesize`).

For CFI without epilogue rows (clang on arm32), disassemble the function,
find each epilogue (the run of teardown instructions before a return or tail
call), and derive the rows a compiler would have emitted: the state after
each teardown instruction, and the body's state again after the return.

The sp-relative depth of a frame whose CFA is defined through r7 is not in
the CFI; it is learnt at the first pop or vpop, whose registers' save slots
say where sp is (sp = CFA + slot of the first register popped).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, PC, SP
from harness.thumb.epilogue import AdjustFramePointer, Release, Restore, RestoreVfp, Step, find_epilogues


class Unsynthesizable(Exception):
    pass


def _depth(row: CfiRow, first_slot_reg: int) -> int:
    """CFA - sp, from the save slot of the register the next pop reads first."""
    if row.cfa_reg == SP:
        return row.cfa_offset
    slots = dict(row.saved)
    if first_slot_reg not in slots:
        raise Unsynthesizable(f"sp unknown: r{first_slot_reg} has no save slot")
    return -slots[first_slot_reg]


def _after(row: CfiRow, step: Step, constants: dict[int, int]) -> CfiRow:
    """The state after one teardown instruction."""
    saved = dict(row.saved)
    if isinstance(step, Release):
        if step.frame_pointer is not None:
            if row.cfa_reg != step.frame_pointer:
                raise Unsynthesizable(f"sp from r{step.frame_pointer}, but the CFA is not defined through it")
            return replace(row, cfa_reg=SP, cfa_offset=row.cfa_offset + step.below)
        amount = step.amount if step.reg is None else constants.get(step.reg)
        if amount is None:
            raise Unsynthesizable(f"sp released by r{step.reg}, whose value is unknown")
        if row.cfa_reg != SP:
            return row  # the CFA is still defined through the frame pointer
        return replace(row, cfa_offset=row.cfa_offset - amount)
    if isinstance(step, AdjustFramePointer):
        if row.cfa_reg == step.reg:  # the CFA stays put while its base register moves
            return replace(row, cfa_offset=row.cfa_offset - step.amount)
        return row
    if isinstance(step, Restore):
        regs = [r for r in step.regs if r != PC]
        depth = _depth(row, regs[0]) - 4 * len(regs)
        kept = tuple((r, o) for r, o in sorted(saved.items()) if r not in regs)
        return CfiRow(row.address, SP, depth, kept)
    if isinstance(step, RestoreVfp):
        first = DWARF_D0 + step.first
        depth = _depth(row, first) - 8 * step.count
        gone = range(first, first + step.count)
        kept = tuple((r, o) for r, o in sorted(saved.items()) if r not in gone)
        return CfiRow(row.address, SP, depth, kept)
    raise Unsynthesizable(f"{step} is not a teardown instruction")


def _constants_before(insns: list, index: int) -> dict[int, int]:
    """Values movw/movt set just before instruction `index` (for `add sp, r12`)."""
    values: dict[int, int] = {}
    for insn in insns[max(0, index - 4) : index]:
        if insn.op == "movw" and insn.imm is not None:
            values[insn.regs[0]] = insn.imm
        elif insn.op == "movt" and insn.imm is not None and insn.regs[0] in values:
            values[insn.regs[0]] = (values[insn.regs[0]] & 0xFFFF) | (insn.imm << 16)
    return values


def synthesize_epilogues(function: FunctionCfi, code_at: Callable[[int, int], bytes]) -> FunctionCfi:
    """`function` with rows for its epilogues added; epilogues that already
    have rows, or that cannot be followed, are left as they are (the latter
    reported in `problems`)."""
    code = code_at(function.start, function.end - function.start)
    explicit = {row.address for row in function.rows}
    added: dict[int, CfiRow] = {}
    problems = list(function.problems)
    for prelude, insns, steps in find_epilogues(code, function.start, function.end):
        first, last = len(prelude), len(prelude) + len(insns) - 1
        insns = prelude + insns
        steps = [None] * len(prelude) + steps
        span = {i.address + i.size for i in insns[first:last]}
        if span & explicit:
            continue  # the CFI already describes this epilogue
        body = function.row_at(insns[first].address)
        if body.problem:
            continue
        rows = []
        try:
            state = body
            for index in range(first, last):
                if steps[index] is not None:  # neutral instructions change no row
                    state = _after(state, steps[index], _constants_before(insns, index))
                rows.append(replace(state, address=insns[index + 1].address))
        except Unsynthesizable as error:
            problems.append(f"{insns[first].address:#x}: epilogue not synthesized: {error}")
            continue
        after_return = insns[last].address + insns[last].size
        if after_return < function.end and after_return not in explicit:
            rows.append(replace(body, address=after_return))
        added.update((row.address, row) for row in rows)
    merged = sorted([r for r in function.rows if r.address not in added] + list(added.values()),
                    key=lambda r: r.address)
    collapsed = [merged[0]]
    for row in merged[1:]:
        if replace(row, address=0) != replace(collapsed[-1], address=0):
            collapsed.append(row)
    return replace(function, rows=tuple(collapsed), problems=tuple(problems))

