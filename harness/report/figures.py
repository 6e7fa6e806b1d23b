"""The measured figures the README shows, rendered from the files that
measured them (reports/latest.json from `run`, reports/bench.json from
`bench --json`, reports/compare.json from `make compare`), so that no
figure in the README is typed by hand; those of docs/ too (DOC_BLOCKS).

Each block stands between `<!-- figures: NAME -->` and
`<!-- end figures -->`. `python -m harness.report.figures` rewrites them
(`make readme`); with `--check` it only says whether they are current, as
tests/test_readme.py does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable

from harness.classify import POSITIONS, SIGNAL_HANDLER, SPAWNED_THREAD, THROUGH_SIGNAL_FRAME
from harness.report import bench_doc
from harness.report.data import ALL, index_rows
from harness.report.tables import chain_cells, table_lines
from harness.unwind.registry import Strategy, strategies

ROOT = Path(__file__).resolve().parent.parent.parent
# The reports the figures come from, by name, in reports/.
REPORTS = {"latest": "latest.json", "bench": "bench.json", "compare": "compare.json"}
BLOCK = re.compile(r"(<!-- figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end figures -->)", re.S)


def _count(row: dict) -> str:
    return f"{row['failed']:,} of {row['stops']:,}"


def _percent(row: dict) -> str:
    return f"{100 * row['failed'] / row['stops']:.2f}%" if row["stops"] else "-"


def _unwinders(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["unwinder"] for r in results))


def generated(reports: dict) -> list[str]:
    """Failed stops per unwinder and position over the generated corpus."""
    report = reports["latest"]
    index = index_rows(report["results"])
    lines = ["| unwinder | " + " | ".join(POSITIONS) + " | all stops |", "|---|" + "---|" * (len(POSITIONS) + 1)]
    for name in _unwinders(report["results"]):
        cells = [_count(index[(name, ALL, p)]) for p in POSITIONS]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {_percent(index[(name, ALL, ALL)])} |")
    return lines


def compiled(reports: dict) -> list[str]:
    """Failed stops over all stops of each compiled build, per unwinder."""
    groups = reports["latest"].get("elf", [])
    names = list(dict.fromkeys(u for g in groups for u in _unwinders(g["results"])))
    lines = ["| build | stops | " + " | ".join(f"`{u}`" for u in names) + " | `v2` epilogue-only |",
             "|---|---|" + "---|" * (len(names) + 1)]
    for group in groups:
        index = index_rows(group["results"])
        cells = [_percent(index[(u, ALL, ALL)]) if (u, ALL, ALL) in index else "n/a" for u in names]
        lines.append(f"| {group['build']} | {group['stops']:,} | " + " | ".join(cells)
                     + f" | {group['v2_epilogue_only_failure_percent']:.2f}% |")
    return lines


def sizes(reports: dict) -> list[str]:
    """Bytes per function of each format, for the same code."""
    rows = reports["latest"]["sizes"]["rows"]
    formats = list(rows[0]["bytes"])
    lines = ["| input | functions | " + " | ".join(formats) + " |", "|---|---|" + "---|" * len(formats)]
    for row in rows:
        cells = ["n/a" if row["bytes"][f] is None else f"{row['bytes'][f] / row['functions']:.2f}" for f in formats]
        lines.append(f"| {row['input']} | {row['functions']:,} | " + " | ".join(cells) + " |")
    return lines


def speed(reports: dict) -> list[str]:
    """The bench's main figures (rates and ratios of one run)."""
    bench = reports["bench"]
    o, e, r = bench["overhead"], bench["encoder"], bench["reader"]
    step_us = bench["step_us"]
    cheapest, dearest = min(step_us, key=step_us.get), max(step_us, key=step_us.get)
    steps = (f"{step_us[cheapest]:.1f} (`{cheapest}`) to {step_us[dearest]:.1f} (`{dearest}`); "
             f"`v2` {step_us['v2']:.1f}, `dwarf` {step_us['dwarf']:.1f} (each unwinder's: docs/bench.md)")
    figures = [
        ("verified stops per second, all unwinders", f"{o['verified_stops_per_second']:,.0f}"),
        ("verifier overhead ratio (against a no-op Python hook; target 0.30)", f"{o['verifier_overhead_ratio']:.3f}"),
        ("the same against emulation with no hook", f"{o['overhead_ratio_against_no_hook']:.3f}"),
        ("Python step, microseconds a frame", steps),
        (f"v2 encoder: {e['functions']:,} functions", f"{e['encode_seconds']:.1f} s, {e['encode_peak_mb']:,.0f} MB peak"),
        ("v2 blob at that scale", f"{e['bytes_per_function']:.2f} bytes a function, "
                                  f"{e['bytes_per_address']:.2f} an address (Chrome: "
                                  f"{bench['chrome']['bytes_per_function']:.2f}, "
                                  f"{bench['chrome']['bytes_per_address']:.2f})"),
        ("v2 reader lookups per second", f"{r['lookups_per_second']:,.0f}"),
    ]
    sampling = bench.get("sampling")
    if sampling:
        figures += [
            (f"bare emulation (no hook), {sampling['program']}",
             f"{sampling['bare_instructions_per_s']:,.0f} instructions/s"),
            ("ground truth, block hooks / bare (target 0.25)", f"{sampling['ground_truth_over_bare']:.3f}"),
            ("ground truth, per-instruction hook / bare", f"{sampling['ground_truth_per_instruction_over_bare']:.3f}"),
            (f"sampled, every {sampling['every']}, {sampling['unwinders']} unwinders / bare (target 0.20)",
             f"{sampling['sampled_over_bare']:.3f}"),
        ]
    machine = bench.get("machine")
    lines = ["| figure | value |", "|---|---|"] + [f"| {name} | {value} |" for name, value in figures]
    return lines + ([f"\nMeasured on {machine['date']}, {machine['cores']} cores."] if machine else [])


CHROME_ROWS = ((ALL, ALL), (ALL, "prologue"), (ALL, "body"), (ALL, "epilogue"), ("frame_pointer", ALL))


def chrome(reports: dict) -> list[str]:
    """Failed stops of `v2` and of `v2-chrome` (Chrome's builder and
    runtime) per corpus and category, all builds of a corpus together."""
    report = reports["latest"]
    corpora = (("generated", [report["results"]]), ("compiled", [g["results"] for g in report.get("elf", [])]),
               ("Linux", [g["results"] for g in report.get("linux", [])]))
    lines = ["| corpus | category | stops | `v2` | `v2-chrome` |", "|---|---|---|---|---|"]
    for corpus, groups in corpora:
        indexes = [index_rows(results) for results in groups]
        for category, position in CHROME_ROWS:
            rows = {u: [i[(u, category, position)] for i in indexes if (u, category, position) in i]
                    for u in ("v2", "v2-chrome")}
            if not rows["v2"] or not rows["v2-chrome"]:
                continue
            stops = sum(r["stops"] for r in rows["v2"])
            label = position if category == ALL else category
            cells = [f"{sum(r['failed'] for r in rows[u]):,} ({_percent_of(rows[u])})" for u in ("v2", "v2-chrome")]
            lines.append(f"| {corpus} | {label} | {stops:,} | " + " | ".join(cells) + " |")
    return lines


def _compared() -> tuple[Strategy, ...]:
    """The ways of unwinding the README compares (harness.unwind.registry)."""
    return tuple(s for s in strategies() if s.compared)


def _comparator_cells(results: list[list[dict]], sized: list[dict]) -> list[str]:
    """Each compared method's failed stops over all stops of `results` (the
    result rows of some runs; n/a where none verified it) and, where
    `sized` gives their table sizes, its bytes a function."""
    indexes = [index_rows(rows) for rows in results]
    functions = sum(row["functions"] for row in sized)
    cells = []
    for compared in _compared():
        name = compared.name
        rows = [index[(name, ALL, ALL)] for index in indexes if (name, ALL, ALL) in index]
        cell = _percent_of(rows) if rows else "n/a"
        size = [row["bytes"].get(compared.size_column or "") for row in sized]
        if sized and functions and compared.size_column and None not in size:
            cell += f", {sum(size) / functions:.1f} B/fn"
        cells.append(cell)
    return cells


def _comparator_header(what: str) -> list[str]:
    compared = _compared()
    return [f"| {what} | " + " | ".join(f"`{u.name}`" for u in compared) + " |", "|---|" + "---|" * len(compared)]


def comparators(reports: dict) -> list[str]:
    """Per corpus, each system of the reference reading beside v2: its
    failed stops over all stops, and for the generated and compiled corpora
    its table bytes a function."""
    report = reports["latest"]
    size_rows = report["sizes"]["rows"]
    corpora = (("generated", [report["results"]], size_rows[:1]),
               ("compiled", [g["results"] for g in report.get("elf", [])], size_rows[1:-1]),
               ("Linux", [g["results"] for g in report.get("linux", [])], []))
    return _comparator_header("corpus") + [f"| {corpus} | " + " | ".join(_comparator_cells(results, sized)) + " |"
                                           for corpus, results, sized in corpora if results]


def comparators_by_build(reports: dict) -> list[str]:
    """The same per compiled build, and per Linux program without bytes
    (its executable's sizes count only the functions with CFI, while EXIDX
    and call sites cover all its code: a static build's is all of libc)."""
    report = reports["latest"]
    sized = {row["input"]: [row] for row in report["sizes"]["rows"]}
    groups = report.get("elf", []) + report.get("linux", [])
    return _comparator_header("build") + [
        f"| {g['build']} | " + " | ".join(_comparator_cells([g["results"]], sized.get(g["input"], []))) + " |"
        for g in groups]


def _percent_of(rows: list[dict]) -> str:
    return _percent({"failed": sum(r["failed"] for r in rows), "stops": sum(r["stops"] for r in rows)})


COMPARE_HEADER = ["| {what} | instructions compared | agree | disagree | stops run there | compiler right | "
                  "from code right |", "|---|---|---|---|---|---|---|"]


def _compare_cells(rows: list[dict]) -> str:
    total = lambda key: sum(row[key] or 0 for row in rows)  # noqa: E731
    return " | ".join(f"{total(key):,}" for key in ("compared", "agree", "disagree", "stops", "compiler_right",
                                                      "synthesized_right"))


def compare_corpora(reports: dict) -> list[str]:
    """`make compare`, per corpus: the rows from code beside the compiler's."""
    rows = reports["compare"]["rows"]
    lines = [COMPARE_HEADER[0].format(what="corpus"), COMPARE_HEADER[1]]
    for corpus, label in (("compiled", "compiled (`corpus/elf`)"), ("linux", "Linux corpus, with CFI")):
        mine = [row for row in rows if row["corpus"] == corpus]
        lines.append(f"| {label}: {len(mine)} builds | {_compare_cells(mine)} |")
    return lines


def compare_builds(reports: dict) -> list[str]:
    """`make compare`, per build (docs/synthesis.md)."""
    lines = [COMPARE_HEADER[0].format(what="build"), COMPARE_HEADER[1]]
    for row in reports["compare"]["rows"]:
        fault = f" (run ended: {row['fault']})" if row["fault"] else ""
        lines.append(f"| {row['build']}{fault} | {_compare_cells([row])} |")
    return lines


def chain_methods(reports: dict) -> list[str]:
    """Per corpus, the frames each method of the chain gave and how many were right (`run`)."""
    header, body = chain_cells(reports["latest"])
    return table_lines(header) + ["| " + " | ".join(row) + " |" for row in body]


def signals(reports: dict) -> list[str]:
    """Per unwinder, failed stops over the stops of the Linux programs in a
    signal handler's own code, above a signal frame, and in a thread the
    process made (classify.STATE_TRAITS)."""
    groups = reports["latest"].get("linux", [])
    indexes = [index_rows(g["results"]) for g in groups]
    names = list(dict.fromkeys(u for g in groups for u in _unwinders(g["results"])))
    lines = ["| stops | " + " | ".join(f"`{u}`" for u in names) + " |", "|---|" + "---|" * len(names)]
    for trait in (SIGNAL_HANDLER, THROUGH_SIGNAL_FRAME, SPAWNED_THREAD):
        cells = [_percent_of([index[(u, trait, ALL)] for index in indexes if (u, trait, ALL) in index])
                 for u in names]
        lines.append(f"| `{trait}` | " + " | ".join(cells) + " |")
    tables = [g["past_first_frame"] for g in groups if "past_first_frame" in g]
    if tables:  # the walks that matched up to a thread's first frame, and then made a caller up (main / others)
        cells = [" / ".join(_invented_share(tables, u, thread) for thread in ("main_thread", "spawned_threads"))
                 for u in names]
        lines.append("| invented: main / spawned | " + " | ".join(cells) + " |")
    return lines


def _invented_share(tables: list[dict], unwinder: str, thread: str) -> str:
    matched = sum(t[unwinder][thread]["matched"] for t in tables if unwinder in t)
    invented = sum(t[unwinder][thread]["invented"] for t in tables if unwinder in t)
    return f"{100 * invented / matched:.0f}%" if matched else "-"


BLOCKS: dict[str, Callable[[dict], list[str]]] = {
    "generated": generated, "compiled": compiled, "sizes": sizes, "speed": speed, "compare": compare_corpora,
    "comparators": comparators, "signals": signals}
# The blocks of docs/, by document.
DOC_BLOCKS: dict[str, dict[str, Callable[[dict], list[str]]]] = {
    "bench.md": bench_doc.BLOCKS,
    "synthesis.md": {"compare-builds": compare_builds, "bench-synthesis": bench_doc.synthesis},
    "comparators.md": {"chrome": chrome, "chain-methods": chain_methods, "by-build": comparators_by_build}}


def rewritten(text: str, reports: dict, blocks: dict[str, Callable[[dict], list[str]]] = BLOCKS) -> str:
    """`text` with every figures block rendered anew from `reports` (latest,
    bench, compare: the parsed JSON files)."""
    def render(match: re.Match) -> str:
        body = "\n".join(blocks[match["name"]](reports)) + "\n"
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(render, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the figures are current")
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    parser.add_argument("--docs", default=str(ROOT / "docs"), help="the directory of the documents of DOC_BLOCKS")
    for name, default in REPORTS.items():
        parser.add_argument(f"--{name}", default=str(ROOT / "reports" / default))
    args = parser.parse_args(argv)
    reports = {name: json.loads(Path(getattr(args, name)).read_text()) for name in REPORTS}
    stale = []
    documents = [(Path(args.readme), BLOCKS)]
    documents += [(Path(args.docs) / name, blocks) for name, blocks in DOC_BLOCKS.items()]
    for path, blocks in documents:
        text = path.read_text()
        new = rewritten(text, reports, blocks)
        if args.check and new != text:
            stale.append(str(path))
        elif not args.check:
            path.write_text(new)
    if stale:
        print(f"{', '.join(stale)}: figures differ from the reports; run `make readme`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
