"""The one list of unwinders and table formats the harness knows.

Each unwinder is a `Strategy` and each table format a `TableFormat`,
declared once (harness.unwind declares the harness's own, in the order the
reports show them). The command line's choices, the report's rows and
columns, the size table, the chain and a Linux process's per-module
tables all read this registry, so that adding an unwinder is its module
plus one `register` (docs/architecture.md, "How to add an unwinder").
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Callable, Iterator, NamedTuple, Sequence

from harness.program import Program
from harness.unwind.walk import Restores, Unwinder

UnwinderOf = Callable[[str], Unwinder]
"""The unwinder of another strategy over the same program (or process), built once."""


class Strategy(NamedTuple):
    """An unwinder as the harness runs and reports it."""

    name: str
    build: Callable[[Program, UnwinderOf], Unwinder]
    """The unwinder over one program (a Linux process's module), given the
    other strategies' over it: a chain is built from its methods'."""
    restores: Restores
    """What it is checked on besides pc and sp (harness.unwind.walk.Restores)."""
    module_tables: Callable[[Program], bool] | None = None
    """Whether a module ships (or its code gives) the tables this strategy
    reads: in a Linux process, one unwinder per such module, no_info
    elsewhere. None: one unwinder for the whole process, from the executable
    (frame pointers, the chain) or from every module (`process_build`)."""
    process_build: Callable[[Sequence[Program]], Unwinder] | None = None
    """The one unwinder of a process of these modules (a scan knows every module's calls)."""
    signal_frames: bool = True
    """Whether a Linux process's walk crosses signal frames around it
    (harness.unwind.sigframes), as a table-driven unwinder is given to."""
    chain_place: float | None = None
    """Where the chain tries it (lower first); None: not in the chain."""
    size_column: str | None = None
    """The size table's column of the tables it reads (its bytes a function in the README)."""
    compared: bool = False
    """Shown in the README's comparison with other ways of unwinding."""
    only_where: Callable[[Program], bool] | None = None
    """Verified over a compiled program only where this holds (elsewhere it
    would repeat another strategy: v2-gcc where no epilogue is described)."""


class Measured(NamedTuple):
    """A format's tables for one program: bytes per size-table column, and
    the counts the size row adds up (functions, addresses, refusals...)."""

    bytes: dict[str, int]
    counts: dict[str, int]


class TableFormat(NamedTuple):
    """A table format the harness writes."""

    name: str  # as `encode --format` and `dump --format` take it
    columns: tuple[str, ...]  # its columns in the size table
    measure: Callable[[Program, str], Measured]  # its tables for a program, in a v2 layout
    read: Callable[[bytes], object] | None = None  # a blob, read back (`dump`)
    listing: Callable[[object, int], str] | None = None  # the table read, listed from a text start


_STRATEGIES: dict[str, Strategy] = {}
_FORMATS: dict[str, TableFormat] = {}


def register(*entries: Strategy | TableFormat) -> None:
    for entry in entries:
        table = _STRATEGIES if isinstance(entry, Strategy) else _FORMATS
        if entry.name in table:
            raise ValueError(f"{entry.name} is registered already")
        table[entry.name] = entry


@contextlib.contextmanager
def registered(*entries: Strategy | TableFormat) -> Iterator[None]:
    """`entries` registered for the duration (a test's toy unwinder)."""
    register(*entries)
    try:
        yield
    finally:
        for entry in entries:
            (_STRATEGIES if isinstance(entry, Strategy) else _FORMATS).pop(entry.name, None)


class _Names(Sequence[str]):
    """The names of a table as it is when read: choices that see a
    registration made after they were handed out."""

    def __init__(self, names: Callable[[], tuple[str, ...]]):
        self._names = names

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def index(self, name, *bounds) -> int:
        return self._names().index(name, *bounds)

    def __repr__(self) -> str:
        return repr(self._names())


def strategy(name: str) -> Strategy:
    return _STRATEGIES[name]


def strategies() -> tuple[Strategy, ...]:
    return tuple(_STRATEGIES.values())


def table_format(name: str) -> TableFormat:
    return _FORMATS[name]


def table_formats() -> tuple[TableFormat, ...]:
    return tuple(_FORMATS.values())


UNWINDER_NAMES = _Names(lambda: tuple(_STRATEGIES))
"""Every unwinder, in the reports' order."""
CHAIN = _Names(lambda: tuple(s.name for s in sorted((s for s in _STRATEGIES.values() if s.chain_place is not None),
                                                     key=lambda s: s.chain_place)))
"""What a profiler ships, in the order it tries them."""
FORMAT_NAMES = _Names(lambda: tuple(_FORMATS))
SIZE_COLUMNS = _Names(lambda: (".debug_frame", "exidx+extab", *(c for f in _FORMATS.values() for c in f.columns)))
"""The size table's columns: what the compiler wrote, then each format's."""


def meaningful(program: Program, names: Sequence[str]) -> list[str]:
    """`names`, without the strategies whose `only_where` `program` fails."""
    return [name for name in names
            if _STRATEGIES[name].only_where is None or _STRATEGIES[name].only_where(program)]


def build_unwinders(program: Program, names: Sequence[str] = UNWINDER_NAMES) -> list[Unwinder]:
    """The unwinders `names` over `program`. A strategy built from others
    (the chain's methods, v2+epilogue's tables) gets the same unwinders as
    the ones of those names: their tables are built once, and the rules of
    their rows made once."""
    built: dict[str, Unwinder] = {}
    return [_built(program, built, name) for name in names]


def _built(program: Program, built: dict[str, Unwinder], name: str) -> Unwinder:
    """The unwinder `name` over `program`, built once into `built` (a
    partial, not a closure that refers to itself: nothing of a run may
    wait for the cycle collector)."""
    if name not in built:
        built[name] = _STRATEGIES[name].build(program, partial(_built, program, built))
    return built[name]
