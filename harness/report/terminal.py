"""The report in the terminal (rich tables): the verdict first, then the
detailed tables. No label or number is ever cut: a table wider than the
console is split into several, each repeating the label columns."""

from __future__ import annotations

from typing import Sequence

from harness.report.baseline import Regression
from harness.report.data import ALL, index_rows, input_label
from harness.report.failing import by_function, new_failure_from_json
from harness.report.tables import (
    elf_cells,
    group_cells,
    linux_cells,
    not_verified,
    right_cells,
    size_cells,
    stopped_line,
    table_cells,
    unwinder_names,
)
from harness.report.verdict import corpus_tallies, own_tallies, verdict_cells

REGRESSIONS_SHOWN = 10  # in the verdict block; the rest in the reports
NEW_FAILURE_LINES = 20  # likewise


def column_chunks(widths: Sequence[int], left: int, width: int) -> list[list[int]]:
    """The value columns (after the `left` label columns) split into runs
    that fit `width` beside the label columns: a rich table takes a
    column's width plus 3 (padding and rule), and 1 for the last rule."""
    fixed = sum(widths[:left]) + 3 * left + 1
    chunks: list[list[int]] = [[]]
    used = fixed
    for column in range(left, len(widths)):
        if chunks[-1] and used + widths[column] + 3 > width:
            chunks.append([])
            used = fixed
        chunks[-1].append(column)
        used += widths[column] + 3
    return chunks


def fitted_tables(title: str, header: list[str], body: list[list[str]], width: int, left: int = 1) -> list:
    """Rich tables of `body`, as many as it takes to show every cell whole
    within `width` columns; the first `left` columns in each. Cells are
    text, never markup (a module named `[jit]` is shown as it is)."""
    from rich.table import Table
    from rich.text import Text

    widths = [max([len(name), *(len(row[n]) for row in body)]) for n, name in enumerate(header)]
    chunks = column_chunks(widths, left, width)
    tables = []
    for number, chunk in enumerate(chunks, 1):
        part = f" ({number}/{len(chunks)})" if len(chunks) > 1 else ""
        table = Table(title=Text(title + part))
        for column in [*range(left), *chunk]:
            table.add_column(Text(header[column]), justify="left" if column < left else "right",
                             no_wrap=True, min_width=widths[column])
        for row in body:
            table.add_row(*(Text(row[column]) for column in [*range(left), *chunk]))
        tables.append(table)
    return tables


def _print(console, title: str, header: list[str], body: list[list[str]], left: int = 1) -> None:
    for table in fitted_tables(title, header, body, console.width, left):
        console.print(table)


def print_verdict(data: dict, console) -> None:
    """The verdict block: one row per unwinder, the programs not verified,
    then the gate's outcome (harness.report.baseline)."""
    header, body = verdict_cells(data["verdict"], own_tallies(data), corpus_tallies(data))
    _print(console, "Verdict: failed stops in the program's own code, in each corpus, over every stop", header, body)
    for line in not_verified(data):
        console.print(f"not verified: {line}", highlight=False)
    gate = data.get("gate")
    if gate is None:
        return
    risen = [Regression(**row) for row in gate["regressions"]]
    if not risen:
        console.print(f"gate: PASS, no failure count rose above {gate['baseline']}", highlight=False)
        return
    console.print(f"gate: FAIL, {len(risen)} failure counts rose above {gate['baseline']}:", highlight=False)
    for regression in risen[:REGRESSIONS_SHOWN]:
        console.print(f"  {regression.line()}", highlight=False)
    if len(risen) > REGRESSIONS_SHOWN:
        console.print(f"  and {len(risen) - REGRESSIONS_SHOWN} more (the report's gate section)", highlight=False)
    lines = by_function([new_failure_from_json(f) for f in gate["new_failures"]])
    if lines:
        console.print("failing more than in the baseline, by function:", highlight=False)
        for line in lines[:NEW_FAILURE_LINES]:
            console.print(f"  {line}", highlight=False)
        if len(lines) > NEW_FAILURE_LINES:
            console.print(f"  and {len(lines) - NEW_FAILURE_LINES} more lines (the report's gate section)",
                          highlight=False)


def verdict_line(data: dict) -> str:
    """The outcome in one line: the gate's, and the programs not verified."""
    gate, unverified = data.get("gate"), len(not_verified(data))
    parts = [] if gate is None else [f"gate {'PASS' if gate['passed'] else 'FAIL'} against {gate['baseline']}"
                                     + ("" if gate["passed"] else f" ({len(gate['regressions'])} counts rose)")]
    parts.append(f"{unverified} programs not verified" if unverified else "every program verified")
    return "verdict: " + "; ".join(parts)


def print_table(data: dict, console) -> None:
    """The detailed tables."""
    header, body = table_cells(data)
    _print(console, f"Unwind failures per category ({input_label(data)})", header, body, left=2)
    console.print("checked per frame: " + "; ".join(f"{u}: {c}" for u, c in data["checked"].items()),
                  highlight=False)
    index = index_rows(data["results"])
    for unwinder in unwinder_names(data):
        line = stopped_line(index[(unwinder, ALL, ALL)])
        if line:
            console.print(f"{unwinder}: {line}", highlight=False)
    for key, label, title in (("modules", "module", "module (of the innermost pc)"), ("threads", "thread", "thread")):
        if data.get(key):  # a process's
            header, body = right_cells(data[key], label)
            _print(console, f"Walks right to the bottom, per {title}", header, body)
    if data.get("sizes"):
        header, totals, ratios = size_cells(data["sizes"])
        _print(console, "Table bytes per format", header, totals)
        _print(console, "Bytes per function / per address", header, ratios)
    for group in data.get("elf", []):
        header, body = group_cells(group)
        _print(console, f"{group['build']}: failed stops per category", header, body, left=2)
    if data.get("elf"):
        header, body = elf_cells(data["elf"])
        _print(console, "Compiled programs (corpus/elf): failed stops over all stops", header, body)
    if data.get("linux"):
        header, body = linux_cells(data["linux"])
        _print(console, "Linux programs (corpus/linux): failed / stopped in libraries / failed in own code",
               header, body)
