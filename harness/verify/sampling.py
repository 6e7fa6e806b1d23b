"""Which stops a run verifies, numbered as a run that stops before every
instruction numbers them (the instructions an IT block skips included).

With every = 1, all of them (a shard takes every shard_count-th). With
every = N > 1, a profiler's samples: seeded random strides of mean N
instructions, each in [1, 2N - 1], so that no loop of the program aliases
with the sampling; the i-th sample is shard i % shard_count's. The strides
are splitmix64's from the seed N, as csrc/trace.c draws them, so that the
compiled hook and the Python one verify the same stops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

MASK = (1 << 64) - 1


def strides(every: int) -> Iterator[int]:
    """trace.c's next_stride, in order."""
    state = every
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        yield 1 + z % (2 * every - 1)


def sampled_stops(every: int) -> Iterator[int]:
    """The stop numbers a sampled run (every > 1) stops at, ascending."""
    number = -1
    for stride in strides(every):
        number += stride
        yield number


def chooser(every: int, shard: tuple[int, int]) -> Callable[[int], bool]:
    """verified(number): is stop `number` one this shard verifies? Asked of
    every stop, in order."""
    index, count = shard
    if every == 1:
        return lambda number: number % count == index
    samples = sampled_stops(every)
    state = {"next": next(samples), "taken": 0}

    def verified(number: int) -> bool:
        if number != state["next"]:
            return False
        taken = state["taken"]
        state["next"], state["taken"] = next(samples), taken + 1
        return taken % count == index

    return verified
