"""The four v2 tables, and how the encoder builds them from function unwinds.

Page table: per 128 KiB page of the text, the index of the first function
entry that starts in it (pages where none starts hold the next index).
Continuation bits: the page's first address lies in a function that started
on an earlier page. Function table: (page offset in half-words, byte index
into the function offset table). Function offset table: per function,
(ULEB128 offset in half-words, ULEB128 instruction-table index) pairs in
decreasing offset order, ending at offset 0. Unwind instruction table: EHABI
runs, each ending with finish (or refuse-to-unwind).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Sequence

from harness.errors import TableOverflow
from harness.formats import uleb128
from harness.formats.chrome_v2.encoder import FunctionUnwind

PAGE_SHIFT = 17  # 128 KiB pages
U16_MAX = 0xFFFF
OFFSET_INDEX_MAX = U16_MAX  # a function table entry's offset list index: 16 bits


@dataclass(frozen=True, slots=True)  # one per function of the text: no per-instance dict
class FunctionTableEntry:
    page_offset: int  # half-words from the start of the entry's page
    offset_table_index: int  # byte index into the function offset table


class FunctionTable(Sequence[FunctionTableEntry]):
    """A function table as the blob stores it: (page offset, list index)
    half-word pairs in one array, read as FunctionTableEntry. The encoder's
    table has an entry per function (hundreds of thousands), which as
    objects would take more memory than all the tables' bytes together."""

    __slots__ = ("halfwords",)

    def __init__(self, halfwords: array) -> None:
        self.halfwords = halfwords  # array("H"): page offset, list index, page offset, ...

    def __len__(self) -> int:
        return len(self.halfwords) >> 1

    def __getitem__(self, index):  # an int, or a slice (a tuple of entries)
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("function table index out of range")
        return FunctionTableEntry(self.halfwords[2 * index], self.halfwords[2 * index + 1])

    def __iter__(self) -> Iterator[FunctionTableEntry]:
        halfwords = iter(self.halfwords)
        return map(FunctionTableEntry, halfwords, halfwords)  # consecutive pairs

    def __eq__(self, other: object) -> bool:  # equal to any sequence of the same entries, a tuple too
        if isinstance(other, FunctionTable):
            return self.halfwords == other.halfwords
        return isinstance(other, Sequence) and len(other) == len(self) and all(
            mine == theirs for mine, theirs in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"FunctionTable({list(self)!r})"


def function_table_bytes(table: Sequence[FunctionTableEntry]) -> bytes:
    """The table's bytes: little-endian (page offset, list index) pairs."""
    if not isinstance(table, FunctionTable):
        return struct.pack(f"<{2 * len(table)}H", *(h for e in table for h in (e.page_offset, e.offset_table_index)))
    if sys.byteorder == "little":
        return table.halfwords.tobytes()
    swapped = array("H", table.halfwords)
    swapped.byteswap()
    return swapped.tobytes()


@dataclass(frozen=True)
class V2Tables:
    page_table: tuple[int, ...]
    continuation: tuple[bool, ...]
    function_table: Sequence[FunctionTableEntry]  # a FunctionTable when encoded, a tuple when parsed
    function_offset_table: bytes
    unwind_instruction_table: bytes


def pack_sharing_suffixes(items_by_priority: Sequence[bytes]) -> tuple[bytes, dict[bytes, int]]:
    """Concatenate distinct byte strings, storing a string that is a suffix of
    another only once (inside it). Earlier items get lower indices.

    Sharing is sound for both v2 variable-length tables: a reader decodes
    forward from the index and stops at the terminator both strings end with.
    """
    rank = {item: i for i, item in enumerate(dict.fromkeys(items_by_priority))}
    host_of: dict[bytes, bytes] = {}
    suffix_host: dict[bytes, bytes] = {}
    for item in sorted(rank, key=lambda b: (-len(b), rank[b])):
        host = suffix_host.get(item)
        if host is None:
            host = item
            for cut in range(len(item)):
                suffix_host.setdefault(item[cut:], item)
        host_of[item] = host
    host_rank: dict[bytes, int] = {}
    for item, host in host_of.items():
        host_rank[host] = min(host_rank.get(host, rank[item]), rank[item])
    table = bytearray()
    host_index: dict[bytes, int] = {}
    for host in sorted(host_rank, key=lambda h: (host_rank[h], h)):
        host_index[host] = len(table)
        table += host
    index = {
        item: host_index[host] + len(host) - len(item) for item, host in host_of.items()
    }
    return bytes(table), index


def offset_list(function: FunctionUnwind) -> tuple[tuple[int, bytes], ...]:
    """(half-word offset, run) pairs in the table's decreasing order."""
    return tuple((u.offset >> 1, u.instructions) for u in reversed(function.address_unwinds))


def build_tables(functions: Sequence[FunctionUnwind], text_base: int) -> V2Tables:
    """Tables for functions that already cover the text (see encoder.cover_text)."""
    lists = _lists_by_identity(functions)
    distinct_lists = list(dict.fromkeys(lists.values()))
    # Frequent runs first, so they get one-byte ULEB128 indices.
    uses = Counter(run for pairs in distinct_lists for _, run in pairs)
    runs_by_priority = sorted(uses, key=lambda run: (-uses[run], run))
    instruction_table, run_index = pack_sharing_suffixes(runs_by_priority)

    encoded_lists = {
        pairs: b"".join(uleb128.encode(off) + uleb128.encode(run_index[run]) for off, run in pairs)
        for pairs in distinct_lists
    }
    offset_table, list_index = pack_sharing_suffixes(list(encoded_lists.values()))
    index_of = {key: list_index[encoded_lists[pairs]] for key, pairs in lists.items()}
    # Every page the text reaches, not only those an entry starts in: the
    # last entry may run on into later pages (a long function, or an entry
    # grouped across several), which the continuation bits then cover.
    page_count = ((functions[-1].end - 1 - text_base) >> PAGE_SHIFT) + 1
    return tables_from(functions, [index_of[id(f.address_unwinds)] for f in functions], offset_table,
                       instruction_table, text_base, page_count)


def _lists_by_identity(functions: Sequence[FunctionUnwind]) -> dict[int, tuple[tuple[int, bytes], ...]]:
    """offset_list of each distinct `address_unwinds` object, by its id, in
    order of first use. The encoder shares one tuple between functions of
    the same shape (encoder.SharedRuns), so this derives a few hundred
    lists for a few hundred thousand functions; ids are stable here since
    `functions` keeps every tuple alive for the whole build."""
    lists: dict[int, tuple[tuple[int, bytes], ...]] = {}
    for function in functions:
        key = id(function.address_unwinds)
        if key not in lists:
            lists[key] = offset_list(function)
    return lists


def tables_from(functions: Sequence[FunctionUnwind], list_indices: Sequence[int], offset_table: bytes,
                instruction_table: bytes, text_base: int, page_count: int) -> V2Tables:
    """The page and function tables over `functions`, whose offset lists
    start at `list_indices` of `offset_table`."""
    halfwords = array("H")
    pages: list[int] = []
    for function, index in zip(functions, list_indices):
        relative = function.start - text_base
        if index > OFFSET_INDEX_MAX:
            raise TableOverflow(
                f"function offset table index {index} for {function.name} does not fit "
                f"the 16-bit field (the table is {len(offset_table)} bytes; at most {OFFSET_INDEX_MAX:,} are "
                "addressable)"
            )
        halfwords.append((relative >> 1) & U16_MAX)
        halfwords.append(index)
        pages.append(relative >> PAGE_SHIFT)
    page_table = []
    entry = 0
    for page in range(page_count):
        while entry < len(pages) and pages[entry] < page:
            entry += 1
        page_table.append(entry)
    entries = FunctionTable(halfwords)
    return V2Tables(
        page_table=tuple(page_table),
        continuation=continuation_bits(page_table, entries),
        function_table=entries,
        function_offset_table=offset_table,
        unwind_instruction_table=instruction_table,
    )


def continuation_bits(page_table: Sequence[int],
                      function_table: Sequence[FunctionTableEntry]) -> tuple[bool, ...]:
    """Per page: does its first address continue a function from an earlier page?
    Only if no entry of that page starts at its first half-word."""
    bits = []
    for page, first in enumerate(page_table):
        end = page_table[page + 1] if page + 1 < len(page_table) else len(function_table)
        end = min(end, len(function_table))  # stay in bounds even for corrupt input
        starts_here = first < end and function_table[first].page_offset == 0
        bits.append(page > 0 and not starts_here)
    return tuple(bits)
