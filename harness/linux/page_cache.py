"""A file's bytes while MAP_SHARED mapped (harness.linux.shared_maps), as
Linux's page cache holds them: page-aligned buffers one after another from
the file's start, which its shared mappings map (Machine.map_shared) and
its reads and writes go through. A buffer stays where it is while the file
grows: a larger file gets one more after the others."""

from __future__ import annotations

import mmap
from typing import Iterator

from harness.linux.memory import PAGE, page_up


class PageCache:
    """The buffers (file offset, buffer) holding [0, capacity) of a file."""

    def __init__(self, data: bytes):
        self.segments: list[tuple[int, mmap.mmap]] = []
        self.capacity = 0
        self.grow(max(PAGE, page_up(len(data))))
        self.write(0, data)

    def grow(self, capacity: int) -> None:
        """Hold [0, capacity) (whole pages), the new pages zeros."""
        if capacity > self.capacity:
            self.segments.append((self.capacity, mmap.mmap(-1, capacity - self.capacity)))
            self.capacity = capacity

    def pieces(self, offset: int, size: int) -> Iterator[tuple[int, mmap.mmap, int, int]]:
        """[offset, offset + size) as (file offset, buffer, offset in it, length), in order."""
        for start, buffer in self.segments:
            low, high = max(offset, start), min(offset + size, start + len(buffer))
            if low < high:
                yield low, buffer, low - start, high - low

    def read(self, offset: int, count: int) -> bytes:
        return b"".join(buffer[at : at + length] for _, buffer, at, length in self.pieces(offset, count))

    def write(self, offset: int, data: bytes) -> None:
        for low, buffer, at, length in self.pieces(offset, len(data)):
            buffer[at : at + length] = data[low - offset : low - offset + length]
