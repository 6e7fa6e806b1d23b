"""The verdict of a run, first thing a reader sees: per unwinder its
failure rate over every stop of every corpus in the run, the change
against the baseline, its worst category, and whether the gate passed."""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple, Sequence

from harness.classify import OWN
from harness.report.data import ALL
from harness.report.tables import short_label

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
    return [rows for _, corpus in labelled_sections(data) for rows in corpus]


def labelled_sections(data: dict) -> list[tuple[str, list[list[dict]]]]:
    """The result rows of each corpus, by its label: the main job's
    generated programs (or verify-elf's program, by its file name), the
    compiled builds, the Linux programs."""
    return [(short_label(data.get("input", "program")), [data["results"]]), ("compiled", [group["results"] for group in data.get("elf", [])]),
            ("Linux", [group["results"] for group in data.get("linux", [])])]


def tallies(data: dict) -> dict[tuple[str, str], Tally]:
    """(unwinder, category) -> failed and stops over all positions, summed over every section."""
    return _summed(sections(data))


def corpus_tallies(data: dict) -> list[tuple[str, dict[str, Tally]]]:
    """Per corpus with stops (labelled_sections), each unwinder's failed and stops over all of it."""
    found = []
    for label, corpus in labelled_sections(data):
        whole = {unwinder: tally for (unwinder, category), tally in _summed(corpus).items() if category == ALL}
        if any(tally.stops for tally in whole.values()):
            found.append((label, whole))
    return found


def _summed(corpus: list[list[dict]]) -> dict[tuple[str, str], Tally]:
    sums: dict[tuple[str, str], Tally] = defaultdict(lambda: Tally(0, 0))
    for rows in corpus:
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


def verdict_cells(rows: Sequence[dict], own: dict[str, Tally],
                  corpora: Sequence[tuple[str, dict[str, Tally]]] = ()) -> tuple[list[str], list[list[str]]]:
    """Cells of the verdict rows of a report (its `verdict`): the failed
    share of the stops in the program's own code (`own`: own_tallies,
    where a run of a Linux program spends most stops in ld.so and
    libraries), in each corpus where a run has more than one (`corpora`:
    corpus_tallies), and over every stop, each labelled."""
    several = corpora if len(corpora) > 1 else ()
    header = ["unwinder", "own code", *(label for label, _ in several), "every stop", "vs baseline",
              "worst category", "gate"]
    body = []
    for verdict in map(lambda row: Verdict(**row), rows):
        rate = verdict.failed / verdict.stops if verdict.stops else 0.0
        change = "-"
        if verdict.baseline_stops:
            points = round(100 * (rate - verdict.baseline_failed / verdict.baseline_stops), 2) + 0.0  # no -0.00
            change = f"{points:+.2f} pp"
        worst = "-" if verdict.worst is None else f"{verdict.worst} {_percent(verdict.worst_failed, verdict.worst_stops)}"
        cells = [_share(own.get(verdict.unwinder)),
                 *(_share(tallied.get(verdict.unwinder)) for _, tallied in several),
                 _share(Tally(verdict.failed, verdict.stops))]
        body.append([verdict.unwinder, *cells, change, worst, verdict.gate])
    return header, body


def _share(tally: Tally | None) -> str:
    """A failed share with its count of stops: '1.16% of 3,100'; '-' where none."""
    return f"{_percent(tally.failed, tally.stops)} of {tally.stops:,}" if tally and tally.stops else "-"
