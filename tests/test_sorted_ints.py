"""harness.sorted_ints: the neighbours of any number, as a sorted list
gives them, through additions that split its blocks."""

import random
from bisect import bisect_left, bisect_right, insort

from harness import sorted_ints
from harness.sorted_ints import SortedInts


def test_neighbours_match_a_sorted_list_through_additions(monkeypatch):
    monkeypatch.setattr(sorted_ints, "BLOCK", 8)  # small blocks: many splits
    chosen = random.Random(5)
    for _ in range(40):
        first = chosen.sample(range(2000), chosen.randint(0, 60))
        numbers, reference = SortedInts(first), sorted(first)
        for _ in range(300):
            number = chosen.randrange(-5, 2005)
            if chosen.random() < 0.5:
                numbers.add(number)
                if number not in reference:
                    insort(reference, number)
            below, at_or_below, above = (bisect_left(reference, number) - 1, bisect_right(reference, number) - 1,
                                         bisect_right(reference, number))
            assert numbers.before(number) == (reference[below] if below >= 0 else None)
            assert numbers.at_or_before(number) == (reference[at_or_below] if at_or_below >= 0 else None)
            assert numbers.after(number) == (reference[above] if above < len(reference) else None)
        assert [n for block in numbers._blocks for n in block] == reference
        assert max(len(block) for block in numbers._blocks) <= 16 if reference else numbers._blocks == []
