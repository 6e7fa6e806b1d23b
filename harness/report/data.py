"""Per-category results: aggregation, JSON (schema 1), Markdown, terminal
table, chart, and the baseline check. Everything here is deterministic: the
same results give the same bytes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from harness import __version__
from harness.classify import POSITIONS, TRAITS, in_order
from harness.report.sizes import FORMATS
from harness.report.summary import Culprits, ProgramSummary, combine

ALL = "all"
SCHEMA = 1


def categories(counts: Counter) -> list[str]:
    seen = {trait for (_, traits, _, _) in counts for trait in traits}
    extra = sorted(seen - set(TRAITS))  # e.g. no_info for code without CFI
    return [ALL, *TRAITS, *extra]


def result_rows(summaries: Sequence[ProgramSummary], unwinders: Sequence[str]) -> list[dict]:
    """One row per unwinder x category x position (ARCHITECTURE.md schema)."""
    counts: Counter = Counter()
    for summary in summaries:
        counts.update(summary.counts)
    rows = []
    for unwinder in unwinders:
        for category in categories(counts):
            for position in (*POSITIONS, ALL):
                stops, failed, kinds = 0, 0, Counter()
                for (name, traits, where, kind), n in counts.items():
                    if name != unwinder or (category != ALL and category not in traits):
                        continue
                    if position != ALL and where != position:
                        continue
                    stops += n
                    if kind is not None:
                        failed += n
                        kinds[kind] += n
                rows.append({
                    "unwinder": unwinder, "category": category, "position": position,
                    "stops": stops, "failed": failed,
                    "failure_kinds": dict(sorted(kinds.items())),
                })
    return rows


def culprit_table(summary: ProgramSummary, unwinders: Sequence[str]) -> dict[str, dict]:
    """Per unwinder, where its failing stops first went wrong: in the
    innermost frame or deeper, and the traits of the function that frame is
    in (a stop deep in a healthy chain fails for one bad caller)."""
    table = {}
    for unwinder in unwinders:
        blame = summary.culprits.get(unwinder, Culprits())
        table[unwinder] = {"innermost": blame.innermost, "deeper": blame.deeper,
                           "traits": {t: blame.traits[t] for t in in_order(blame.traits) if blame.traits[t]}}
    return table


def report_data(summaries: Sequence[ProgramSummary], unwinders: Sequence[str], seed: int | None,
                source: str, sizes: dict | None = None) -> dict:
    from harness.unwind import RESTORES  # what each unwinder is checked on
    whole = combine(summaries)
    return {
        "schema": SCHEMA,
        "tool": "unwind-harness",
        "version": __version__,
        "seed": seed,
        "input": source,
        "results": result_rows(summaries, unwinders),
        "checked": {u: RESTORES[u].describe() for u in unwinders},
        "programs": [
            {"name": s.program, "stops": s.stops, "result": s.result, "expected": s.expected,
             "self_check": s.self_check}
            for s in summaries
        ],
        # unwinder -> register -> failing stops (d8-d15 apart from the core registers)
        "wrong_registers": {u: dict(sorted(c.items())) for u, c in sorted(whole.wrong_registers.items())},
        "culprits": culprit_table(whole, unwinders),
        "failure_samples": {u: whole.samples.get(u, []) for u in unwinders},
        "sizes": sizes,
    }


def elf_group(summary: ProgramSummary, unwinders: Sequence[str], label: dict, problems: dict[str, int]) -> dict:
    """One compiled ELF's section of the report: the same rows as the main
    report, the share of stops v2 fails only because they are epilogues, and
    per unwinder the failures in frames of code without CFI."""
    rows = result_rows([summary], unwinders)
    index = _index(rows)
    v2_epilogue = index.get(("v2", ALL, "epilogue"), {"failed": 0})["failed"]
    return {
        **label,
        "stops": summary.stops,
        "self_check": summary.self_check,
        "v2_epilogue_only_failure_percent": round(100 * v2_epilogue / summary.stops, 2) if summary.stops else 0,
        "cfi_not_expressed": problems,
        "failed_in_frames_without_cfi": {u: summary.without_cfi[u] for u in unwinders},
        "results": rows,
        "culprits": culprit_table(summary, unwinders),
        "failure_samples": {u: summary.samples.get(u, []) for u in unwinders},
    }


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


# ------------------------------------------------------------------ views


def _index(rows: Iterable[dict]) -> dict[tuple[str, str, str], dict]:
    return {(r["unwinder"], r["category"], r["position"]): r for r in rows}


def _rate(row: dict) -> str:
    if not row["stops"]:
        return "-"
    return f"{100 * row['failed'] / row['stops']:.2f}% ({row['failed']})"


def summary_lines(data: dict) -> list[tuple[str, str]]:
    """(category, position) pairs of the main table: positions, then traits."""
    categories_seen = dict.fromkeys(r["category"] for r in data["results"])
    lines = [(ALL, p) for p in (ALL, *POSITIONS)]
    return lines + [(c, ALL) for c in categories_seen if c != ALL]


def unwinder_names(data: dict) -> list[str]:
    return list(dict.fromkeys(r["unwinder"] for r in data["results"]))


def table_cells(data: dict) -> tuple[list[str], list[list[str]]]:
    index = _index(data["results"])
    names = unwinder_names(data)
    header = ["category", "position", "stops", *(f"{u} failed" for u in names)]
    body = []
    for category, position in summary_lines(data):
        first = index[(names[0], category, position)]
        body.append([category, position, str(first["stops"]),
                     *(_rate(index[(u, category, position)]) for u in names)])
    return header, body


def markdown(data: dict, title: str) -> str:
    header, body = table_cells(data)
    out = [f"# {title}", ""]
    out.append(f"unwind-harness {data['version']}, input: {data['input']}, seed: {data['seed']}. "
               "Failure rate = stops where the unwinder did not reproduce every frame of the shadow "
               "call stack (pc, sp and the registers it restores, listed under the table), over stops "
               "in that category and position; the category is the innermost function's.")
    out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    out += ["", "Checked in every frame: " + "; ".join(f"`{u}` {c}" for u, c in data["checked"].items())
            + ". v1 and frame-pointer walking restore no other callee-saved register by design, so "
            "they are judged on the stack trace (and, for frame-pointer walking, the chain register)."]
    index = _index(data["results"])
    for unwinder in unwinder_names(data):
        out += ["", f"## {unwinder}: failure rate by trait and position", ""]
        out += ["| category | " + " | ".join(POSITIONS) + " |", "|---|" + "---|" * len(POSITIONS)]
        for category in dict.fromkeys(r["category"] for r in data["results"]):
            cells = [_rate(index[(unwinder, category, p)]) for p in POSITIONS]
            out.append(f"| {category} | " + " | ".join(cells) + " |")
        kinds = index[(unwinder, ALL, ALL)]["failure_kinds"]
        if kinds:
            out += ["", "Failure kinds: " + ", ".join(f"{k} {n}" for k, n in kinds.items()) + "."]
        blame = data["culprits"][unwinder]
        if blame["innermost"] or blame["deeper"]:
            out.append(f"First wrong frame: the innermost at {blame['innermost']} stops, a caller at "
                       f"{blame['deeper']}; it was in a function that is "
                       + ", ".join(f"{t} {n}" for t, n in blame["traits"].items()) + ".")
        registers = data["wrong_registers"].get(unwinder)
        if registers:
            out.append("Wrong registers: " + ", ".join(f"{k} {n}" for k, n in registers.items()) + ".")
        samples = data["failure_samples"].get(unwinder)
        if samples:
            out += ["", "First failing stops:", ""]
            out += [f"- `{s['program']}` pc {s['pc']} in {s['function']} ({s['position']}): "
                    f"{s['kind']} at frame {s['frame']} ({s['culprit']}): {s['detail']}" for s in samples]
    out += size_lines(data.get("sizes"))
    out += elf_lines(data.get("elf", []))
    programs = data["programs"]
    out += ["", "## Programs", "", "| program | stops | self-check |", "|---|---|---|"]
    out += [f"| {p['name']} | {p['stops']} | {p['self_check']} |" for p in programs]
    problems = not_verified(data)
    if problems:
        out += ["", "## Not verified", "", "Every count above covers only the stops before these ended:", ""]
        out += [f"- {line}" for line in problems]
    return "\n".join(out) + "\n"


def not_verified(data: dict) -> list[str]:
    """One line per program whose run did not complete as it should: where
    it stopped and why, or the wrong result it computed."""
    runs = [(p["name"], p["stops"], p["self_check"]) for p in data["programs"]]
    runs += [(g["input"], g["stops"], g["self_check"]) for g in data.get("elf", [])]
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
    header = ["input", "functions", "addresses", *FORMATS]
    totals, ratios = [], []
    for row in sizes["rows"]:
        first = [row["input"], f"{row['functions']:,}", f"{row['addresses']:,}"]
        values = [row["bytes"][name] for name in FORMATS]
        refused = row.get("v1_refused")
        totals.append(first + [_size(v) + (f" ({refused} refused)" if name == "v1" and refused else "")
                               for name, v in zip(FORMATS, values)])
        ratios.append(first + ["n/a" if v is None else
                               f"{v / row['functions']:.2f} / {v / row['addresses']:.2f}"
                               for v in values])
    return header, totals, ratios


def size_lines(sizes: dict | None) -> list[str]:
    if not sizes:
        return []
    header, totals, ratios = size_cells(sizes)
    rule = "|" + "---|" * len(header)
    out = ["", f"## Table sizes (bytes; v2 in the {sizes['layout']} layout)", "",
           "The compiler's own sections as linked, and the tables built here from the same CFI. "
           "v1 cannot describe some functions at all (`refused`: CFA through r7, frames over 64 KiB, "
           "code over 64 KiB); they cost it nothing and are not unwound. `addresses`: v2 address entries "
           "under the `drop` policy. `n/a`: not emitted (generated code has no DWARF sections) "
           "or not published.", "",
           "| " + " | ".join(header) + " |", rule]
    out += ["| " + " | ".join(row) + " |" for row in totals]
    out += ["", "Bytes per function / per address:", "", "| " + " | ".join(header) + " |", rule]
    out += ["| " + " | ".join(row) + " |" for row in ratios]
    return out


def elf_cells(groups: list[dict]) -> tuple[list[str], list[list[str]]]:
    names = list(dict.fromkeys(u for group in groups for u in unwinder_names(group)))
    header = ["build", "stops", "no_info stops", *(f"{u} failed" for u in names),
              "v2 epilogue-only"]
    body = []
    for group in groups:
        index = _index(group["results"])
        no_info = index.get(("v2", "no_info", ALL), {"stops": 0})["stops"]
        cells = [
            f"{_rate(index[(u, ALL, ALL)])[:-1]}; {group['failed_in_frames_without_cfi'][u]} no CFI)"
            if (u, ALL, ALL) in index else "n/a"
            for u in names
        ]
        body.append([group["build"], str(group["stops"]), str(no_info), *cells,
                     f"{group['v2_epilogue_only_failure_percent']:.2f}%"])
    return header, body


def group_cells(group: dict) -> tuple[list[str], list[list[str]]]:
    """One build's table: every unwinder side by side per category and
    position (rows without stops left out)."""
    index = _index(group["results"])
    names = unwinder_names(group)
    header = ["category", "position", "stops", *names]
    body = []
    for category, position in summary_lines(group):
        row = index[(names[0], category, position)]
        if row["stops"]:
            body.append([category, position, str(row["stops"]),
                         *(_rate(index[(u, category, position)]) for u in names)])
    return header, body


def elf_lines(groups: list[dict]) -> list[str]:
    if not groups:
        return []
    header, body = elf_cells(groups)
    out = ["", "## Compiled programs (corpus/elf)", "",
           "Failed stops per unwinder over all stops of each build, and how many of those failed in "
           "a frame of code without CFI (libgcc's division wrappers); `n/a`: the compiler describes no "
           "epilogues, so `v2-gcc` would only repeat `v2`. `v2 epilogue-only`: stops v2 fails only "
           "because they are in an epilogue, over all stops (the design measured 1.5% on Chrome).", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    for group in groups:
        header, body = group_cells(group)
        out += ["", f"### {group['build']} ({group['compiler']}, {' '.join(group['flags'])})", "",
                "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(row) + " |" for row in body]
        if group["cfi_not_expressed"]:
            out += ["", "CFI not expressed: " + ", ".join(f"{m} ({n})" for m, n in group["cfi_not_expressed"].items()) + "."]
    return out


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


def chart(data: dict, path: Path) -> None:
    """Grouped bars: failure rate per category for every unwinder, and per
    compiled build when the report has them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = unwinder_names(data)
    lines = summary_lines(data)
    groups = data.get("elf", [])
    fig, axes = plt.subplots(2 if groups else 1, 1, squeeze=False,
                             figsize=(max(10, 0.9 * len(lines)), 9 if groups else 4.5))
    index = _index(data["results"])
    _bars(axes[0][0], names, [(index, c, p) for c, p in lines],
          [c if p == ALL else p for c, p in lines], f"Unwind failure rate per category ({data['input']})")
    axes[0][0].legend(ncol=4, fontsize="small")
    if groups:
        _bars(axes[1][0], names, [(_index(g["results"]), ALL, ALL) for g in groups],
              [g["build"] for g in groups], "Compiled programs (corpus/elf): all stops")
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


# ---------------------------------------------------------------- baseline


def regressions(latest: dict, baseline: dict) -> list[str]:
    """Rows whose failure count rose above the baseline's (absent rows count 0),
    in the generated corpus and in each compiled build."""
    sections = [("", latest["results"], baseline["results"])]
    old_groups = {g["build"]: g["results"] for g in baseline.get("elf", [])}
    sections += [(f"{g['build']}: ", g["results"], old_groups.get(g["build"], [])) for g in latest.get("elf", [])]
    risen = []
    for prefix, rows, old_rows in sections:
        before = _index(old_rows)
        for key, row in _index(rows).items():
            old = before.get(key, {"failed": 0})["failed"]
            if row["failed"] > old:
                unwinder, category, position = key
                risen.append(f"{prefix}{unwinder} / {category} / {position}: {old} -> {row['failed']} failed stops")
    return risen
