"""The baseline gate: which failure counts rose above reports/baseline.json."""

from __future__ import annotations

from pathlib import Path

from harness.classify import OWN
from harness.errors import InputError
from harness.filesystem import read_json
from harness.report.data import index_rows


def regressions(latest: dict, baseline: dict) -> list[str]:
    """Rows whose failure count rose above the baseline's (absent rows count 0),
    in the generated corpus, each compiled build and each Linux program."""
    sections = [("", latest["results"], baseline["results"])]
    for section in ("elf", "linux"):
        old_groups = {g["build"]: g["results"] for g in baseline.get(section, [])}
        sections += [(f"{g['build']}: ", _gated(section, g["results"]), old_groups.get(g["build"], []))
                     for g in latest.get(section, [])]
    risen = []
    for prefix, rows, old_rows in sections:
        before = index_rows(old_rows)
        for key, row in index_rows(rows).items():
            old = before.get(key, {"failed": 0})["failed"]
            if row["failed"] > old:
                unwinder, category, position = key
                risen.append(f"{prefix}{unwinder} / {category} / {position}: {old} -> {row['failed']} failed stops")
    return risen


def _gated(section: str, rows: list[dict]) -> list[dict]:
    """The rows a section is gated on. A Linux program's: its own code's
    (the headline), not the system libraries', whose counts move with the
    sysroot's package versions (a security update of libc6)."""
    return rows if section != "linux" else [row for row in rows if row["category"] == OWN]


def read_baseline(path: Path, data: dict) -> dict:
    """The baseline report at `path`, checked to be one this run can be
    compared with; InputError naming the file otherwise."""
    baseline = read_json(path, "baseline")
    if not isinstance(baseline, dict) or not isinstance(baseline.get("results"), list):
        raise InputError(f"{path}: not a report (no list of results)")
    if baseline.get("seed") != data["seed"] or baseline.get("input") != data["input"]:
        raise InputError(f"{path} was recorded for input {baseline.get('input')!r}, "
                         f"seed {baseline.get('seed')}; this run is {data['input']!r}, seed {data['seed']}")
    return baseline


def risen_above(data: dict, path: Path) -> list[str]:
    """The rows of `data` whose failure count rose above the baseline at `path`."""
    baseline = read_baseline(path, data)
    try:
        return regressions(data, baseline)
    except (KeyError, TypeError, AttributeError) as error:
        raise InputError(f"{path}: malformed result rows ({type(error).__name__}: {error})") from None
