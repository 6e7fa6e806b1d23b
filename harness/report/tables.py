"""The report's tables as rows of cells, for every view (Markdown and the
terminal): the main table, table sizes, and the compiled builds."""

from __future__ import annotations

from typing import Callable

from harness.classify import OWN, POSITIONS
from harness.report.data import ALL, index_rows
from harness.unwind.registry import CHAIN, SIZE_COLUMNS


def table_lines(header: list[str]) -> list[str]:
    """A Markdown table's header row and rule."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]


def short_label(name: str) -> str:
    """A program's or build's name without its directory and `.elf`:
    `corpus/elf/clang-O2-fp.elf` -> `clang-O2-fp`."""
    return name.rsplit("/", 1)[-1].removesuffix(".elf") if "/" in name else name


def rate(row: dict) -> str:
    if not row["stops"]:
        return "-"
    return f"{100 * row['failed'] / row['stops']:.2f}% ({row['failed']})"


def summary_lines(data: dict) -> list[tuple[str, str]]:
    """(category, position) pairs of the main table: positions, then traits;
    the program's own code (where modules are told apart) by position too,
    for its body is where an unwinder with the compiler's CFI must not fail."""
    categories_seen = dict.fromkeys(r["category"] for r in data["results"])
    lines = [(ALL, p) for p in (ALL, *POSITIONS)]
    for category in categories_seen:
        if category != ALL:
            lines += [(category, p) for p in ((ALL, *POSITIONS) if category == OWN else (ALL,))]
    return lines


def unwinder_names(data: dict) -> list[str]:
    return list(dict.fromkeys(r["unwinder"] for r in data["results"]))


def table_cells(data: dict) -> tuple[list[str], list[list[str]]]:
    index = index_rows(data["results"])
    names = unwinder_names(data)
    header = ["category", "position", "stops", *(f"{u} failed" for u in names)]
    body = []
    for category, position in summary_lines(data):
        first = index[(names[0], category, position)]
        body.append([category, position, str(first["stops"]),
                     *(rate(index[(u, category, position)]) for u in names)])
    return header, body


def stopped_line(row: dict) -> str | None:
    """How many walks of a row stopped honestly (no_info) in modules without
    the unwinder's tables: not failures, apart from those in the program's
    own code; and how many went right to the bottom of the stack, neither
    failed nor stopped. None when none stopped (a bare-metal program's
    report)."""
    if not row["stopped"]:
        return None
    where = ", ".join(f"{module} {n}" for module, n in row["stopped_in"].items() if module != OWN)
    own = row["stopped_in"].get(OWN)
    bottom = row["stops"] - row["failed"] - row["stopped"]
    return (f"stopped, no tables there, at {row['stopped']} stops ({where})"
            + (f"; in own code at {own}, counted as failed" if own else "")
            + f"; right to the bottom at {bottom} ({100 * bottom / row['stops']:.2f}%)")


def not_verified(data: dict) -> list[str]:
    """One line per program whose run did not complete as it should: where
    it stopped and why, or the wrong result it computed."""
    runs = [(p["name"], p["stops"], p["self_check"]) for p in data["programs"]]
    runs += [(g["input"], g["stops"], g["self_check"]) for key in ("elf", "linux") for g in data.get(key, [])]
    lines = []
    for name, stops, check in runs:
        if check.startswith("emulation fault"):
            lines.append(f"{name}: {check}; {stops} stops verified before it, the rest did not run")
        elif check != "ok":
            lines.append(f"{name}: {check}: the run completed, but computed the wrong result, "
                         "so its stops are suspect")
    return lines


def _size(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def size_cells(sizes: dict) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """Header, then rows of bytes, and rows of bytes per function / per address."""
    header = ["input", "functions", "addresses", *SIZE_COLUMNS]
    totals, ratios = [], []
    for row in sizes["rows"]:
        first = [short_label(row["input"]), f"{row['functions']:,}", f"{row['addresses']:,}"]
        values = [row["bytes"].get(name) for name in SIZE_COLUMNS]  # a report from before a format: n/a
        refused = row.get("v1_refused")
        totals.append(first + [_size(v) + (f" ({refused} refused)" if name == "v1" and refused else "")
                               for name, v in zip(SIZE_COLUMNS, values)])
        ratios.append(first + ["n/a" if v is None else
                               f"{v / row['functions']:.2f} / {v / row['addresses']:.2f}"
                               for v in values])
    return header, totals, ratios


def epilogue_cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """What epilogue rows cost over `drop`, and the epilogues that have more
    of their function after them (each needs a function table entry of its
    own, or two pairs in a list, see chrome_v2.grouping)."""
    header = ["input", "epilogues inside functions", "v2 drop", "v2 synthesize", "over drop"]
    body = []
    for row in rows:
        inside, drop, synthesize = row.get("epilogues_inside"), row["bytes"]["v2 drop"], row["bytes"]["v2 synthesize"]
        if inside is None or not drop or synthesize is None:
            continue
        body.append([short_label(row["input"]), f"{inside:,}", f"{drop:,}", f"{synthesize:,}",
                     f"{100 * (synthesize / drop - 1):+.0f}%"])
    return header, body


def elf_cells(groups: list[dict]) -> tuple[list[str], list[list[str]]]:
    names = list(dict.fromkeys(u for group in groups for u in unwinder_names(group)))
    header = ["build", "stops", "no_info stops", *(f"{u} failed" for u in names),
              "v2 epilogue-only"]
    body = []
    for group in groups:
        index = index_rows(group["results"])
        no_info = index.get(("v2", "no_info", ALL), {"stops": 0})["stops"]
        cells = [
            f"{rate(index[(u, ALL, ALL)])[:-1]}; {group['failed_in_frames_without_cfi'][u]} no CFI)"
            if (u, ALL, ALL) in index else "n/a"
            for u in names
        ]
        body.append([group["build"], str(group["stops"]), str(no_info), *cells,
                     f"{group['v2_epilogue_only_failure_percent']:.2f}%"])
    return header, body


def linux_cells(groups: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The Linux corpus: per program, each unwinder's failed stops (wrong,
    or refused in the program's own code) over all stops, the stops whose
    walk stopped honestly in a library without its tables, and the failed
    stops of the program's own code."""
    names = list(dict.fromkeys(u for group in groups for u in unwinder_names(group)))
    header = ["program", "stops", "self-check", *(f"{u}: failed / stopped / own failed" for u in names)]
    body = []
    for group in groups:
        index = index_rows(group["results"])
        cells = []
        for unwinder in names:
            whole, own = index.get((unwinder, ALL, ALL)), index.get((unwinder, "own", ALL))
            cells.append("n/a" if whole is None else
                         f"{rate(whole)} / {whole['stopped']} / {rate(own) if own else '-'}")
        every = f" (1 in {group['every']})" if group.get("every", 1) > 1 else ""  # run --linux-every
        check = "ok" if group["self_check"] == "ok" else "FAIL"  # why: the not-verified lines
        body.append([group["build"], f"{group['stops']}{every}", check, *cells])
    return header, body


def failed_and_stopped(row: dict) -> str:
    """A process's cell: its failed stops, then those stopped honestly in a library."""
    return f"{rate(row)} / {row['stopped']}"


def group_cells(group: dict, cell: Callable[[dict], str] = rate) -> tuple[list[str], list[list[str]]]:
    """One build's table: every unwinder side by side per category and
    position (rows without stops left out), each `cell(row)`."""
    index = index_rows(group["results"])
    names = unwinder_names(group)
    header = ["category", "position", "stops", *names]
    body = []
    for category, position in summary_lines(group):
        row = index[(names[0], category, position)]
        if row["stops"]:
            body.append([category, position, str(row["stops"]),
                         *(cell(index[(u, category, position)]) for u in names)])
    return header, body


def chain_cells(data: dict) -> tuple[list[str], list[list[str]]]:
    """Per corpus (generated, compiled, Linux), each method of `chain`'s
    frames as LUL counted them for Firefox: right of given, each walk
    followed to its first wrong frame."""
    corpora = [("generated", [data.get("chain_methods", {})]),
               ("compiled", [g.get("chain_methods", {}) for g in data.get("elf", [])]),
               ("Linux", [g.get("chain_methods", {}) for g in data.get("linux", [])])]
    body = []
    for corpus, parts in corpora:
        counts = [part["chain"] for part in parts if "chain" in part]
        if counts:
            body.append([corpus, *(_right_of([c[m] for c in counts if m in c]) for m in CHAIN)])
    return ["corpus", *(f"`{m}`" for m in CHAIN)], body


def _right_of(counts: list[dict[str, int]]) -> str:
    return f"{sum(c['right'] for c in counts):,} of {sum(c['frames'] for c in counts):,}"


def past_first_frame_cells(tables: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per unwinder, summed over `tables` (report.data.past_first_frame): the
    walks that invented a caller past a thread's first frame, over those
    that matched every frame up to it, in the main thread and the others."""
    names = list(dict.fromkeys(u for table in tables for u in table))
    header = ["unwinder", "main thread: invented / matched", "spawned threads: invented / matched"]
    body = []
    for unwinder in names:
        cells = []
        for thread in ("main_thread", "spawned_threads"):
            matched = sum(t[unwinder][thread]["matched"] for t in tables if unwinder in t)
            invented = sum(t[unwinder][thread]["invented"] for t in tables if unwinder in t)
            cells.append(f"{100 * invented / matched:.2f}% ({invented:,} / {matched:,})" if matched else "-")
        body.append([unwinder, *cells])
    return header, body


def thread_cells(threads: dict) -> tuple[list[str], list[list[str]]]:
    """A process's threads (report.data.thread_table): each one's stops, and
    the failed share of them per unwinder."""
    names = list(next(iter(threads.values()))["failed"])
    header = ["thread", "stops", *names]
    body = [[label, f"{row['stops']:,}", *(f"{100 * row['failed'][u] / row['stops']:.2f}%" if row["stops"] else "-"
                                           for u in names)] for label, row in threads.items()]
    return header, body


def right_cells(rows: dict, label: str) -> tuple[list[str], list[list[str]]]:
    """Rows of report.data._split_rows (a process's modules or threads):
    each one's stops, and per unwinder the share of them walked right to
    the bottom (every frame matched, to the thread's first)."""
    names = list(next(iter(rows.values()))["right"])
    header = [label, "stops", *names]
    body = [[name, f"{row['stops']:,}", *(f"{100 * row['right'][u] / row['stops']:.2f}%" if row["stops"] else "-"
                                          for u in names)] for name, row in rows.items()]
    return header, body
