"""CFI rows as address ranges, for the comparator tables (vmkunwind, QUT)
that map each code range to one encoded rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.errors import EncodeError
from harness.program import CfiRow, FunctionCfi

Ranges = list[tuple[int, bytes | None]]  # (start offset from the text base, encoded rule or None: no entry)


def row_ranges(functions: Sequence[FunctionCfi], text_base: int, encode_row: Callable[[CfiRow], bytes],
               inexpressible: type[Exception]) -> tuple[Ranges, tuple[tuple[str, str], ...]]:
    """A range per row (equal neighbours merged), no entry in the gaps
    between functions and after the last; a row `encode_row` refuses with
    `inexpressible` gets no entry and is listed as (function, "address: why")."""
    ranges: Ranges = []
    refused: list[tuple[str, str]] = []
    end_before = None
    for function in sorted(functions, key=lambda f: f.start):
        if function.start < text_base:
            raise EncodeError(f"function {function.name} at {function.start:#x} lies below the text base "
                              f"{text_base:#x}")
        if end_before is not None and function.start < end_before:
            raise EncodeError(f"function {function.name} at {function.start:#x} overlaps the one before")
        if end_before is not None and function.start > end_before:
            add_range(ranges, end_before - text_base, None)
        for row in function.rows:
            try:
                encoded = encode_row(row)
            except inexpressible as why:
                refused.append((function.name, f"{row.address:#x}: {why}"))
                encoded = None
            add_range(ranges, row.address - text_base, encoded)
        end_before = function.end
    if end_before is not None:
        add_range(ranges, end_before - text_base, None)
    return ranges, tuple(refused)


def add_range(ranges: Ranges, start: int, encoded: bytes | None) -> None:
    """A range from `start` on (replacing one that starts there too), unless
    it says what the one before says."""
    if ranges and ranges[-1][0] == start:
        ranges.pop()
    if not ranges or ranges[-1][1] != encoded:
        ranges.append((start, encoded))
