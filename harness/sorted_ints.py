"""A sorted set of integers that grows one at a time: function discovery
adds a start at a time to the million it knows (Chromium's), asking the
neighbours of an address between additions. A plain sorted list makes
each addition move half the list (quadratic over the search); here the
numbers are kept in blocks of at most 2 * BLOCK, so an addition moves
one block."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable

BLOCK = 512


class SortedInts:
    def __init__(self, numbers: Iterable[int] = ()):
        ordered = sorted(set(numbers))
        self._blocks = [ordered[at:at + BLOCK] for at in range(0, len(ordered), BLOCK)]
        self._lasts = [block[-1] for block in self._blocks]  # each block's greatest

    def add(self, number: int) -> None:
        if not self._blocks:
            self._blocks, self._lasts = [[number]], [number]
            return
        index = min(bisect_left(self._lasts, number), len(self._blocks) - 1)
        block = self._blocks[index]
        position = bisect_left(block, number)
        if position < len(block) and block[position] == number:
            return
        insort(block, number)
        self._lasts[index] = block[-1]
        if len(block) > 2 * BLOCK:
            self._blocks[index:index + 1] = [block[:BLOCK], block[BLOCK:]]
            self._lasts[index:index + 1] = [block[BLOCK - 1], block[-1]]

    def at_or_before(self, number: int) -> int | None:
        """The greatest at or below `number`, or None."""
        return self._below(number, bisect_right)

    def before(self, number: int) -> int | None:
        """The greatest below `number`, or None."""
        return self._below(number, bisect_left)

    def after(self, number: int) -> int | None:
        """The least above `number`, or None."""
        index = bisect_right(self._lasts, number)
        if index == len(self._blocks):
            return None
        block = self._blocks[index]
        return block[bisect_right(block, number)]

    def _below(self, number: int, side) -> int | None:
        index = bisect_left(self._lasts, number)
        if index < len(self._blocks):
            block = self._blocks[index]
            position = side(block, number) - 1
            if position >= 0:
                return block[position]
        return self._lasts[index - 1] if index else None
