"""The compiled frame analysis (harness/thumb/csrc; analysis.h says what
it covers): `ProgramCode` reads a program's loaded bytes as any `code_at`
does, and holds them for the compiled analysis, which
frame_analysis.analyse_calling asks first. Where that gives up (or is not
built), the Python analyses, with the same result."""

from __future__ import annotations

from typing import Iterable

from harness.program import CfiRow, FunctionCfi
from harness.thumb.analysed import NOT_SINGLE, UNREACHED, Analysed, ProgramFacts, labels_in
from harness.thumb.disasm import CAPSTONE_LIBRARY
from harness.thumb.frame_effects import LOST_RETURN

# The problems of rows by number, as the compiled analysis gives them (csrc/explore.c).
PROBLEMS = (None, UNREACHED, NOT_SINGLE, LOST_RETURN)
try:
    from harness.thumb import _analysis

    # ImportError: a capstone of another version than it was built with
    _analysis.Code([], CAPSTONE_LIBRARY, CfiRow, PROBLEMS)
except ImportError:  # not built (pip install -e . builds it): the Python alone, several times slower
    _analysis = None
AVAILABLE = _analysis is not None
NONE: frozenset = frozenset()


class ProgramCode:
    """`code_at(address, size)` over a program's loaded segments, (start,
    bytes) each (b"" outside them, or KeyError with `missing`), with the
    compiled analysis of them (`native`, None when it is not built)."""

    def __init__(self, segments: Iterable[tuple[int, bytes]], missing: bool = False):
        self.segments = tuple((start, bytes(data)) for start, data in segments)
        self.missing = missing  # KeyError outside the segments, as Program.code has it, rather than b""
        # the rows it makes share each saves tuple met (a large program's rows hold a few thousand distinct
        # ones: a million functions' rows are most of the memory its analysis takes)
        self.native = _analysis.Code(list(self.segments), CAPSTONE_LIBRARY, CfiRow, PROBLEMS) if AVAILABLE else None

    def __call__(self, address: int, size: int) -> bytes:
        for start, data in self.segments:
            if start <= address < start + len(data):
                return data[address - start : address - start + size]
        if self.missing:
            raise KeyError(f"{address:#x} is not in the program")
        return b""


def compiled_analysis(name: str, start: int, end: int, code_at, facts: ProgramFacts, bounded: bool,
                      arm: bool, rows: bool = True) -> Analysed | None:
    """The function's analysis, compiled, or None where the compiled analysis
    gives it to the Python (or is not at hand); with no rows unless `rows`."""
    if not isinstance(code_at, ProgramCode) or code_at.native is None:
        return None
    found = code_at.native.analyse(start, end, frozenset(facts.noreturn), facts.data_spans,
                                   labels_in(facts.labels, start, end), bounded, arm, rows)
    return None if found is None else _analysed(name, start, end, found)


def _analysed(name: str, start: int, end: int, found: tuple) -> Analysed:
    """The compiled analysis's parts (harness/thumb/csrc/module.c) as an
    Analysed: its rows made there, the problems as the Python words them."""
    rows, callees, returns, unreached, arm_callees, asked, branched, loaded, falls_through, returned, problems = found
    called = _frozen(callees)
    return Analysed(FunctionCfi(name, start, end, rows, tuple(problems)), called, returns, tuple(unreached),
                    _frozen(arm_callees), called if asked == called else _frozen(asked), _frozen(branched),
                    _frozen(loaded), falls_through, _frozen(returned))


def _frozen(items) -> frozenset:
    """A frozenset, the one empty one where it is empty (each takes 216 bytes)."""
    made = frozenset(items)
    return made if made else NONE
