"""Per-category results: aggregation, JSON (schema 1), Markdown, terminal
table, chart, and the baseline check. Everything here is deterministic: the
same results give the same bytes."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from harness import __version__
from harness.program import POSITIONS, TRAITS
from harness.verify import Failure, ProgramResult

ALL = "all"
SCHEMA = 1
SAMPLES_PER_UNWINDER = 10


def categories(counts: Counter) -> list[str]:
    seen = {trait for (_, traits, _, _) in counts for trait in traits}
    extra = sorted(seen - set(TRAITS))  # e.g. no_info for code without CFI
    return [ALL, *TRAITS, *extra]


def result_rows(results: Sequence[ProgramResult], unwinders: Sequence[str]) -> list[dict]:
    """One row per unwinder x category x position (ARCHITECTURE.md schema)."""
    counts: Counter = Counter()
    for result in results:
        counts.update(result.counts)
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


def wrong_registers(results: Sequence[ProgramResult]) -> dict[str, dict[str, int]]:
    """unwinder -> register -> failing stops; d8-d15 are reported here apart
    from the core registers."""
    table: dict[str, Counter] = {}
    for result in results:
        for failure in result.failures:
            if failure.register:
                table.setdefault(failure.unwinder, Counter())[failure.register] += 1
    return {u: dict(sorted(c.items())) for u, c in sorted(table.items())}


def _sample(failure: Failure, program: str) -> dict:
    return {
        "program": program, "pc": f"{failure.pc:#x}", "function": failure.function,
        "position": failure.position, "kind": failure.kind, "frame": failure.frame,
        "culprit": failure.culprit, "detail": failure.detail,
    }


def report_data(results: Sequence[ProgramResult], unwinders: Sequence[str], seed: int | None,
                source: str, sizes: dict | None = None) -> dict:
    samples: dict[str, list[dict]] = {u: [] for u in unwinders}
    for result in results:
        for failure in result.failures:
            bucket = samples[failure.unwinder]
            if len(bucket) < SAMPLES_PER_UNWINDER:
                bucket.append(_sample(failure, result.program))
    return {
        "schema": SCHEMA,
        "tool": "unwind-harness",
        "version": __version__,
        "seed": seed,
        "input": source,
        "results": result_rows(results, unwinders),
        "programs": [
            {"name": r.program, "stops": r.stops, "result": r.result, "expected": r.expected,
             "self_check": "ok" if r.self_check_ok else (r.fault or "wrong result")}
            for r in results
        ],
        "wrong_registers": wrong_registers(results),
        "failure_samples": samples,
        "sizes": sizes,
    }


def elf_group(result: ProgramResult, unwinders: Sequence[str], label: dict, problems: dict[str, int],
              with_cfi: set[str]) -> dict:
    """One compiled ELF's section of the report: the same rows as the main
    report, the share of stops v2 fails only because they are epilogues, and
    per unwinder the failures in frames of code without CFI (`with_cfi`
    names the functions that have it)."""
    rows = result_rows([result], unwinders)
    without_cfi = Counter(
        f.unwinder for f in result.failures if f.function not in with_cfi or f.culprit not in with_cfi
    )
    index = _index(rows)
    v2_epilogue = index.get(("v2", ALL, "epilogue"), {"failed": 0})["failed"]
    return {
        **label,
        "stops": result.stops,
        "self_check": "ok" if result.self_check_ok else (result.fault or "wrong result"),
        "v2_epilogue_only_failure_percent": round(100 * v2_epilogue / result.stops, 2) if result.stops else 0,
        "cfi_not_expressed": problems,
        "failed_in_frames_without_cfi": {u: without_cfi[u] for u in unwinders},
        "results": rows,
        "failure_samples": report_data([result], unwinders, None, label["input"])["failure_samples"],
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
               "call stack (pc, sp, r4-r11, d8-d15), over stops in that category and position.")
    out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
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
    return "\n".join(out) + "\n"


def size_cells(sizes: dict) -> list[list[str]]:
    increase = sizes["increase_over_drop_percent"]
    return [
        [policy, f"{size:,}", f"{size / sizes['functions']:.2f}", f"{increase[policy]:+.2f}%" if policy in increase else "-"]
        for policy, size in sizes["bytes"].items()
    ]


SIZE_HEADER = ["epilogue policy", "table bytes", "bytes/function", "vs drop"]


def size_lines(sizes: dict | None) -> list[str]:
    if not sizes:
        return []
    out = ["", f"## v2 table size per epilogue policy ({sizes['layout']} layout, "
               f"{sizes['functions']:,} functions)", "",
           "| " + " | ".join(SIZE_HEADER) + " |", "|---|---|---|---|"]
    return out + ["| " + " | ".join(row) + " |" for row in size_cells(sizes)]


ELF_UNWINDERS = ("v2", "v2+epilogue", "v2-synth", "v2-gcc", "dwarf")


def elf_cells(groups: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["build", "stops", "no_info stops", *(f"{u} failed" for u in ELF_UNWINDERS),
              "v2 epilogue-only"]
    body = []
    for group in groups:
        index = _index(group["results"])
        no_info = index.get(("v2", "no_info", ALL), {"stops": 0})["stops"]
        cells = [
            f"{_rate(index[(u, ALL, ALL)])[:-1]}; {group['failed_in_frames_without_cfi'][u]} no CFI)"
            if (u, ALL, ALL) in index else "n/a"
            for u in ELF_UNWINDERS
        ]
        body.append([group["build"], str(group["stops"]), str(no_info), *cells,
                     f"{group['v2_epilogue_only_failure_percent']:.2f}%"])
    return header, body


def elf_lines(groups: list[dict]) -> list[str]:
    if not groups:
        return []
    header, body = elf_cells(groups)
    out = ["", "## Compiled programs (corpus/elf)", "",
           "Failed stops per unwinder over all stops of each build, and how many of those failed in "
           "a frame of code without CFI (libgcc's division wrappers); `n/a`: the compiler describes no "
           "epilogues, so the reference unwinders do not apply. `v2 epilogue-only`: stops v2 fails only "
           "because they are in an epilogue, over all stops (the design measured 1.5% on Chrome).", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    for group in groups:
        index = _index(group["results"])
        names = list(dict.fromkeys(r["unwinder"] for r in group["results"]))
        out += ["", f"### {group['build']} ({group['compiler']}, {' '.join(group['flags'])})", "",
                "| category | position | stops | " + " | ".join(names) + " |",
                "|" + "---|" * (3 + len(names))]
        for category, position in summary_lines(group):
            row = index[(names[0], category, position)]
            if row["stops"]:
                out.append(f"| {category} | {position} | {row['stops']} | "
                           + " | ".join(_rate(index[(u, category, position)]) for u in names) + " |")
        if group["cfi_not_expressed"]:
            out += ["", "CFI not expressed: " + ", ".join(f"{m} ({n})" for m, n in group["cfi_not_expressed"].items()) + "."]
    return out


def print_table(data: dict, console) -> None:
    from rich.table import Table

    header, body = table_cells(data)
    table = Table(title=f"Unwind failures per category ({data['input']}, seed {data['seed']})")
    for index, name in enumerate(header):
        table.add_column(name, justify="left" if index < 2 else "right")
    for row in body:
        table.add_row(*row)
    console.print(table)
    if data.get("sizes"):
        sizes = Table(title="v2 table bytes per epilogue policy")
        for index, name in enumerate(SIZE_HEADER):
            sizes.add_column(name, justify="left" if index == 0 else "right")
        for row in size_cells(data["sizes"]):
            sizes.add_row(*row)
        console.print(sizes)
    if data.get("elf"):
        header, body = elf_cells(data["elf"])
        builds = Table(title="Compiled programs (corpus/elf): failed stops over all stops")
        for index, name in enumerate(header):
            builds.add_column(name, justify="left" if index == 0 else "right")
        for row in body:
            builds.add_row(*row)
        console.print(builds)


def chart(data: dict, path: Path) -> None:
    """Grouped bars: failure rate per category for every unwinder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    index = _index(data["results"])
    names = unwinder_names(data)
    lines = summary_lines(data)
    labels = [c if p == ALL else p for c, p in lines]
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(lines)), 4.5))
    width = 0.8 / len(names)
    for i, unwinder in enumerate(names):
        rates = []
        for category, position in lines:
            row = index[(unwinder, category, position)]
            rates.append(100 * row["failed"] / row["stops"] if row["stops"] else 0)
        ax.bar([x + i * width for x in range(len(lines))], rates, width, label=unwinder)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(lines))])
    ax.set_xticklabels(labels, rotation=40, ha="right")
    ax.set_ylabel("failed stops (%)")
    ax.set_title(f"Unwind failure rate per category ({data['input']})")
    ax.legend()
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
