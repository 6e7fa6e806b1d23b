"""Python's cycle collector, paused where a step makes many objects and no
reference cycle: each few hundred new objects set off a collection, and
every so often one that walks the whole heap, the long-lived tables with
it, for nothing to free."""

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
