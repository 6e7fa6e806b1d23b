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
from typing import NamedTuple

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


class AutoStride(NamedTuple):
    """`--every auto` (verify-elf's default for a process): the stride a
    process's verified run takes, chosen from the instructions its first
    run counted. Every stop up to `every_stop` instructions; past them, the
    smallest stride giving at most about `samples` samples. Two numbers, not
    one, because the two kinds of stop cost differently (CPU time, all 13
    unwinders; docs/robustness.md): a stop of a run that verifies every stop
    costs 0.37-1.84 us (each walk reuses the frames of the stop before), a
    sampled one 14-19 us (its walks start afresh), so a stride below some
    10-40 costs more than every stop. The defaults hold the verified run of
    any program to a minute or two of stops: 64 M stops at most (24-118 s),
    or about 4 M samples (56-77 s) however long the program; a billion
    instructions get a stride of 250."""

    every_stop: int = 64_000_000
    samples: int = 4_000_000

    def every(self, instructions: int) -> int:
        """The mean stride for a program of `instructions` (1: every stop)."""
        if instructions <= self.every_stop:
            return 1
        return -(-instructions // self.samples)  # the smallest giving no more than `samples`

    def describe(self, instructions: int) -> str:
        """Why `every(instructions)` is what it is, for the report."""
        counted = f"the first run counted {instructions:,} instructions"
        if instructions <= self.every_stop:
            return f"every stop: {counted}, no more than {self.every_stop:,}"
        return (f"samples of mean stride {self.every(instructions)}: {counted}, more than {self.every_stop:,}: "
                f"about {self.samples:,} samples")


AUTO = AutoStride()  # verify-elf's default
