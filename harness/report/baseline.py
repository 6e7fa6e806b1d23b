"""The baseline gate: which failure counts rose above a baseline report,
and the refusal, before any work, of a run that cannot be compared with
it (another program set, seed, unwinder set or sampling)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Sequence

from harness.classify import OWN
from harness.errors import InputError
from harness.filesystem import read_json
from harness.report.data import index_rows
from harness.report.failing import NewFailure, new_failures


class Regression(NamedTuple):
    section: str  # "" for the generated corpus, else the build or program
    unwinder: str
    category: str
    position: str
    before: int  # failed stops in the baseline
    now: int

    def line(self) -> str:
        prefix = f"{self.section}: " if self.section else ""
        return (f"{prefix}{self.unwinder} / {self.category} / {self.position}: "
                f"{self.before} -> {self.now} failed stops")


class RunIdentity(NamedTuple):
    """What a run verifies: two runs compare only where these agree."""

    seed: int | None
    programs: int  # generated programs
    elf: tuple[str, ...]  # compiled builds
    linux: tuple[str, ...]  # Linux corpus programs
    unwinders: tuple[str, ...]
    linux_every: int  # every n-th stop of a Linux program verified

    def differences(self, other: "RunIdentity") -> list[str]:
        """What differs, each as `field: this vs other`."""
        return [f"{name}: {_shown(mine)} vs {_shown(theirs)}"
                for name, mine, theirs in zip(self._fields, self, other) if mine != theirs]


def _shown(value) -> str:
    if isinstance(value, tuple):
        return f"{len(value)} ({', '.join(value[:4])}{', ...' if len(value) > 4 else ''})"
    return str(value)


def identity_of(report: dict) -> RunIdentity:
    """The identity of the run a report came from."""
    linux = report.get("linux", [])
    return RunIdentity(report.get("seed"), len(report.get("programs", [])),
                       tuple(group["build"] for group in report.get("elf", [])),
                       tuple(group["build"] for group in linux),
                       tuple(dict.fromkeys(row["unwinder"] for row in report["results"])),
                       max((group.get("every", 1) for group in linux), default=1))


def comparable_baseline(path: Path, planned: RunIdentity) -> dict:
    """The baseline report at `path`, if the planned run can be compared
    with it; InputError naming the file and every difference otherwise."""
    baseline = read_json(path, "baseline")
    if not isinstance(baseline, dict) or not isinstance(baseline.get("results"), list):
        raise InputError(f"{path}: not a report (no list of results)")
    try:
        recorded = identity_of(baseline)
    except (KeyError, TypeError, AttributeError) as error:
        raise InputError(f"{path}: malformed report ({type(error).__name__}: {error})") from None
    differences = planned.differences(recorded)
    if differences:
        raise InputError(f"{path} was recorded for another run; this run vs the baseline: {'; '.join(differences)}")
    return baseline


def regressions(latest: dict, baseline: dict) -> list[Regression]:
    """Rows whose failure count rose above the baseline's (absent rows count 0),
    in the generated corpus, each compiled build and each Linux program."""
    sections = [("", latest["results"], baseline["results"])]
    for section in ("elf", "linux"):
        old_groups = {g["build"]: g["results"] for g in baseline.get(section, [])}
        sections += [(g["build"], _gated(section, g["results"]), old_groups.get(g["build"], []))
                     for g in latest.get(section, [])]
    risen = []
    for name, rows, old_rows in sections:
        before = index_rows(old_rows)
        for key, row in index_rows(rows).items():
            old = before.get(key, {"failed": 0})["failed"]
            if row["failed"] > old:
                risen.append(Regression(name, *key, old, row["failed"]))
    return risen


def _gated(section: str, rows: list[dict]) -> list[dict]:
    """The rows a section is gated on. A Linux program's: its own code's
    (the headline), not the system libraries', whose counts move with the
    sysroot's package versions (a security update of libc6)."""
    return rows if section != "linux" else [row for row in rows if row["category"] == OWN]


def gate_outcome(data: dict, baseline: dict, path: Path) -> tuple[list[Regression], list[NewFailure]]:
    """The rows of `data` whose failure count rose above `baseline` (read
    from `path`), and the groups of failing stops that are new."""
    try:
        risen = regressions(data, baseline)
    except (KeyError, TypeError, AttributeError) as error:
        raise InputError(f"{path}: malformed result rows ({type(error).__name__}: {error})") from None
    try:
        return risen, what_is_new(data, baseline, risen)
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise InputError(f"{path}: malformed digest of failing stops ({type(error).__name__}: {error})") from None


def failing_unwinders(risen: Sequence[Regression]) -> list[str]:
    return list(dict.fromkeys(r.unwinder for r in risen))


def what_is_new(latest: dict, baseline: dict, risen: Sequence[Regression]) -> list[NewFailure]:
    """For each section and unwinder with a count that rose, the groups of
    failing stops (function, position, kind) that fail more than in the
    baseline, with their new pcs where both runs know them."""
    rose: dict[str, list[str]] = {}
    for regression in risen:
        rose.setdefault(regression.section, [])
        if regression.unwinder not in rose[regression.section]:
            rose[regression.section].append(regression.unwinder)
    found: list[NewFailure] = []
    if "" in rose:
        old = baseline.get("failing", {})
        for program, digest in latest.get("failing", {}).items():
            found += new_failures(program, digest, old.get(program), rose[""])
    for key in ("elf", "linux"):
        old_groups = {g["build"]: g for g in baseline.get(key, [])}
        for group in latest.get(key, []):
            if group["build"] in rose:
                old = old_groups.get(group["build"], {}).get("failing")
                found += new_failures(group["build"], group.get("failing", {}), old, rose[group["build"]])
    return found
