"""Python's cycle collector, paused where a step makes many objects and no
reference cycle: each few hundred new objects set off a collection, and
every so often one that walks the whole heap, the long-lived tables with
it, for nothing to free; and kept off what a process loaded before its
work began."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the while (as it was after)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_settled = False

# New container objects between young collections (Python's default: 700).
# A generated program's verification keeps some 3,500 (its summary's groups
# and counts, the book's new rules), which die with the summary: at 700 the
# collection that follows the pause walks them all (0.4 ms a program), and
# each tenth of those walks them again one generation up. At 10,000 most are
# gone when a collection comes: the collector's time over a bench pass is
# 0.7-0.9 ms a program, against 1.4 at 700 (3,000: 0.8-0.9; 50,000: 0.4). Nothing of
# the verification is in a reference cycle (tests/test_kernel.py), so
# collecting less often keeps no more memory.
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Leave what is alive now out of every later collection: the modules a
    process imported and the tables they made, alive as long as it is.
    Called once a process has loaded what it works with (the CLI, before
    its command; a pass of the bench); a worker forked from it inherits
    that. Otherwise every full collection walks them all again, with the
    rules and decoded instructions a process keeps: a tenth of a generated
    program's verification went to those walks (harness.bench.overhead).
    Once a process: a process that runs the CLI again and again (the tests)
    would otherwise freeze each time what its last commands left, garbage
    the collector had not reached yet included, for good. The young
    generation's threshold is raised to YOUNG_THRESHOLD then too."""
    global _settled
    if not _settled:
        _settled = True
        gc.freeze()
        gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
