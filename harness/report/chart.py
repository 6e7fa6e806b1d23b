"""The report's chart (reports/latest.png), drawn with matplotlib."""

from __future__ import annotations

import io

from harness.report.data import ALL, index_rows
from harness.report.tables import summary_lines, unwinder_names


def _bars(ax, names: list[str], groups: list[tuple[dict, str, str]], labels: list[str], title: str) -> None:
    """Grouped bars: one group per (row index, category, position), one bar
    per unwinder (0 where that unwinder did not run)."""
    width = 0.8 / len(names)
    for i, unwinder in enumerate(names):
        rates = []
        for index, category, position in groups:
            row = index.get((unwinder, category, position))
            rates.append(100 * row["failed"] / row["stops"] if row and row["stops"] else 0)
        ax.bar([x + i * width for x in range(len(groups))], rates, width, label=unwinder)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(groups))])
    ax.set_xticklabels(labels, rotation=40, ha="right")
    ax.set_ylabel("failed stops (%)")
    ax.set_title(title)


def chart(data: dict) -> bytes:
    """The PNG of grouped bars: failure rate per category for every unwinder,
    and per compiled build when the report has them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = unwinder_names(data)
    lines = summary_lines(data)
    groups = data.get("elf", [])
    fig, axes = plt.subplots(2 if groups else 1, 1, squeeze=False,
                             figsize=(max(10, 0.9 * len(lines)), 9 if groups else 4.5))
    index = index_rows(data["results"])
    _bars(axes[0][0], names, [(index, c, p) for c, p in lines],
          [c if p == ALL else p for c, p in lines], f"Unwind failure rate per category ({data['input']})")
    axes[0][0].legend(ncol=4, fontsize="small")
    if groups:
        _bars(axes[1][0], names, [(index_rows(g["results"]), ALL, ALL) for g in groups],
              [g["build"] for g in groups], "Compiled programs (corpus/elf): all stops")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    return out.getvalue()
