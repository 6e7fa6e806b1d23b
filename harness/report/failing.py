"""Which stops fail, compactly: per unwinder, per (function, position,
kind), the failing stops counted and the pcs they failed at (as ranges).
A report keeps this digest per program, so that a later run can name what
is new against it: the groups that fail more, and the pcs that fail now
and did not before.

pcs are kept where the run logged every failing walk of the unwinder (a
run logs at most abi.FAILURE_LOG_CAP one by one) and they are at most
PCS_PER_UNWINDER; past that the group's pcs are None and it is named by
its counts alone. Ranges merge pcs at most
RANGE_GAP bytes apart (one Thumb-2 instruction), so that an unwinder that
fails at every pc of a function keeps one range for it.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from harness.classify import Where
from harness.verify.failures import FailureCause, FailureLog, Ranges, merged
from harness.verify.tally import STOPPED_PREFIX, KeyParts, Tally, counted_kind

PCS_PER_UNWINDER = 100_000
GroupKey = tuple[str, str, str]  # (function, position, kind)


class Group(NamedTuple):
    stops: int
    pcs: Ranges | None  # None: not every failing walk was logged


def uncovered(now: Ranges, before: Ranges) -> Ranges:
    """The parts of `now` outside `before`."""
    out = []
    for low, high in now:
        start = low
        for old_low, old_high in before:
            if old_high < start or old_low > high:
                continue
            if old_low > start:
                out.append((start, old_low - 1))
            start = max(start, old_high + 1)
        if start <= high:
            out.append((start, high))
    return tuple(out)


def group_key(tally: Tally) -> KeyParts:
    """A failing walk's group in a digest, (unwinder, function, position,
    kind) of its where and cause; none for a stop in a library."""
    def of(where: Where, cause: FailureCause) -> tuple | None:
        kind = counted_kind(cause)
        return None if kind.startswith(STOPPED_PREFIX) else (cause.unwinder, where.function, where.position, kind)
    return KeyParts(tally.failing, [(where.function, where.position) for where in tally.wheres], tally.kind_parts, of)


def digest(tally: Tally, log: FailureLog) -> dict[str, dict[GroupKey, Group]]:
    """The digest of one run: its `tally` of failing walks, and the pcs of
    those its failure `log` holds (every logged failure is tallied)."""
    key = group_key(tally)
    groups = tally.grouped(key)
    return digest_groups(groups.keys, groups.walks, log.logged_pcs(key, groups))


def digest_groups(keys: Sequence[tuple], walks: Sequence[int], logged: Sequence[tuple | None],
                  cap: int = PCS_PER_UNWINDER) -> dict[str, dict[GroupKey, Group]]:
    """unwinder -> (function, position, kind) -> Group, of the failing walks
    by group, keys[g] (unwinder, function, position, kind), and those logged
    (logged[g]: (failures, ranges), or None): each group's pcs where every
    failing walk of its unwinder was logged, and they are at most `cap`;
    else None. In the order of `keys` (what a report writes of a digest is
    sorted). One pass over the groups, each unwinder's then put right where
    it is not complete (a group's tuple made by tuple.__new__: a digest has
    hundreds of groups a program, and a NamedTuple's own __new__ costs twice that)."""
    out: dict[str, dict[GroupKey, Group]] = {}
    totals: dict[str, int] = {}  # failing walks per unwinder
    counted: dict[str, int] = {}  # logged failing walks per unwinder
    unlogged: set[str] = set()  # unwinders with a group none of whose walks was logged
    make = tuple.__new__
    current = groups = None
    for (unwinder, function, position, kind), count, found in zip(keys, walks, logged):
        if unwinder != current:  # keys come mostly unwinder by unwinder
            current, groups = unwinder, out.get(unwinder)
            if groups is None:
                groups = out[unwinder] = {}
                totals[unwinder] = counted[unwinder] = 0
        totals[unwinder] += count
        if found is None:
            unlogged.add(unwinder)
            pcs = None
        else:
            logged_walks, pcs = found
            counted[unwinder] += logged_walks
        groups[(function, position, kind)] = make(Group, (count, pcs))
    for unwinder, groups in out.items():
        complete = counted[unwinder] == totals[unwinder] <= cap
        if complete and unwinder not in unlogged:
            continue
        for key, group in groups.items():  # no pcs where incomplete; none logged of a complete unwinder's: none there
            if not complete or group.pcs is None:
                groups[key] = make(Group, (group.stops, () if complete else None))
    return out


def combined(parts: Iterable[dict[str, dict[GroupKey, Group]]]) -> dict[str, dict[GroupKey, Group]]:
    """The digest of runs (or shards of one run's stops) together."""
    out: dict[str, dict[GroupKey, Group]] = {}
    for part in parts:
        for unwinder, groups in part.items():
            mine = out.setdefault(unwinder, {})
            for key, group in groups.items():
                old = mine.get(key)
                if old is None:
                    mine[key] = group
                    continue
                pcs = None if old.pcs is None or group.pcs is None else merged((*old.pcs, *group.pcs))
                mine[key] = Group(old.stops + group.stops, pcs)
    return {unwinder: dict(sorted(groups.items())) for unwinder, groups in sorted(out.items())}


def to_json(failing: dict[str, dict[GroupKey, Group]]) -> dict[str, list[str]]:
    """One line per group, `function<TAB>position<TAB>kind<TAB>stops<TAB>pcs`,
    pcs as hex ranges (`100-106 10c`) or `?` where not known: a report
    holds tens of thousands of groups."""
    return {unwinder: ["\t".join((*key, str(group.stops), _pcs_text(group.pcs)))
                       for key, group in sorted(groups.items())]
            for unwinder, groups in sorted(failing.items())}


def _pcs_text(pcs: Ranges | None) -> str:
    if pcs is None:
        return "?"
    return " ".join(f"{low:x}" if low == high else f"{low:x}-{high:x}" for low, high in pcs)


def parse_group(line: str) -> tuple[GroupKey, Group]:
    """A line of to_json's; ValueError saying what is wrong."""
    fields = line.split("\t")
    if len(fields) != 5:
        raise ValueError(f"{len(fields)} tab-separated fields, not 5 (function, position, kind, stops, pcs)")
    function, position, kind, stops, text = fields
    if not stops.isdigit():
        raise ValueError(f"stops {stops!r} is not a count")
    return (function, position, kind), Group(int(stops), None if text == "?" else _ranges_from(text))


def _ranges_from(text: str) -> Ranges:
    ranges = []
    for word in text.split():
        low, _, high = word.partition("-")
        values = (int(low, 16), int(high or low, 16))
        if not 0 <= values[0] <= values[1] <= 0xFFFFFFFF:
            raise ValueError(f"pc range {word!r} is not low-high within 32 bits")
        ranges.append(values)
    return tuple(ranges)


def from_json(data: dict[str, list[str]]) -> dict[str, dict[GroupKey, Group]]:
    return {unwinder: dict(map(parse_group, lines)) for unwinder, lines in data.items()}


class NewFailure(NamedTuple):
    """A group of a program's failing stops that fails more than in the baseline."""

    program: str
    unwinder: str
    function: str
    position: str
    kind: str
    before: int  # failing stops in the baseline
    now: int
    new_pcs: Ranges | None  # pcs failing now and not before (None: not known)

    def line(self, function: bool = True) -> str:
        where = f"{self.unwinder} {self.position} {self.kind}"
        if function:
            where = f"{self.function} ({self.program}): {where}"
        if self.new_pcs is None:
            pcs = ""
        elif self.new_pcs:
            shown = ", ".join(f"{low:#x}" if low == high else f"{low:#x}-{high:#x}" for low, high in self.new_pcs[:5])
            more = len(self.new_pcs) - 5
            pcs = f"; new at {shown}" + (f" and {more} more ranges" if more > 0 else "")
        else:
            pcs = "; at the pcs that failed before"
        return f"{where}: {self.before} -> {self.now} failing stops{pcs}"


def new_failures(program: str, now: dict[str, list], before: dict[str, list] | None,
                 unwinders: Sequence[str]) -> list[NewFailure]:
    """The groups of `program` (digests as report JSON) that fail more now,
    for `unwinders`; with the pcs that are new where both runs know them."""
    current, old = from_json(now), from_json(before or {})
    out = []
    for unwinder in unwinders:
        baseline = old.get(unwinder, {})
        for key, group in current.get(unwinder, {}).items():
            was = baseline.get(key, Group(0, ()))
            if group.stops <= was.stops:
                continue
            new = None if group.pcs is None or was.pcs is None else uncovered(group.pcs, was.pcs)
            out.append(NewFailure(program, unwinder, *key, was.stops, group.stops, new))
    return out


def by_function(found: Sequence[NewFailure]) -> list[str]:
    """Lines naming `found`, a heading for each function."""
    lines, heading = [], None
    for failure in sorted(found, key=lambda f: (f.program, f.function, f.unwinder, f.position, f.kind)):
        if (failure.program, failure.function) != heading:
            heading = (failure.program, failure.function)
            lines.append(f"{failure.function} ({failure.program}):")
        lines.append(f"  {failure.line(function=False)}")
    return lines


def new_failure_json(failure: NewFailure) -> dict:
    return {**failure._asdict(), "new_pcs": None if failure.new_pcs is None else [list(r) for r in failure.new_pcs]}


def new_failure_from_json(data: dict) -> NewFailure:
    pcs = data["new_pcs"]
    return NewFailure(**{**data, "new_pcs": None if pcs is None else tuple(map(tuple, pcs))})
