"""A run's failing walks counted by where the stop is and why the walk
failed, and the kind each is counted under.

A Tally holds them by ids, (where id, cause id, walks) entries over lists of
wheres and causes, as the kernel counts them (csrc/trace_stop.c). Every sum
a report makes of a run (its counts, its digest, its culprits) adds entries
up under keys made of parts of the where and the cause: `Tally.sums` makes
each part once per where and per cause, and adds up the entries (`sum_by`);
`Tally.grouped` numbers the keys too, so that a digest reads each entry's
group (`group_by`).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from functools import cached_property
from typing import NamedTuple, Optional

from harness.classify import MODULES, OWN, Where

# A walk that refused (no_info) at a frame in a module other than the
# program's own, every frame before it right: an honest stop, counted
# apart from failures under the module's label (harness.classify.MODULES).
STOPPED_PREFIX = "stopped:"
STOPPED_KINDS = tuple(STOPPED_PREFIX + module for module in MODULES if module != OWN)

Cause = tuple  # a harness.verify.failures.FailureCause (failures holds a Tally, so it is not imported here)
Entry = tuple[int, int, int]  # (where id, cause id, failing walks)
Part = Optional[tuple]  # a part of a key; None leaves the entry out


def counted_kind(cause: Cause) -> str:
    """The kind a failing walk is counted under: a no_info refusal in a
    module that is not the program's own is a stop there, not a failure."""
    if cause.kind == "no_info":
        module = next((trait for trait in cause.culprit_traits if trait in MODULES), OWN)
        if module != OWN:
            return STOPPED_PREFIX + module
    return cause.kind


def is_stop(cause: Cause) -> bool:
    """Did the walk stop honestly in a library, rather than fail?"""
    return counted_kind(cause).startswith(STOPPED_PREFIX)


class KeyParts(NamedTuple):
    """A key made of a tally entry's parts, heads[cause] + middles[where] +
    tails[cause] by the tally's ids (an entry whose head or middle is None
    has none), and the same key of a where and a cause, by value (`of`)."""

    heads: list
    middles: list
    tails: list
    of: Callable[[Where, Cause], Hashable | None]


def sum_by(target: dict, entries: Sequence[Entry], heads: Sequence[Part], middles: Sequence[Part],
           tails: Sequence[tuple]) -> dict:
    """Add each entry's walks to target[heads[cause] + middles[where] +
    tails[cause]], but for entries whose head or middle is None."""
    for where, cause, walks in entries:
        head, middle = heads[cause], middles[where]
        if head is not None and middle is not None:
            key = head + middle + tails[cause]
            target[key] = target.get(key, 0) + walks
    return target


class Grouping(NamedTuple):
    """A tally's entries grouped by the key their parts make (KeyParts):
    the distinct keys in the order of their first entry, the walks of each,
    and each entry's group (-1: it has no key) as int64s."""

    keys: list
    walks: list[int]
    of_entry: bytes


def group_by(entries: Sequence[Entry], heads: Sequence[Part], middles: Sequence[Part],
             tails: Sequence[tuple]) -> Grouping:
    """The Grouping of `entries` by heads[cause] + middles[where] +
    tails[cause] (none where the head or middle is None): a digest groups
    every entry of its run, numbered once for its counts and its logged pcs
    both."""
    numbers: dict[tuple, int] = {}
    keys: list[tuple] = []
    walks: list[int] = []
    of_entry = array("q")
    for where, cause, count in entries:
        head, middle = heads[cause], middles[where]
        if head is None or middle is None:
            of_entry.append(-1)
            continue
        key = head + middle + tails[cause]
        group = numbers.get(key)
        if group is None:
            group = numbers[key] = len(keys)
            keys.append(key)
            walks.append(0)
        walks[group] += count
        of_entry.append(group)
    return Grouping(keys, walks, of_entry.tobytes())


class Tally:
    """(where, cause) -> failing walks, by ids: `wheres` and `causes` may
    hold equal values under several ids (sums add them up alike). The parts
    of keys a report makes of each cause are made once (`kinds`, `unwinders`,
    `failing`, `kind_parts`)."""

    def __init__(self, wheres: list[Where] | None = None, causes: list[Cause] | None = None,
                 entries: list[Entry] | None = None):
        self.wheres = [] if wheres is None else wheres
        self.causes = [] if causes is None else causes
        self.entries = [] if entries is None else entries

    @classmethod
    def of(cls, counted: Counter) -> Tally:
        """The tally of (where, cause) -> walks."""
        tally = cls()
        tally.add(counted)
        return tally

    def add(self, counted: Counter) -> None:
        """Add (where, cause) -> walks, each under ids of its own."""
        for (where, cause), walks in counted.items():
            self.entries.append((len(self.wheres), len(self.causes), walks))
            self.wheres.append(where)
            self.causes.append(cause)
        self.__dict__.pop("_parts", None)  # made from the causes before

    @cached_property
    def _parts(self) -> tuple[list[str], list[tuple], list[Part], list[tuple]]:
        """`kinds`, `unwinders`, `failing` and `kind_parts`, each distinct
        one-part tuple made once (a run has hundreds of causes, most of few
        unwinders and kinds)."""
        kinds = [counted_kind(cause) for cause in self.causes]
        made: dict[str, tuple] = {}  # an unwinder's name and a kind as one-part tuples
        unwinders = [made.get(cause.unwinder) or made.setdefault(cause.unwinder, (cause.unwinder,))
                     for cause in self.causes]
        failing = [None if kind.startswith(STOPPED_PREFIX) else unwinder for kind, unwinder in zip(kinds, unwinders)]
        return kinds, unwinders, failing, [made.get(kind) or made.setdefault(kind, (kind,)) for kind in kinds]

    @property
    def kinds(self) -> list[str]:
        """The kind each cause is counted under, by cause id (`counted_kind`)."""
        return self._parts[0]

    @property
    def unwinders(self) -> list[tuple]:
        """(unwinder,) by cause id."""
        return self._parts[1]

    @property
    def failing(self) -> list[Part]:
        """(unwinder,) by cause id, None for a stop in a library (not a failure)."""
        return self._parts[2]

    @property
    def kind_parts(self) -> list[tuple]:
        """(counted kind,) by cause id."""
        return self._parts[3]

    def sums(self, heads: Sequence[Part], middles: Sequence[Part] | None = None,
             tails: Sequence[tuple] | None = None, into: dict | None = None) -> dict:
        """Walks added up under heads[cause] + middles[where] + tails[cause]
        (in `into`), but for entries whose head or middle is None (no
        middles, no tails: empty parts)."""
        middles = [()] * len(self.wheres) if middles is None else middles
        tails = [()] * len(self.causes) if tails is None else tails
        return sum_by({} if into is None else into, self.entries, heads, middles, tails)

    def grouped(self, key: KeyParts) -> Grouping:
        """The entries grouped by `key` (`group_by`)."""
        return group_by(self.entries, key.heads, key.middles, key.tails)

    def counter(self) -> Counter:
        """(where, cause) -> walks."""
        return Counter(self.sums([()] * len(self.causes), [(where,) for where in self.wheres],
                                 [(cause,) for cause in self.causes]))

    def logged(self) -> int:
        """How many failing walks a run logs, its cap aside: all but the
        stops in a library (no_info refusals there)."""
        failing = self.failing
        return sum([walks for _, cause, walks in self.entries if failing[cause] is not None])
