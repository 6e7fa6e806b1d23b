"""The report files a run writes: the JSON report, Markdown and the chart,
where they were asked for (each written atomically, harness.filesystem)."""

from __future__ import annotations

from pathlib import Path

from harness.errors import InputError
from harness.filesystem import write_output
from harness.report.chart import chart
from harness.report.data import dumps
from harness.report.markdown import markdown

REPORT_FILES = ("latest.json", "latest.md", "latest.png")
# Where a run writes unless told: a folder git ignores, so that `make run`
# and `make test` change no tracked file.
OUTPUT = Path("out")
# The committed records: the baseline the gate reads, and the reports the
# README's figures come from (rewritten only on request: `make record`).
RECORDS = Path("reports")


def report_directory(reports: str | None, json_path: str | None) -> Path | None:
    """Where latest.md and latest.png go: `--reports` if given, else
    OUTPUT unless only `--json` was asked for (then nowhere)."""
    if reports is not None:
        return Path(reports)
    return OUTPUT if json_path is None else None


def baseline_file(baseline: str | None, reports: str | None) -> Path:
    """The gate's baseline: `--baseline`, else the one beside `--reports`,
    else the committed one."""
    if baseline:
        return Path(baseline)
    return (Path(reports) if reports else RECORDS) / "baseline.json"


def report_paths(directory: Path | None, json_path: str | None) -> list[Path]:
    """The files write_reports writes."""
    paths = [Path(json_path)] if json_path else []
    if directory is not None:
        paths += [directory / name for name in REPORT_FILES if not (json_path and name == "latest.json")]
    return paths


def write_reports(data: dict, directory: Path | None, json_path: str | None, title: str) -> None:
    """The JSON report to `json_path` (default: DIRECTORY/latest.json), and
    DIRECTORY/latest.md and latest.png when there is a directory."""
    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(f"{directory}: cannot make the report directory: {error.strerror or error}") from None
    write_output(json_path or directory / "latest.json", dumps(data))
    if directory is not None:
        write_output(directory / "latest.md", markdown(data, title))
        write_output(directory / "latest.png", chart(data))
