"""Shared mappings of files (mmap2 with MAP_SHARED).

A file the program made (in /tmp, /dev/shm: harness.linux.files' memory)
has one set of bytes, as Linux's page cache gives it: while it is shared
mapped its bytes live in page-aligned buffers (harness.linux.page_cache)
that every shared mapping of it maps (Machine.map_shared, at any address
and protection) and its descriptors' reads, writes and truncations go
through; the file may grow while mapped. A mapping past the file's pages
(Linux: SIGBUS on their access), or the file truncated short of them
while mapped, ends the run as a fault naming it.

A host file's shared mapping (the sysroot's, the working directory's) is
a copy of its bytes taken when it was made, never written back: all Linux
would show while nothing else reaches the file. Where the program could
see the difference the run ends as a fault naming it: a second shared
mapping of the file, the file written through a descriptor while mapped,
or read while a mapping of it may be written (its descriptor open for
writing, as Linux asks of PROT_WRITE, then or after an mprotect)."""

from __future__ import annotations

from typing import NamedTuple

from harness.linux.call_table import SystemCallFault
from harness.linux.files import Node
from harness.linux.memory import page_up


class SharedMap(NamedTuple):
    start: int
    end: int
    node: Node
    writable: bool  # its descriptor open for writing
    path: str  # as the guest named the file


class SharedMaps:
    """The live shared mappings of files."""

    def __init__(self):
        self._maps: list[SharedMap] = []

    def add(self, start: int, end: int, node: Node, writable: bool, path: str) -> None:
        for other in self._maps:
            if other.node is node and node.data.shared is None:
                raise SystemCallFault(f"a second MAP_SHARED mapping of {path} (one at {other.start:#x}): mappings "
                                      "that share a host file's pages are not emulated")
        self._maps.append(SharedMap(start, end, node, writable, path))
        node.data.pins += 1

    def unmapped(self, low: int, high: int) -> None:
        """[low, high) unmapped: the mappings wholly inside it are gone (a
        part of one left keeps it, and its file, watched)."""
        kept = []
        for entry in self._maps:
            if low <= entry.start and entry.end <= high:
                entry.node.data.pins -= 1
            else:
                kept.append(entry)
        self._maps = kept

    def touches(self, low: int, high: int) -> tuple[Node, str] | None:
        """The file (node, guest path) shared mapped in [low, high), if any."""
        return next(((m.node, m.path) for m in self._maps if m.start < high and low < m.end), None)

    def writable_of(self, node: Node) -> bool:
        """Is `node` shared mapped through a descriptor open for writing?"""
        return any(m.node is node and m.writable for m in self._maps)

    def read_only(self, low: int, high: int) -> bool:
        """Is a shared mapping in [low, high) of a file not open for writing?"""
        return any(m.start < high and low < m.end and not m.writable for m in self._maps)

    def check(self, node: Node, writing: bool) -> None:
        """A read (`writing` False) or write of `node` through a descriptor."""
        for m in self._maps:
            if m.node is node and node.data.shared is None and (writing or m.writable):
                raise SystemCallFault(f"{'write to' if writing else 'read of'} {m.path} through a descriptor while "
                                      f"it is mapped MAP_SHARED at {m.start:#x}: the host file and its mapping are "
                                      "not kept in step")


def shared_pages(node: Node, path: str, offset: int, size: int) -> list:
    """The pieces of buffers a shared mapping of `size` bytes from `offset`
    of a file the program made maps (PageCache.pieces): one memory with the
    file and its other shared mappings."""
    contents = node.data
    if offset + size > page_up(len(contents)):
        raise SystemCallFault(f"a MAP_SHARED mapping of {path} past its end ({len(contents)} bytes, "
                              f"mapped to {offset + size:#x}): its pages' SIGBUS is not emulated")
    return list(contents.share().pieces(offset, size))
