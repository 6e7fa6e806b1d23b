"""Read a v2 blob: validate it completely once, then look pcs up.

Validation happens at load so that a lookup never meets a surprise: every
function-offset list and every instruction run the tables reference is
decoded and bounds-checked here, in time linear in the blob's size.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterator, NamedTuple

from harness.errors import CorruptTable, EhabiError
from harness.formats import ehabi, uleb128
from harness.formats.chrome_v2.layout import Layout, parse
from harness.formats.chrome_v2.tables import PAGE_SHIFT, V2Tables, continuation_bits

PAGE_HALFWORDS = 1 << (PAGE_SHIFT - 1)


class Lookup(NamedTuple):
    """Where a pc offset falls: function entry, half-words into it, and the
    byte index of the instruction run to execute."""

    function_index: int
    function_start: int  # bytes from the text base
    function_offset: int  # half-words from the function start
    instruction_index: int
    continued: bool = False  # found through the entry before the pc's page (the function started earlier)
    # Every pc offset in [low, high) makes the same decisions, so finds the
    # same entry and run: the pc's page, its entry's span in that page, and
    # the span of the offset-list pair it matched.
    low: int = 0
    high: int = 0


class V2Reader:
    def __init__(self, tables: V2Tables, header: dict[str, int] | None = None):
        self.tables = tables
        self.header = header or {}
        self._validate_pages()
        self.entry_page = self._entry_pages()
        self.page_offsets = [e.page_offset for e in tables.function_table]
        self.offset_lists: dict[int, tuple[tuple[int, int], ...]] = {}
        self.runs: dict[int, tuple[ehabi.Op, ...]] = {}
        self.first_bytes: dict[int, tuple[int, ...]] = {}
        """Each run's instructions' first bytes, by its index (read as it is decoded)."""
        for entry_index, entry in enumerate(tables.function_table):
            self._load_offset_list(entry_index, entry.offset_table_index)

    @classmethod
    def from_blob(cls, blob: bytes, layout: Layout = "seed") -> "V2Reader":
        tables, header = parse(blob, layout)
        return cls(tables, header)

    # ----------------------------------------------------------- validation

    def _validate_pages(self) -> None:
        pages = self.tables.page_table
        count = len(self.tables.function_table)
        if not pages:
            raise CorruptTable("page_table_entries", "the page table is empty")
        if pages[0] != 0:
            raise CorruptTable("page table", f"page 0 starts at function {pages[0]}, not 0", 0)
        for page, first in enumerate(pages):
            if first > count:
                raise CorruptTable(
                    "page table", f"page {page} points at function {first} of {count}", 4 * page
                )
            if page and first < pages[page - 1]:
                raise CorruptTable("page table", f"page {page} goes backwards ({first})", 4 * page)
        for page, (start, end) in enumerate(self._page_ranges()):
            offsets = [e.page_offset for e in self.tables.function_table[start:end]]
            if any(a >= b for a, b in zip(offsets, offsets[1:])):
                raise CorruptTable(
                    "function table", f"entries of page {page} are not in increasing order", 4 * start
                )
        expected = continuation_bits(pages, self.tables.function_table)
        for page, (stored, derived) in enumerate(zip(self.tables.continuation, expected)):
            if stored != derived:
                raise CorruptTable(
                    "function continuation bitvector",
                    f"bit {page} is {int(stored)} but the function table implies {int(derived)}",
                )
            if stored and pages[page] == 0:
                raise CorruptTable(
                    "page table", f"page {page} continues a function but none starts before it", 4 * page
                )

    def _page_ranges(self) -> list[tuple[int, int]]:
        pages = self.tables.page_table
        count = len(self.tables.function_table)
        return [
            (first, pages[page + 1] if page + 1 < len(pages) else count)
            for page, first in enumerate(pages)
        ]

    def _entry_pages(self) -> list[int]:
        owner = [0] * len(self.tables.function_table)
        for page, (start, end) in enumerate(self._page_ranges()):
            for index in range(start, end):
                owner[index] = page
        return owner

    def _load_offset_list(self, entry_index: int, index: int) -> None:
        if index in self.offset_lists:
            return
        table = self.tables.function_offset_table
        field = "function offset table"
        if index >= len(table):
            raise CorruptTable(
                "function table",
                f"entry {entry_index} points at byte {index} of a {len(table)}-byte function offset table",
                4 * entry_index,
            )
        pairs = []
        position = index
        previous = None
        while True:
            try:
                offset, position = uleb128.decode(table, position)
                run_index, position = uleb128.decode(table, position)
            except IndexError:
                raise CorruptTable(field, f"list starting at {index} is not terminated", position) from None
            except ValueError as error:
                raise CorruptTable(field, f"list starting at {index}: {error}", position) from None
            if previous is not None and offset >= previous:
                raise CorruptTable(field, f"offsets do not decrease ({previous} then {offset})", position)
            self._load_run(run_index, position)
            pairs.append((offset, run_index))
            if offset == 0:
                break
            previous = offset
        self.offset_lists[index] = tuple(pairs)

    def _load_run(self, index: int, referenced_at: int) -> None:
        if index in self.runs:
            return
        table = self.tables.unwind_instruction_table
        if index >= len(table):
            raise CorruptTable(
                "function offset table",
                f"instruction index {index} is past the {len(table)}-byte unwind instruction table",
                referenced_at,
            )
        first_bytes: list[int] = []
        try:
            self.runs[index] = tuple(ehabi.decode(table, index, run=True, first_bytes=first_bytes))
            self.first_bytes[index] = tuple(first_bytes)
        except EhabiError as error:
            raise CorruptTable("unwind instruction table", str(error), error.offset) from None

    # --------------------------------------------------------------- lookup

    def lookup(self, pc_offset: int) -> Lookup | None:
        """The entry covering `pc_offset` (bytes from the text base), or None."""
        if pc_offset < 0:
            return None
        page = pc_offset >> PAGE_SHIFT
        pages = self.tables.page_table
        if page >= len(pages):
            return None
        first = pages[page]
        end = pages[page + 1] if page + 1 < len(pages) else len(self.page_offsets)
        in_page = (pc_offset >> 1) & (PAGE_HALFWORDS - 1)
        index = bisect_right(self.page_offsets, in_page, first, end) - 1
        if index < first:
            # The pc precedes every function starting in this page (or none
            # starts here): it lies in the function continued from before.
            if not self.tables.continuation[page]:
                return None
            index = first - 1
        entry = self.tables.function_table[index]
        start_halfwords = self.entry_page[index] * PAGE_HALFWORDS + entry.page_offset
        function_offset = (pc_offset >> 1) - start_halfwords
        page_start = page * PAGE_HALFWORDS
        if index < first:
            span = (0, self.page_offsets[first] if first < end else PAGE_HALFWORDS)
        else:
            span = (self.page_offsets[index], self.page_offsets[index + 1] if index + 1 < end else PAGE_HALFWORDS)
        larger = None  # the offset of the pair before (offsets decrease)
        for offset, run_index in self.offset_lists[entry.offset_table_index]:
            if offset <= function_offset:
                low = max(page_start + span[0], start_halfwords + offset)
                high = page_start + span[1]
                if larger is not None:
                    high = min(high, start_halfwords + larger)
                return Lookup(index, start_halfwords << 1, function_offset, run_index, index < first,
                              low << 1, high << 1)
            larger = offset
        raise AssertionError("validated offset lists end at offset 0")

    def function_starts(self) -> tuple[list[int], int]:
        """Each entry's first pc offset, in increasing order, and the end of
        the pages: `lookup` finds the entry of the last start at or below an
        offset in [0, end), and nothing past it (as `segments`)."""
        starts = [(page * PAGE_HALFWORDS + offset) << 1 for page, offset in zip(self.entry_page, self.page_offsets)]
        return starts, len(self.tables.page_table) * PAGE_HALFWORDS << 1

    def entry_offset_lists(self) -> list[tuple[tuple[int, int], ...]]:
        """Each entry's offset list, (offset in half-words, instruction
        index) pairs from the largest offset down, in entry order."""
        lists = self.offset_lists
        return [lists[entry.offset_table_index] for entry in self.tables.function_table]

    def segments(self) -> Iterator[tuple[int, int | None]]:
        """What `lookup` finds, offset by offset: (first pc offset, instruction
        index or None) in increasing order, each holding up to the next one
        (the last None past the pages). An entry holds from its function's
        start to the next entry's: a page that continues no function has an
        entry at its first half-word (validated: `continuation_bits`)."""
        starts, pages_end = self.function_starts()
        yield 0, None
        for index, pairs in enumerate(self.entry_offset_lists()):
            start = starts[index]
            end = starts[index + 1] if index + 1 < len(starts) else pages_end
            for offset, run_index in reversed(pairs):  # in half-words
                if start + (offset << 1) >= end:
                    break
                yield start + (offset << 1), run_index
        yield pages_end, None

    def run(self, instruction_index: int) -> tuple[ehabi.Op, ...]:
        return self.runs[instruction_index]
