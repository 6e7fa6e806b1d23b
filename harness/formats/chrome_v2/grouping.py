"""Where function table entries start, for tables that hold epilogue rows.

A lookup takes the last entry at or before the pc, then the last pair of
that entry's list at or before it; nothing ties an entry to a function's
first instruction. Entries at function starts (Chrome's way) put each
epilogue row into its function's list at an offset only that function has,
so the list, and with it the prologue pairs that every function of the
same shape shares under `drop`, is stored once per function.

Here an entry starts where the code leaves its function's body state (an
excursion: an epilogue, then for a last epilogue the padding and the next
function's prologue) and runs through the body that follows. Its list
holds small offsets only, (0, epilogue) ... (n, next body), and is shared
by every excursion of the same shape; a function costs no entry of its own
when the excursion before it reaches into it. Where such a list would be
stored for one excursion alone, a second entry at the function start may
be cheaper (the function's own list being `drop`'s, shared): chosen by
`_worth_cutting`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import NamedTuple, Sequence

from harness.formats import uleb128
from harness.formats.chrome_v2.encoder import AddressUnwind, FunctionUnwind

ENTRY_BYTES = 4  # a function table entry: page offset and list index, 16 bits each


class Segment(NamedTuple):
    """From `address` on, `run`, until the next segment."""

    address: int
    run: bytes
    in_body: bool  # the run that covers most of its function's bytes
    starts_function: bool
    owner: str  # the function (or filler) it lies in


Pairs = tuple[tuple[int, bytes], ...]  # (byte offset from the first segment, run)


def body_run(function: FunctionUnwind) -> bytes:
    """The run covering the most bytes of the function (ties: the larger run)."""
    unwinds = function.address_unwinds
    ends = [u.offset for u in unwinds[1:]] + [function.end - function.start]
    covered: dict[bytes, int] = {}
    for unwind, end in zip(unwinds, ends):
        covered[unwind.instructions] = covered.get(unwind.instructions, 0) + end - unwind.offset
    return max(covered, key=lambda run: (covered[run], run))


def segments(covering: Sequence[FunctionUnwind]) -> list[Segment]:
    """The text as runs, one segment per change of run; fillers (names in
    angle brackets, see encoder.cover_text) have no body."""
    found: list[Segment] = []
    for function in covering:
        body = None if function.name.startswith("<") else body_run(function)
        for index, unwind in enumerate(function.address_unwinds):
            starts = index == 0 and body is not None
            if found and found[-1].run == unwind.instructions:
                if starts:
                    found[-1] = found[-1]._replace(starts_function=True)
                continue
            found.append(Segment(function.start + unwind.offset, unwind.instructions,
                                 unwind.instructions == body, starts, function.name))
    return found


def group_at_excursions(covering: Sequence[FunctionUnwind]) -> tuple[FunctionUnwind, ...]:
    """Entries covering the same text as `covering`, every address finding
    the run it found there, starting at each excursion (see the module)."""
    found = segments(covering)
    cuts = [0] + [i for i in range(1, len(found)) if found[i - 1].in_body and not found[i].in_body]
    cuts = sorted(set(cuts) | _worth_cutting(found, cuts))
    pieces = []
    for low, high in zip(cuts, [*cuts[1:], len(found)]):
        start = found[low].address
        end = found[high].address if high < len(found) else covering[-1].end
        pieces.append(FunctionUnwind(start, max(start, end), found[low].owner, tuple(
            AddressUnwind(offset, run) for offset, run in _pairs(found, low, high))))
    return tuple(pieces)


def _pairs(found: Sequence[Segment], low: int, high: int) -> Pairs:
    base = found[low].address
    return tuple((segment.address - base, segment.run) for segment in found[low:high])


def _list_bytes(pairs: Pairs) -> int:
    """A list's size if stored alone (run indices counted as one byte: the
    frequent runs get the small indices)."""
    return sum(uleb128.size(offset >> 1) + 1 for offset, _ in pairs)


def _worth_cutting(found: Sequence[Segment], cuts: Sequence[int]) -> set[int]:
    """Function starts inside an excursion's entry where a second entry
    saves bytes: the excursion's list is stored for it alone, the list from
    the function start on is shared (or becomes shared by the cuts made
    together here), and the head list before it already exists. Greedy, by
    the list from the function start, so a newly stored list pays once."""
    bounds = list(zip(cuts, [*cuts[1:], len(found)]))
    whole = [_pairs(found, low, high) for low, high in bounds]
    uses = Counter(whole)
    by_tail: dict[Pairs, list[tuple[Pairs, Pairs, int]]] = defaultdict(list)
    for (low, high), pairs in zip(bounds, whole):
        inner = next((i for i in range(low + 1, high) if found[i].starts_function), None)
        if inner is not None and uses[pairs] == 1:
            by_tail[_pairs(found, inner, high)].append((pairs, _pairs(found, low, inner), inner))
    chosen: set[int] = set()
    for tail, options in sorted(by_tail.items()):
        gains = [(pairs, head, inner) for pairs, head, inner in options
                 if _list_bytes(pairs) > ENTRY_BYTES + (0 if uses[head] else _list_bytes(head))]
        saving = sum(_list_bytes(pairs) - ENTRY_BYTES - (0 if uses[head] else _list_bytes(head))
                     for pairs, head, _ in gains)
        if saving > (0 if uses[tail] else _list_bytes(tail)):
            for pairs, head, inner in gains:
                uses.update((head, tail))
                uses[pairs] -= 1
                chosen.add(inner)
    return chosen
