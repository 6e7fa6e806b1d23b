"""The report's chart (reports/latest.png), drawn with matplotlib: heat
maps of failure rates, unwinders down, categories (and compiled builds)
across, each cell labelled with its rate. The colour scale is
logarithmic, so that 1-6% failures stand apart from 0.01% ones; a cell
with no failure is white and says 0, one without stops is blank; each
unwinder's row is labelled with its overall rate and the baseline's."""

from __future__ import annotations

import io
import math

from harness.report.data import ALL, index_rows
from harness.report.tables import summary_lines, unwinder_names

FLOOR = 0.01  # percent: the colour of the smallest rates shown


def _cell_text(rate: float | None) -> str:
    if rate is None:
        return ""
    if rate == 0:
        return "0"
    if rate < 0.01:
        return "<0.01"
    return f"{rate:.2f}" if rate < 10 else f"{rate:.0f}"


def _row_labels(data: dict, names: list[str]) -> list[str]:
    """Each unwinder with its rate over the run, and the baseline's."""
    verdict = {row["unwinder"]: row for row in data.get("verdict") or ()}
    labels = []
    for name in names:
        row = verdict.get(name)
        if row is None or not row["stops"]:
            labels.append(name)
            continue
        label = f"{name}  {100 * row['failed'] / row['stops']:.2f}%"
        if row["baseline_stops"]:
            label += f" (baseline {100 * row['baseline_failed'] / row['baseline_stops']:.2f}%)"
        labels.append(label)
    return labels


def _heatmap(ax, names: list[str], columns: list[tuple[dict, str, str]], labels: list[str], title: str,
             row_labels: list[str]) -> None:
    from matplotlib.colors import LogNorm

    rates = []
    for unwinder in names:
        line = []
        for index, category, position in columns:
            row = index.get((unwinder, category, position))
            line.append(100 * row["failed"] / row["stops"] if row and row["stops"] else None)
        rates.append(line)
    shown = [[math.nan if r is None or r == 0 else max(r, FLOOR) for r in line] for line in rates]
    ax.imshow(shown, cmap="YlOrRd", norm=LogNorm(vmin=FLOOR, vmax=100), aspect="auto")
    for y, line in enumerate(rates):
        for x, rate in enumerate(line):
            dark = rate is not None and rate >= 10
            ax.text(x, y, _cell_text(rate), ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)), row_labels, fontsize=8)
    ax.set_title(title + " (failed stops, %)")


def chart(data: dict) -> bytes:
    """The PNG: failure rate per category for every unwinder, and per
    compiled build and Linux program when the report has them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = unwinder_names(data)
    lines = summary_lines(data)
    panels = [(f"Per category ({data['input']})", [(index_rows(data["results"]), c, p) for c, p in lines],
               [c if p == ALL else f"{c}: {p}" if c != ALL else p for c, p in lines])]
    for key, what in (("elf", "Compiled programs (corpus/elf)"), ("linux", "Linux programs (corpus/linux)")):
        groups = data.get(key, [])
        if groups:
            panels.append((f"{what}: all stops", [(index_rows(g["results"]), ALL, ALL) for g in groups],
                           [g["build"] for g in groups]))
    width = max(10.0, 0.5 * max(len(labels) for _, _, labels in panels) + 4)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, figsize=(width, 0.45 * len(names) * len(panels) + 2.5
                                                                        * len(panels)))
    row_labels = _row_labels(data, names)
    for ax, (title, columns, labels) in zip((row[0] for row in axes), panels):
        _heatmap(ax, names, columns, labels, title, row_labels)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()
