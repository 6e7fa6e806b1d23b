"""CFI rows -> per-function unwind runs (the v2 design's 'address unwinds').

Each row's run is derived from that row's complete state (CFA rule and every
saved register), never from the previous row, so epilogue rows and GCC's
restore_state encode as correctly as prologue rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Iterable, Literal

from harness.errors import EncodeError
from harness.formats import ehabi
from harness.program import CfiRow, FunctionCfi
from harness.registers import DWARF_D0, PC, SP

EpiloguePolicy = Literal["drop", "keep", "synthesize"]
EPILOGUE_POLICIES: tuple[EpiloguePolicy, ...] = ("drop", "keep", "synthesize")

FINISH_ONLY = ehabi.encode([ehabi.FINISH])  # lr -> pc, sp unchanged
REFUSE_RUN = ehabi.encode([ehabi.REFUSE])


class InexpressibleState(Exception):
    """A row whose saved-register layout EHABI pops cannot express."""


# Slots (no per-instance dict) for both: an encoding of a Chrome-sized
# library holds a FunctionUnwind per function, hundreds of thousands.
@dataclass(frozen=True, slots=True)
class AddressUnwind:
    """From `offset` bytes into the function on, run `instructions`."""

    offset: int
    instructions: bytes


@dataclass(frozen=True, slots=True)
class FunctionUnwind:
    """Unwind runs of one code range; `address_unwinds` ascend, the first at 0."""

    start: int
    end: int
    name: str
    address_unwinds: tuple[AddressUnwind, ...]
    rows: int = 0  # CFI rows in the input
    dropped_rows: int = 0  # epilogue rows left out under policy `drop`
    problems: tuple[str, ...] = ()


# How far a run may move vsp: down, only past saves a compiler leaves below
# the CFA's sp (a run that must go further describes no frame); up, within
# the 32-bit address space.
MAX_VSP_DOWN, MAX_VSP_UP = 0x1000, 1 << 32


def _vsp_add(amount: int) -> ehabi.VspAdd:
    if not -MAX_VSP_DOWN <= amount <= MAX_VSP_UP:
        raise InexpressibleState(f"vsp would move {amount:+d} bytes")
    return ehabi.VspAdd(amount)


def state_instructions(row: CfiRow, chrome: bool = False) -> bytes:
    """The run that undoes the frame described by one CFI row; with
    `chrome`, in the opcodes Chrome's runtime executes, as its builder
    writes them: VFP and r0-r3 saves are stepped over (Chrome restores
    neither), a pop without lr takes the mask form."""
    ops: list[ehabi.Op] = []
    if row.cfa_offset % 4:
        raise InexpressibleState(f"CFA offset {row.cfa_offset} is not a multiple of 4")
    if row.cfa_reg != SP:
        if not 0 <= row.cfa_reg <= 15 or row.cfa_reg == PC:
            raise InexpressibleState(f"CFA through r{row.cfa_reg}")
        ops.append(ehabi.SetVsp(row.cfa_reg))
    # Positions are relative to the CFA; vsp starts at CFA - cfa_offset.
    cursor = -row.cfa_offset
    group: list[int] = []
    group_is_vfp = False
    saved = [(reg, offset) for reg, offset in row.saved if not chrome or 4 <= reg <= 15]
    for offset, reg in sorted((offset, reg) for reg, offset in saved):
        is_vfp = reg >= DWARF_D0
        if offset % 4:
            raise InexpressibleState(f"{_name(reg)} saved at unaligned CFA{offset:+d}")
        if group and (offset < cursor):
            raise InexpressibleState(f"{_name(reg)} at CFA{offset:+d} overlaps another save")
        extends = (
            group
            and offset == cursor
            and is_vfp == group_is_vfp
            and (reg == group[-1] + 1 if is_vfp else reg > group[-1])
        )
        if not extends:
            _flush(ops, group, group_is_vfp)
            if offset != cursor:
                ops.append(_vsp_add(offset - cursor))
            group, group_is_vfp = [], is_vfp
        group.append(reg)
        cursor = offset + (8 if is_vfp else 4)
    _flush(ops, group, group_is_vfp)
    if cursor != 0:
        ops.append(_vsp_add(-cursor))
    ops.append(ehabi.FINISH)
    return ehabi.encode(ops, chrome)


def _flush(ops: list[ehabi.Op], group: list[int], is_vfp: bool) -> None:
    if not group:
        return
    if is_vfp:
        ops.append(ehabi.PopVfp(group[0] - DWARF_D0, len(group)))
    else:
        ops.append(ehabi.Pop(tuple(group)))


def _name(reg: int) -> str:
    return f"d{reg - DWARF_D0}" if reg >= DWARF_D0 else f"r{reg}"


def starts_epilogue(row: CfiRow, body: CfiRow) -> bool:
    """Chrome's rule: the sp-based CFA offset falls below the body's."""
    return row.cfa_reg == SP and body.cfa_reg == SP and row.cfa_offset < body.cfa_offset


class SharedRuns:
    """What one encoding derives once and shares between functions: the run
    of each distinct unwind state (a Chrome-sized library has about a
    million rows but a few thousand states, and deriving a run is most of
    the encoder's work), and one tuple of AddressUnwind per distinct list,
    so functions of the same shape hold no per-address objects of their own."""

    def __init__(self) -> None:
        self._runs: dict[tuple, bytes | str] = {}
        self._lists: dict[tuple[tuple[int, bytes], ...], tuple[AddressUnwind, ...]] = {}

    def run(self, row: CfiRow, chrome: bool) -> bytes | str:
        """state_instructions(row, chrome), or why the state is inexpressible."""
        key = (row.cfa_reg, row.cfa_offset, row.saved, chrome)
        found = self._runs.get(key)
        if found is None:
            try:
                found = state_instructions(row, chrome)
            except InexpressibleState as error:
                found = str(error)
            self._runs[key] = found
        return found

    def unwinds(self, pairs: tuple[tuple[int, bytes], ...]) -> tuple[AddressUnwind, ...]:
        """The shared tuple of AddressUnwind for (offset, run) `pairs`."""
        found = self._lists.get(pairs)
        if found is None:
            found = self._lists[pairs] = tuple(AddressUnwind(offset, run) for offset, run in pairs)
        return found


def function_unwind(function: FunctionCfi, policy: EpiloguePolicy, chrome: bool = False,
                    shared: SharedRuns | None = None) -> FunctionUnwind:
    """Encode one function's rows under an epilogue policy (`synthesize`
    arrives here as `keep`: its rows were added beforehand); with
    `chrome`, in Chrome's runtime's opcodes (`state_instructions`).
    Functions encoded with the same `shared` share their runs and lists."""
    shared = shared or SharedRuns()
    pairs: list[tuple[int, bytes]] = []
    problems = list(function.problems)
    dropped = 0
    body = function.rows[0]
    last_run = None
    for row in function.rows:
        if policy == "drop" and starts_epilogue(row, body):
            dropped += 1
            continue
        body = row
        run = REFUSE_RUN if row.problem else shared.run(row, chrome)
        if isinstance(run, str):  # inexpressible: the reason, for the problems
            problems.append(f"{row.address:#x}: {run}")
            run = REFUSE_RUN
        if run == last_run:
            continue  # same state as the address before: no new entry
        pairs.append((row.address - function.start, run))
        last_run = run
    return FunctionUnwind(
        start=function.start,
        end=function.end,
        name=function.name,
        address_unwinds=shared.unwinds(tuple(pairs)),
        rows=len(function.rows),
        dropped_rows=dropped,
        problems=tuple(problems),
    )


def cover_text(functions: Iterable[FunctionUnwind], text_base: int) -> list[FunctionUnwind]:
    """Sorted functions plus fillers so that every address from `text_base` on has
    an entry: finish-only for gaps between functions, refuse-to-unwind before the
    first function and after the last (unless that ends on a page boundary)."""
    ordered = _in_address_order(functions)
    if not ordered:
        raise EncodeError("no functions to encode")
    covered: list[FunctionUnwind] = []
    position = text_base
    for function in ordered:
        if function.start < text_base:
            raise EncodeError(
                f"function {function.name} at {function.start:#x} lies below the text base {text_base:#x}"
            )
        if (function.start - text_base) % 2 or (function.end - text_base) % 2 or function.end <= function.start:
            raise EncodeError(
                f"function {function.name} [{function.start:#x}, {function.end:#x}) is misaligned or empty"
            )
        if function.start < position:
            previous = covered[-1]
            raise EncodeError(
                f"functions overlap: {previous.name} [{previous.start:#x}, {previous.end:#x}) "
                f"and {function.name} [{function.start:#x}, {function.end:#x})"
            )
        if function.start > position:
            filler = REFUSE_RUN if not covered else FINISH_ONLY
            label = "<before first function>" if not covered else "<gap>"
            covered.append(_filler(position, function.start, label, filler))
        covered.append(function)
        position = function.end
    if (position - text_base) % (1 << 17):
        covered.append(_filler(position, position, "<after last function>", REFUSE_RUN))
    return covered


def _in_address_order(functions: Iterable[FunctionUnwind]) -> list[FunctionUnwind]:
    """`functions` sorted by (start, end), stably; input that is in order
    already (an encoder's usual case) is not sorted, which would build a
    key tuple per function."""
    ordered = list(functions)
    if any(later.start < earlier.start or (later.start == earlier.start and later.end < earlier.end)
           for earlier, later in pairwise(ordered)):
        ordered.sort(key=lambda f: (f.start, f.end))
    return ordered


def _filler(start: int, end: int, name: str, run: bytes) -> FunctionUnwind:
    return FunctionUnwind(start, end, name, (AddressUnwind(0, run),))
