"""Where the harness puts what it adds to a program's address space: the
stack and the page the entry returns to (the sentinel). Never at a fixed
address: they go where the program's segments are not (ARCHITECTURE.md,
"Where the harness puts things"), at the usual places when those are free
so that reports of ordinary programs do not move.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from harness.errors import InputError

PAGE = 0x1000
ADDRESS_SPACE = 1 << 32
STACK_SIZE = 16 << 20  # room for several frames over 1 MiB
# Pages the harness never takes: the null page, and the top 64 KiB where a
# Linux kernel maps its helper page (0xffff0000).
RESERVED = ((0, PAGE), (0xFFFF0000, ADDRESS_SPACE))


class Placement(NamedTuple):
    sentinel: int  # a page of its own; the entry is called with lr = sentinel | 1
    stack_top: int  # the initial sp; the stack is [stack_top - stack_size, stack_top)
    stack_size: int = STACK_SIZE

    @property
    def stack_bottom(self) -> int:
        return self.stack_top - self.stack_size


DEFAULT = Placement(sentinel=0x0000F000, stack_top=0x7F000000)


class NoRoom(InputError):
    """The program's segments leave no room for the harness's stack or sentinel."""


def pages_of(segments: Iterable[tuple[int, bytes]]) -> list[tuple[int, int]]:
    """Page-aligned ranges covering every segment, merged where they touch;
    InputError for a segment past the 32-bit address space."""
    spans = []
    for address, data in segments:
        if address < 0 or address + len(data) > ADDRESS_SPACE:
            raise InputError(f"a segment at {address:#x} of {len(data):#x} bytes runs past the 32-bit address space")
        spans.append((address & ~(PAGE - 1), (address + len(data) + PAGE - 1) & ~(PAGE - 1)))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _free(taken: list[tuple[int, int]], start: int, end: int) -> bool:
    return all(end <= low or high <= start for low, high in taken)


def _gaps(taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The free ranges of the address space between the taken ones, in order."""
    gaps, position = [], 0
    for low, high in sorted(taken):
        if low > position:
            gaps.append((position, low))
        position = max(position, high)
    if position < ADDRESS_SPACE:
        gaps.append((position, ADDRESS_SPACE))
    return gaps


def place(segments: Iterable[tuple[int, bytes]], stack_size: int = STACK_SIZE) -> Placement:
    """The stack and the sentinel for a program of these segments: the
    defaults where they are free, else the highest free range that holds
    the stack with an unmapped page on either side (an overflow faults
    rather than writing into the program), and the lowest free page for the
    sentinel."""
    taken = pages_of(segments) + list(RESERVED)
    top = DEFAULT.stack_top
    if not _free(taken, top - stack_size - PAGE, top + PAGE):
        fitting = [(low, high) for low, high in _gaps(taken) if high - low >= stack_size + 2 * PAGE]
        if not fitting:
            raise NoRoom(f"the program's segments leave no free {stack_size >> 20} MiB for the stack")
        top = fitting[-1][1] - PAGE
    taken.append((top - stack_size - PAGE, top + PAGE))
    sentinel = DEFAULT.sentinel
    if not _free(taken, sentinel, sentinel + PAGE):
        gaps = _gaps(taken)
        if not gaps:
            raise NoRoom("the program's segments leave no free page for the return sentinel")
        sentinel = gaps[0][0]
    return Placement(sentinel, top, stack_size)
