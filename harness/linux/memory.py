"""The emulated process's address space: which pages are taken, where a new
mapping goes, and the program break.

Pure bookkeeping over page ranges; the system-call layer applies what it
decides to the emulator. New mappings without an address go top-down from
just below the stack, as Linux's default layout places them, always where
nothing is (the program, the stack, the helper page), so that a program
linked anywhere meets a consistent address space.
"""

from __future__ import annotations

from bisect import insort

from harness.emulation.placement import ADDRESS_SPACE, PAGE, RESERVED

MAX_MAPPED = 1 << 30  # bytes of anonymous and file mappings a program may hold (then ENOMEM)
# Mappings a program may hold at once (then ENOMEM, as Linux past vm.max_map_count,
# 65530 there): the engine's mapping calls slow down faster than linearly with
# their number (one-page maps in a process verified at samples, both of its
# runs: 1,024 take 1.3 s, 2,048 5 s, 4,096 36 s).
MAX_MAPPINGS = 1024


def page_down(address: int) -> int:
    return address & ~(PAGE - 1)


def page_up(address: int) -> int:
    return (address + PAGE - 1) & ~(PAGE - 1)


class AddressSpace:
    """Taken page ranges [start, end), sorted and merged."""

    def __init__(self, taken: list[tuple[int, int]], ceiling: int, owned: list[tuple[int, int]] = ()):
        self._ranges: list[tuple[int, int]] = []
        self.owned = tuple(RESERVED) + tuple(owned)  # the harness's pages: never released
        for start, end in list(self.owned) + list(taken):
            self.take(page_down(start), page_up(end))
        self.ceiling = ceiling  # new mappings go below this
        self.mapped = 0  # bytes the program mapped itself
        self._regions: list[tuple[int, int]] = []  # each engine mapping the program made, as the engine splits them

    @property
    def regions(self) -> int:
        """The engine mappings the program holds (MAX_MAPPINGS)."""
        return len(self._regions)

    def add_region(self, start: int, end: int) -> None:
        insort(self._regions, (start, end))

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple(self._ranges)

    def is_free(self, start: int, end: int) -> bool:
        return 0 < start < end <= ADDRESS_SPACE and all(end <= low or high <= start for low, high in self._ranges)

    def take(self, start: int, end: int) -> None:
        insort(self._ranges, (start, end))
        merged: list[tuple[int, int]] = []
        for low, high in self._ranges:
            if merged and low <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
            else:
                merged.append((low, high))
        self._ranges = merged

    def may_release(self, start: int, end: int) -> bool:
        return all(end <= low or high <= start for low, high in self.owned)

    def release(self, start: int, end: int) -> list[tuple[int, int]]:
        """Free [start, end); the parts of it that were taken (to unmap)."""
        freed = self.taken_parts(start, end)
        self._ranges = without(self._ranges, start, end)
        self._regions = without(self._regions, start, end)
        return freed

    def region_end(self, address: int) -> int | None:
        """The end of the mapping the program made that holds `address` (None: none does)."""
        return next((high for low, high in self._regions if low <= address < high), None)

    def taken_parts(self, start: int, end: int) -> list[tuple[int, int]]:
        return [(max(low, start), min(high, end)) for low, high in self._ranges if low < end and start < high]

    def find(self, size: int, below: int | None = None) -> int | None:
        """The highest page-aligned start of `size` free bytes ending at or
        below `below` (default: the ceiling), or None."""
        size = page_up(size)
        top = self.ceiling if below is None else min(below, self.ceiling)
        gap_end = ADDRESS_SPACE
        for low, high in reversed(self._ranges):  # the gaps [high, gap_end), highest first
            end = min(gap_end, top)
            if end - high >= size:
                return end - size
            gap_end = low
        return None  # the null page is always taken (RESERVED): no gap below the lowest range


def without(ranges: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """`ranges` less [start, end): a range it falls inside splits in two."""
    out = []
    for low, high in ranges:
        if high <= start or end <= low:
            out.append((low, high))
            continue
        if low < start:
            out.append((low, start))
        if end < high:
            out.append((end, high))
    return out
