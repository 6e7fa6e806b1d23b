"""The verdict of a run, first thing a reader sees: per unwinder its
failure rate over every stop of every corpus in the run, the change
against the baseline, its worst category, and whether the gate passed."""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple, Sequence

from harness.classify import OWN
from harness.report.data import ALL

WORST_MIN_STOPS = 100  # a category with fewer stops is not named the worst (one stop of one is 100%)


class Tally(NamedTuple):
    failed: int
    stops: int

    @property
    def rate(self) -> float:
        return self.failed / self.stops if self.stops else 0.0


class Verdict(NamedTuple):
    """One unwinder's line of the verdict (as stored in the report's `verdict`)."""

    unwinder: str
    failed: int
    stops: int
    baseline_failed: int | None  # the same over the baseline's run (None: no baseline to compare with)
    baseline_stops: int | None
    worst: str | None  # the category with the highest rate (of those with WORST_MIN_STOPS stops; None: no failure)
    worst_failed: int
    worst_stops: int
    gate: str  # PASS, FAIL, or "-" where no baseline was checked


def sections(data: dict) -> list[list[dict]]:
    """Result rows of every corpus in the report: generated, compiled, Linux."""
    return [data["results"], *(group["results"] for key in ("elf", "linux") for group in data.get(key, []))]


def tallies(data: dict) -> dict[tuple[str, str], Tally]:
    """(unwinder, category) -> failed and stops over all positions, summed over every section."""
    sums: dict[tuple[str, str], Tally] = defaultdict(lambda: Tally(0, 0))
    for rows in sections(data):
        for row in rows:
            if row["position"] == ALL:
                key = (row["unwinder"], row["category"])
                sums[key] = Tally(sums[key].failed + row["failed"], sums[key].stops + row["stops"])
    return dict(sums)


def verdicts(data: dict, baseline: dict | None, failing: Sequence[str] | None) -> list[Verdict]:
    """One per unwinder of `data`; `failing` names the unwinders whose
    counts rose above the baseline (None: the gate was not run)."""
    now = tallies(data)
    before = tallies(baseline) if baseline else {}
    out = []
    for unwinder in dict.fromkeys(unwinder for unwinder, _ in now):
        categories = [(category, tally) for (name, category), tally in now.items()
                      if name == unwinder and category != ALL and tally.stops >= WORST_MIN_STOPS and tally.failed]
        worst, worst_tally = max(categories, key=lambda item: (item[1].rate, item[0]), default=(None, Tally(0, 0)))
        old, whole = before.get((unwinder, ALL)), now[(unwinder, ALL)]
        out.append(Verdict(unwinder=unwinder, failed=whole.failed, stops=whole.stops,
                           baseline_failed=old and old.failed, baseline_stops=old and old.stops,
                           worst=worst, worst_failed=worst_tally.failed, worst_stops=worst_tally.stops,
                           gate="-" if failing is None else "FAIL" if unwinder in failing else "PASS"))
    return out


def _percent(failed: int, stops: int) -> str:
    return f"{100 * failed / stops:.2f}%" if stops else "-"


def own_tallies(data: dict) -> dict[str, Tally]:
    """Per unwinder, failed and stops in the program's own code (the sources' code: harness.code_origin)."""
    return {unwinder: tally for (unwinder, category), tally in tallies(data).items() if category == OWN}


def verdict_cells(rows: Sequence[dict], own: dict[str, Tally]) -> tuple[list[str], list[list[str]]]:
    """Cells of the verdict rows of a report (its `verdict`), led by the
    rate in the program's own code (`own`: own_tallies), where a run of a
    Linux program spends most stops in ld.so and libraries."""
    header = ["unwinder", "own code failed", "failed", "rate", "vs baseline", "worst category", "gate"]
    body = []
    for verdict in map(lambda row: Verdict(**row), rows):
        rate = verdict.failed / verdict.stops if verdict.stops else 0.0
        change = "-"
        if verdict.baseline_stops:
            points = round(100 * (rate - verdict.baseline_failed / verdict.baseline_stops), 2) + 0.0  # no -0.00
            change = f"{points:+.2f} pp"
        worst = "-" if verdict.worst is None else f"{verdict.worst} {_percent(verdict.worst_failed, verdict.worst_stops)}"
        mine = own.get(verdict.unwinder, Tally(0, 0))
        body.append([verdict.unwinder, f"{_percent(mine.failed, mine.stops)} ({mine.failed:,} of {mine.stops:,})"
                     if mine.stops else "-", f"{verdict.failed:,}", _percent(verdict.failed, verdict.stops), change,
                     worst, verdict.gate])
    return header, body
