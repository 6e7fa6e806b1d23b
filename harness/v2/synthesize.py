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

import re
from dataclasses import replace
from typing import Callable

from harness.cfi import CfiRow, FunctionCfi
from harness.disasm import decode_one, sweep
from harness.epilogue import LIMIT, Branch, Release, Restore, RestoreVfp, Step, classify, ends_frame
from harness.frame import DWARF_D0, PC, SP


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


# Encodings that may end a frame (little-endian): pop {..., pc}, b (16-bit),
# bx lr, pop.w/ldm sp! with pc, ldr pc, [sp], #4, b.w. Found by one regex
# scan, so only short windows before them are ever disassembled.
_MAY_END_FRAME = re.compile(
    rb"(?=[\x00-\xff][\xbd\xe0-\xe7]|\x70\x47|\xbd\xe8[\x00-\xff][\x80-\xff]"
    rb"|\x5d\xf8\x04\xfb|[\x00-\xff][\xf0-\xf7][\x00-\xff][\x90-\x9f\xb0-\xbf])",
    re.DOTALL,
)


def _window_ending_at(code: bytes, start: int, offset: int) -> list[tuple[int, int, str]]:
    """Boundaries of up to LIMIT instructions before `offset`, ending with the
    one at `offset`; [] if no sweep lands on it. A window may start inside an
    instruction, so later starts are tried too."""
    for window in range(max(0, offset - 4 * LIMIT), offset + 1, 2):
        found = sweep(code[window : offset + 4], start + window)
        for index, (address, _, _) in enumerate(found):
            if address == start + offset:
                return found[: index + 1]
    return []


def _in_it_block(window: list[tuple[int, int, str]], index: int) -> bool:
    """Whether instruction `index` is governed by an IT before it (IT covers
    as many instructions as its mnemonic has letters after the I)."""
    for back in range(1, 5):
        if index - back < 0:
            return False
        mnemonic = window[index - back][2]
        if mnemonic.startswith("it"):
            return back <= len(mnemonic) - 1
    return False


def _epilogues(code: bytes, start: int, end: int):
    """(instructions, steps) of every epilogue, from its first teardown
    instruction to its return; only instructions near a return are decoded."""
    for match in _MAY_END_FRAME.finditer(code):
        offset = match.start()
        if offset % 2:
            continue
        window = _window_ending_at(code, start, offset)
        if not window or _in_it_block(window, len(window) - 1):
            continue
        last = decode_one(code[offset : offset + 4], start + offset)
        step = classify(last) if last else None
        if step is None or not ends_frame(step) or last.conditional:
            continue
        if isinstance(step, Branch) and start <= step.target < end:
            continue  # a branch inside the function, not a tail call
        insns, steps = [last], [step]
        index = len(window) - 1
        while index > 0:  # walk back over the teardown
            insn = _decoded(code, start, window[index - 1])
            before = classify(insn) if insn else None
            if before is None or ends_frame(before) or insn.conditional or _in_it_block(window, index - 1):
                break
            insns.insert(0, insn)
            steps.insert(0, before)
            index -= 1
        if isinstance(step, Branch) and len(insns) == 1:
            continue  # a plain branch out, with no frame to tear down here
        prelude = [i for i in (_decoded(code, start, w) for w in window[max(0, index - 4) : index]) if i]
        yield prelude, insns, steps


def _decoded(code: bytes, start: int, boundary: tuple[int, int, str]):
    address, size, _ = boundary
    return decode_one(code[address - start : address - start + size], address)


def synthesize_epilogues(function: FunctionCfi, code_at: Callable[[int, int], bytes]) -> FunctionCfi:
    """`function` with rows for its epilogues added; epilogues that already
    have rows, or that cannot be followed, are left as they are (the latter
    reported in `problems`)."""
    code = code_at(function.start, function.end - function.start)
    explicit = {row.address for row in function.rows}
    added: dict[int, CfiRow] = {}
    problems = list(function.problems)
    for prelude, insns, steps in _epilogues(code, function.start, function.end):
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

