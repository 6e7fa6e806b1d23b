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


def settle() -> None:
    """Leave what is alive now out of every later collection: the modules a
    process imported and the tables they made, alive as long as it is.
    Called once a process has loaded what it works with (the CLI, before
    its command; a pass of the bench); a worker forked from it inherits
    that. Otherwise every full collection walks them all again, with the
    rules and decoded instructions a process keeps: a tenth of a generated
    program's verification went to those walks (harness.bench_overhead).
    Once a process: a process that runs the CLI again and again (the tests)
    would otherwise freeze each time what its last commands left, garbage
    the collector had not reached yet included, for good."""
    global _settled
    if not _settled:
        _settled = True
        gc.freeze()
