"""The fewest bytes any v2 table can take for a given run map: a lower
bound, so that "no encoding of these rows fits in N bytes" is measured,
not believed (issue 17's size bound is checked against it in `bench`).

The map is what the tables must say: at every address of every function,
its run (a run's bytes stand for one frame state, so two runs never mean
the same). Whatever the grouping, a v2 table for it holds:
- the header, and one page-table word per 128 KiB page up to the last
  function's end (in the seed layout, the continuation bits too);
- an instruction-table byte at least per distinct run (each needs an index);
- function table entries, 4 bytes each, and offset lists. A lookup takes the
  last entry at or before the pc, then the last pair of its list at or
  before it, so every *boundary* (an address where the run changes) is an
  entry's start or a pair in the list of the entry it lies in. A pair is a
  ULEB128 offset from the entry's start and a ULEB128 index: at least
  1 + size(distance from the entry's first boundary) bytes. Stored lists are
  shared whole or as suffixes, so a pair's bytes serve only entries whose
  boundaries up to it lie at the same distances with the same runs (lists
  read from inside another's ULEB128 values are not considered): at most the
  occurrences of that boundary pattern in the text (`pattern_occurrences`).

So the table is at least, over every cut of the boundaries into entries,
4 bytes per entry plus, per pair, a charge, where the charges of a pattern's
occurrences add up to its bytes at most (`_least_grouping`, a shortest path;
the charges start even and `_shifted` moves them towards the occurrences the
cheapest cut uses, which raises the bound). Counting more occurrences than
there are (the cap below, collisions of the runs' hashes) only lowers it.

Fillers (gaps between functions, the edges; encoder.cover_text) hold no
function: an encoding may give them any run. A gap is dropped; where the
runs on its sides differ one boundary stays, anywhere inside it, so a step
to or from it matches any distance.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple, Sequence

from harness.formats import uleb128
from harness.formats.chrome_v2.encoder import FunctionUnwind, cover_text
from harness.formats.chrome_v2.grouping import ENTRY_BYTES, segments
from harness.formats.chrome_v2.layout import Layout, header_fields
from harness.formats.chrome_v2.tables import PAGE_SHIFT

PATTERN_CAP = 64  # boundaries per pattern counted exactly; past it a pair costs 2 bytes over the cap's count
SHIFTS, SHIFT_WEIGHT = 16, 0.3  # rounds of moving charges, and how far each moves them
LOOSE = -1  # the distance of a step across a gap: unknown


class Boundary(NamedTuple):
    """From `address` on, run `run` (an index); `earliest` is where a
    boundary moved into a gap may lie at the soonest."""

    address: int
    earliest: int
    run: int


def least_bytes(functions: Sequence[FunctionUnwind], text_base: int, layout: Layout = "chrome") -> int:
    """A lower bound on the bytes of any v2 blob in `layout` giving every
    address of `functions` (the encoder's, e.g. Encoded.functions) its run."""
    boundaries = function_boundaries(cover_text(functions, text_base))
    pages = ((max(f.end for f in functions) - 1 - text_base) >> PAGE_SHIFT) + 1
    fixed = 4 * len(header_fields(layout)) + 4 * pages + ((pages + 7) // 8 if layout == "seed" else 0)
    if not boundaries:
        return fixed
    runs = len({b.run for b in boundaries})
    return fixed + runs + math.ceil(least_grouping_bytes(boundaries) - 1e-6)


def least_grouping_bytes(boundaries: Sequence[Boundary]) -> float:
    """The function table and offset lists at least: the best of SHIFTS
    rounds of _least_grouping, each under charges moved towards the entries
    the round before chose (any charges that respect _shifted's budgets
    give a bound; these rounds look for a high one)."""
    occurrences = pattern_occurrences(boundaries)
    charges = [[_pair_bytes(boundaries, start, length) / o.count for length, o in enumerate(found, 1)]
               for start, found in enumerate(occurrences)]
    classes: dict[int, list[tuple[int, int]]] = {}
    for start, found in enumerate(occurrences):
        for level, occurrence in enumerate(found):
            if occurrence.key is not None:
                classes.setdefault(occurrence.key, []).append((start, level))
    best = 0.0
    for _ in range(SHIFTS):
        cost, firsts = _least_grouping(boundaries, occurrences, charges)
        best = max(best, cost)
        charges = _shifted(charges, classes, firsts, len(boundaries))
    return best


def _shifted(charges: Charges, classes: dict[int, list[tuple[int, int]]], firsts: Sequence[int],
             total: int) -> Charges:
    """Charges moved part way (SHIFT_WEIGHT) towards the occurrences the
    chosen entries use, within each exact pattern's budget: the sum over
    its occurrences never grows, so a pair shared by every occurrence of
    its pattern is still charged its bytes at most (see the module)."""
    used = set()
    for first, end in zip(firsts, [*firsts[1:], total]):
        used.update((first, level) for level in range(min(end - first, len(charges[first]))))
    moved = [list(row) for row in charges]
    for members in classes.values():
        chosen = [m for m in members if m in used]
        if not chosen or len(chosen) == len(members):
            continue
        budget = sum(charges[start][level] for start, level in members)
        for start, level in members:
            target = budget / len(chosen) if (start, level) in used else 0.0
            moved[start][level] = (1 - SHIFT_WEIGHT) * charges[start][level] + SHIFT_WEIGHT * target
    return moved


def function_boundaries(covering: Sequence[FunctionUnwind]) -> list[Boundary]:
    """Where the run changes in the functions, gaps dropped (see the module)."""
    ids: dict[bytes, int] = {}
    found: list[Boundary] = []
    gap_start = None
    for segment in segments(covering):
        if segment.owner.startswith("<"):
            gap_start = segment.address if gap_start is None else gap_start
            continue
        run = ids.setdefault(segment.run, len(ids))
        if found and found[-1].run == run:
            gap_start = None
            continue
        earliest = segment.address if gap_start is None else gap_start
        found.append(Boundary(segment.address, earliest, run))
        gap_start = None
    return found


def _step(boundaries: Sequence[Boundary], at: int) -> int:
    """The distance from boundary at-1 to boundary at, or LOOSE when
    either may lie anywhere in a gap."""
    here, before = boundaries[at], boundaries[at - 1]
    if here.earliest != here.address or before.earliest != before.address:
        return LOOSE
    return here.address - before.address


class Occurrence(NamedTuple):
    """A pattern of boundaries from one start: `key` names its exact pattern
    (None where it has a loose step), `count` how often it may occur."""

    key: int | None
    count: int


def pattern_occurrences(boundaries: Sequence[Boundary]) -> list[list[Occurrence]]:
    """Per boundary, the patterns of 1, 2, ... boundaries from it and how
    often each occurs in the text: the same runs at the same distances,
    where a loose step (either side's) matches any distance. The list ends
    at the first count of 1 (every longer pattern is as rare) or at
    PATTERN_CAP. Counted level by level: a pattern that is unique at one
    length has no company at the next. Exact patterns get interned keys
    (one per pattern, no collisions: charges move between a key's
    occurrences, see _shifted)."""
    total = len(boundaries)
    keys: dict[tuple[int, int, int], int] = {}
    # start -> (exact key, runs key, the steps so far)
    patterns = {start: (keys.setdefault((-1, 0, b.run), len(keys)), b.run, []) for start, b in enumerate(boundaries)}
    found: list[list[Occurrence]] = [[] for _ in boundaries]
    level = 0
    while patterns:
        counts = _level_counts(patterns)
        going_on = {}
        for start, (exact, runs, steps) in patterns.items():
            loose = LOOSE in steps
            found[start].append(Occurrence(None if loose else exact, counts[start]))
            at = start + level + 1
            if counts[start] > 1 and level + 1 < PATTERN_CAP and at < total:
                step, run = _step(boundaries, at), boundaries[at].run
                steps.append(step)
                going_on[start] = (keys.setdefault((exact, step, run), len(keys)), hash((runs, run)), steps)
        patterns = going_on
        level += 1
    return found


def _level_counts(patterns: dict[int, tuple[int, int, list[int]]]) -> dict[int, int]:
    """Occurrences of each pattern of one length among `patterns`: exact
    ones by key, and each pattern with a loose step compared step by step
    with every pattern of the same runs (loose steps are rare: gaps)."""
    exact: Counter[int] = Counter(key for key, _, steps in patterns.values() if LOOSE not in steps)
    same_runs: dict[int, list[int]] = {}
    for start, (_, runs, _) in patterns.items():
        same_runs.setdefault(runs, []).append(start)
    counts = {start: exact[key] for start, (key, _, steps) in patterns.items() if LOOSE not in steps}
    for group in same_runs.values():
        for loose in (s for s in group if LOOSE in patterns[s][2]):
            mine = patterns[loose][2]
            matching = [s for s in group if all(
                a == b or LOOSE in (a, b) for a, b in zip(mine, patterns[s][2]))]
            counts[loose] = len(matching)
            for other in matching:
                if other != loose and LOOSE not in patterns[other][2]:
                    counts[other] += 1
    return counts


Charges = list[list[float]]  # per start, per pattern length: the bytes its last pair is charged


def _pair_bytes(boundaries: Sequence[Boundary], start: int, length: int) -> int:
    """The least a list pair for boundary start+length-1 takes in an entry
    whose first boundary is `start`: a one-byte index and the offset."""
    distance = max(0, boundaries[start + length - 1].earliest - boundaries[start].address)
    return 1 + uleb128.size(distance >> 1)


def _least_grouping(boundaries: Sequence[Boundary], occurrences: Sequence[Sequence[Occurrence]],
                    charges: Charges) -> tuple[float, list[int]]:
    """The cheapest cut of the boundaries into entries: per entry 4 bytes
    plus its pairs' charges (a shortest path; best[q] is the least cost of
    boundaries [0, q)). Past its counted patterns an entry goes on at 2
    bytes a pair over the last count: such entries are open tails, the
    cheapest kept per rate. Returns the cost and the entries' first
    boundaries."""
    total = len(boundaries)
    best = [float("inf")] * (total + 1)
    best[0] = 0.0
    came_from = [0] * (total + 1)
    tails: dict[float, tuple[float, int]] = {}  # rate -> (cost through boundary start-1, first boundary)
    waiting: dict[int, list[tuple[float, float, int]]] = {}  # tails that open at a later boundary
    for start in range(total + 1):
        for rate, cost, first in waiting.pop(start, ()):
            if cost < tails.get(rate, (float("inf"), 0))[0]:
                tails[rate] = (cost, first)
        for cost, first in tails.values():
            if cost < best[start]:
                best[start], came_from[start] = cost, first
        if start == total:
            break
        cost = best[start] + ENTRY_BYTES
        for length, charge in enumerate(charges[start], 1):
            cost += charge
            if cost < best[start + length]:
                best[start + length], came_from[start + length] = cost, start
        if start + length < total:
            rate = 2 / occurrences[start][-1].count
            waiting.setdefault(start + length + 1, []).append((rate, cost + rate, start))
        tails = {rate: (cost + rate, first) for rate, (cost, first) in tails.items()}
    firsts, at = [], total
    while at:
        at = came_from[at]
        firsts.append(at)
    return best[total], firsts[::-1]
