"""The report in the terminal (rich tables)."""

from __future__ import annotations

from harness.report.data import ALL, index_rows
from harness.report.tables import (
    elf_cells,
    group_cells,
    linux_cells,
    size_cells,
    stopped_line,
    table_cells,
    unwinder_names,
)


def _rich_table(title: str, header: list[str], body: list[list[str]], left: int = 1):
    """A rich table whose first `left` columns are left-aligned."""
    from rich.table import Table

    table = Table(title=title)
    for index, name in enumerate(header):
        table.add_column(name, justify="left" if index < left else "right")
    for row in body:
        table.add_row(*row)
    return table


def print_table(data: dict, console) -> None:
    header, body = table_cells(data)
    console.print(_rich_table(f"Unwind failures per category ({data['input']}, seed {data['seed']})",
                              header, body, left=2))
    console.print("checked per frame: " + "; ".join(f"{u}: {c}" for u, c in data["checked"].items()),
                  highlight=False)
    index = index_rows(data["results"])
    for unwinder in unwinder_names(data):
        line = stopped_line(index[(unwinder, ALL, ALL)])
        if line:
            console.print(f"{unwinder}: {line}", highlight=False)
    if data.get("sizes"):
        header, totals, ratios = size_cells(data["sizes"])
        console.print(_rich_table("Table bytes per format", header, totals))
        console.print(_rich_table("Bytes per function / per address", header, ratios))
    if data.get("elf"):
        for group in data["elf"]:
            header, body = group_cells(group)
            console.print(_rich_table(f"{group['build']}: failed stops per category", header, body, left=2))
        header, body = elf_cells(data["elf"])
        console.print(_rich_table("Compiled programs (corpus/elf): failed stops over all stops", header, body))
    if data.get("linux"):
        header, body = linux_cells(data["linux"])
        console.print(_rich_table("Linux programs (corpus/linux): failed / stopped in libraries / failed in own code",
                                  header, body))
