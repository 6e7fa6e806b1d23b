"""The report files a run writes: the JSON report, Markdown and the chart."""

from __future__ import annotations

from pathlib import Path

from harness.report.chart import chart
from harness.report.data import dumps
from harness.report.markdown import markdown


def write_reports(data: dict, directory: Path, json_path: str | None, title: str) -> None:
    """`json_path` (default: DIRECTORY/latest.json), DIRECTORY/latest.md and latest.png."""
    directory.mkdir(parents=True, exist_ok=True)
    Path(json_path or directory / "latest.json").write_text(dumps(data))
    (directory / "latest.md").write_text(markdown(data, title))
    chart(data, directory / "latest.png")
