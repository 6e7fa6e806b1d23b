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
when the excursion before it reaches into it. Then a local search moves
cuts where a byte model says so (`_improved`): lists stored for one group
alone are joined to their neighbours, and a function start gets an entry
of its own where the list from there on is shared.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple, Sequence

from harness.formats import uleb128
from harness.formats.chrome_v2.encoder import AddressUnwind, FunctionUnwind

ENTRY_BYTES = 4  # a function table entry: page offset and list index, 16 bits each
MAX_GROUP, MAX_PASSES = 32, 4  # bounds on the local search (see _improved)


class Segment(NamedTuple):
    """From `address` on, `run`, until the next segment."""

    address: int
    run: bytes
    in_body: bool  # the run that covers most of its function's bytes
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
        for unwind in function.address_unwinds:
            if found and found[-1].run == unwind.instructions:
                continue
            found.append(Segment(function.start + unwind.offset, unwind.instructions,
                                 unwind.instructions == body, function.name))
    return found


def group_at_excursions(covering: Sequence[FunctionUnwind]) -> tuple[FunctionUnwind, ...]:
    """Entries covering the same text as `covering`, every address finding
    the run it found there, starting at each excursion (see the module)."""
    found = segments(covering)
    cuts = [0] + [i for i in range(1, len(found)) if found[i - 1].in_body and not found[i].in_body]
    cuts = _improved(found, cuts)
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


class _StoredLists:
    """The byte model's state: how many groups use each distinct list, and
    what each list costs stored alone (memoized: the search prices the
    same lists over and over)."""

    def __init__(self, lists: Sequence[Pairs]) -> None:
        self.uses = Counter(lists)
        self.sizes: dict[Pairs, int] = {}

    def change(self, old: Sequence[Pairs], new: Sequence[Pairs]) -> int:
        """Replace the groups' lists `old` by `new`; the bytes that gains."""
        uses = self.uses
        delta = ENTRY_BYTES * (len(new) - len(old))
        for pairs in old:
            count = uses[pairs] - 1
            uses[pairs] = count
            if not count:
                delta -= self.size(pairs)
        for pairs in new:
            count = uses[pairs]
            if not count:
                delta += self.size(pairs)
            uses[pairs] = count + 1
        return delta

    def size(self, pairs: Pairs) -> int:
        known = self.sizes.get(pairs)
        if known is None:
            known = self.sizes[pairs] = _list_bytes(pairs)
        return known


def _improved(found: Sequence[Segment], cuts: Sequence[int]) -> list[int]:
    """`cuts` after a local search: add or remove one cut at a time while
    that makes the tables smaller by a byte model (4 bytes an entry, each
    distinct list's bytes once). Removing a cut pays where both lists were
    stored for one group alone (a function whose prologue shape no other
    has: its list grows by pairs, but loses an entry); adding one at a
    function start pays where the list from there on is shared. Groups
    stay within MAX_GROUP segments, which bounds the work."""
    is_cut = [False] * len(found)
    for cut in cuts:
        is_cut[cut] = True
    stored = _StoredLists([_pairs(found, low, high) for low, high in zip(cuts, [*cuts[1:], len(found)])])
    for _ in range(MAX_PASSES):
        improved = False
        for at in range(1, len(found)):
            low = at - 1
            while not is_cut[low]:
                low -= 1
            high = at + 1
            while high < len(found) and not is_cut[high]:
                high += 1
            if is_cut[at] and high - low > MAX_GROUP:
                continue
            # Each list made once per trial: the same serve the move and its undoing.
            old = [_pairs(found, low, at), _pairs(found, at, high)]
            new = [_pairs(found, low, high)]
            if not is_cut[at]:
                old, new = new, old
            if stored.change(old, new) < 0:
                is_cut[at] = not is_cut[at]
                improved = True
            else:
                stored.change(new, old)
        if not improved:
            break
    return [index for index, cut in enumerate(is_cut) if cut]


def epilogues_inside(function: FunctionUnwind) -> int:
    """Excursions from the body that come back to it within the function
    (epilogues with code after them): each costs a function table entry, or
    two pairs in a list of its own, whatever the grouping."""
    body = body_run(function)
    runs = [u.instructions for u in function.address_unwinds]
    first = runs.index(body)
    return sum(1 for before, after in zip(runs[first:], runs[first + 1:]) if after == body and before != body)
