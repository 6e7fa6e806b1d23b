"""Shared mappings of files (mmap2 with MAP_SHARED).

A file the program made (in /tmp, /dev/shm: harness.linux.files' memory)
has one set of bytes, as Linux's page cache gives it: while it is shared
mapped its bytes live in one page-aligned buffer (Contents.share) that
every shared mapping of it maps (Machine.map_shared, at any address and
protection) and its descriptors' reads and writes go through. The buffer
holds the file's whole pages; a mapping past them (Linux: SIGBUS on their
access), or the file growing or shrinking by a page while mapped, ends
the run as a fault naming it.

A host file's shared mapping (the sysroot's, the working directory's) is
a copy of its bytes taken when it was made, never written back: all Linux
would show while nothing else reaches the file. Where the program could
see the difference the run ends as a fault naming it: a second shared
mapping of the file, the file written through a descriptor while mapped,
or read while a mapping of it may be written (its descriptor open for
writing, as Linux asks of PROT_WRITE, then or after an mprotect)."""

from __future__ import annotations

from harness.emulation.placement import PAGE
from harness.linux.call_table import SystemCallFault
from harness.linux.files import Node


class SharedMaps:
    """The live shared mappings of files: (start, end, node, may be written, guest path)."""

    def __init__(self):
        self._maps: list[tuple[int, int, Node, bool, str]] = []

    def add(self, start: int, end: int, node: Node, writable: bool, path: str) -> None:
        for other_start, _, other, _, _ in self._maps:
            if other is node and node.data.shared is None:
                raise SystemCallFault(f"a second MAP_SHARED mapping of {path} (one at {other_start:#x}): mappings "
                                      "that share a host file's pages are not emulated")
        self._maps.append((start, end, node, writable, path))
        node.data.pins += 1

    def unmapped(self, low: int, high: int) -> None:
        """[low, high) unmapped: the mappings wholly inside it are gone (a
        part of one left keeps it, and its file, watched)."""
        kept = []
        for entry in self._maps:
            if low <= entry[0] and entry[1] <= high:
                entry[2].data.pins -= 1
            else:
                kept.append(entry)
        self._maps = kept

    def touches(self, low: int, high: int) -> str | None:
        """The path of a file shared mapped in [low, high), if any."""
        return next((path for start, end, _, _, path in self._maps if start < high and low < end), None)

    def check(self, node: Node, writing: bool) -> None:
        """A read (`writing` False) or write of `node` through a descriptor."""
        for start, _, other, writable, path in self._maps:
            if other is node and node.data.shared is None and (writing or writable):
                raise SystemCallFault(f"{'write to' if writing else 'read of'} {path} through a descriptor while "
                                      f"it is mapped MAP_SHARED at {start:#x}: the host file and its mapping are "
                                      "not kept in step")


def shared_pages(opened, offset: int, size: int):
    """The buffer a shared mapping of `size` bytes from `offset` of a file
    the program made maps (Contents.share): one with the file and its other
    shared mappings."""
    contents = opened.node.data
    if offset + size > -(-len(contents) // PAGE) * PAGE:
        raise SystemCallFault(f"a MAP_SHARED mapping of {opened.path} past its end ({len(contents)} bytes, "
                              f"mapped to {offset + size:#x}): its pages' SIGBUS is not emulated")
    return contents.share()
