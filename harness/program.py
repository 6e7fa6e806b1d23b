"""A program to verify, whatever made it (a generator or a compiler).

Everything the verifier needs and nothing more: memory contents, the entry,
per-function layout (positions and traits) for classifying stops, and the
unwind tables the unwinders are built from (CFI flavours, EHABI sections).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property

from harness.formats.dwarf_cfi import FunctionCfi
from harness.formats.arm_exidx import ExidxSections

POSITIONS = ("prologue", "body", "epilogue")
TRAITS = (
    "leaf",
    "alloca",
    "large_frame",
    "huge_frame",
    "frame_pointer",
    "no_frame_pointer",
    "vfp",
    "page_crossing",
    "multi_epilogue",
)


@dataclass(frozen=True)
class FunctionInfo:
    """Layout of one function: [start, end), prologue [start, prologue_end),
    epilogues as [start, end) ranges; everything else is body."""

    name: str
    start: int
    end: int
    prologue_end: int
    epilogues: tuple[tuple[int, int], ...]
    traits: frozenset[str]

    def position(self, pc: int) -> str:
        return self.position_span(pc)[0]

    def position_span(self, pc: int) -> tuple[str, int, int]:
        """pc's position, and the pcs [low, high) of the function around it
        that share it."""
        if pc < self.prologue_end:
            return "prologue", self.start, self.prologue_end
        low, high = self.prologue_end, self.end
        for start, end in self.epilogues:
            if start <= pc < end:
                return "epilogue", start, end
            if end <= pc:
                low = max(low, end)
            else:
                high = min(high, start)
        return "body", low, high


@dataclass(frozen=True)
class Program:
    name: str
    segments: tuple[tuple[int, bytes], ...]  # (address, contents)
    entry: int
    text_base: int
    functions: tuple[FunctionInfo, ...]  # sorted by start, not overlapping
    # "tables": what v2 encodes; "reference": complete CFI (see harness.unwinders)
    cfi: dict[str, tuple[FunctionCfi, ...]] = field(default_factory=dict)
    expected_result: int | None = None  # what the entry must return
    uses_vfp: bool = False
    args: tuple[int, ...] = ()
    # .ARM.exidx/.ARM.extab: metadata beside the code, not in `segments`
    exidx: ExidxSections | None = None

    @cached_property
    def _starts(self) -> list[int]:
        return [f.start for f in self.functions]

    def function_at(self, pc: int) -> FunctionInfo | None:
        index = bisect_right(self._starts, pc) - 1
        if index >= 0 and pc < self.functions[index].end:
            return self.functions[index]
        return None

    def code(self, address: int, size: int) -> bytes:
        """Up to `size` bytes at `address` (fewer at the end of a segment)."""
        for start, data in self.segments:
            if start <= address < start + len(data):
                return data[address - start : address - start + size]
        raise KeyError(f"{address:#x} is not in the program")
