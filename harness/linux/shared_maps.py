"""Shared mappings of files (mmap2 with MAP_SHARED), which the harness does
not keep in step with their files: a mapping holds a copy of the file's
bytes taken when it was made (harness.linux.calls_memory). That copy is all
Linux would show while nothing else reaches the file, the program's stores
to its one mapping read back through it. Where the program could see the
difference, the run ends as a fault naming it: a second shared mapping of
the file, the file written through a descriptor while mapped, or read
while a mapping of it may be written (its descriptor open for writing, as
Linux asks of PROT_WRITE, then or after an mprotect)."""

from __future__ import annotations

from harness.linux.call_table import SystemCallFault
from harness.linux.files import Node


class SharedMaps:
    """The live shared mappings of files: (start, end, node, may be written, guest path)."""

    def __init__(self):
        self._maps: list[tuple[int, int, Node, bool, str]] = []

    def add(self, start: int, end: int, node: Node, writable: bool, path: str) -> None:
        for other_start, _, other, _, _ in self._maps:
            if other is node:
                raise SystemCallFault(f"a second MAP_SHARED mapping of {path} (one at {other_start:#x}): mappings "
                                      "that share a file's pages are not emulated")
        self._maps.append((start, end, node, writable, path))

    def unmapped(self, low: int, high: int) -> None:
        """[low, high) unmapped: the mappings wholly inside it are gone (a
        part of one left keeps it, and its file, watched)."""
        self._maps = [entry for entry in self._maps if not (low <= entry[0] and entry[1] <= high)]

    def check(self, node: Node, writing: bool) -> None:
        """A read (`writing` False) or write of `node` through a descriptor."""
        for start, _, other, writable, path in self._maps:
            if other is node and (writing or writable):
                raise SystemCallFault(f"{'write to' if writing else 'read of'} {path} through a descriptor while "
                                      f"it is mapped MAP_SHARED at {start:#x}: the file and its mapping are not "
                                      "kept in step")
