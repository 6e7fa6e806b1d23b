"""The measured figures the README shows, rendered from the files that
measured them (reports/latest.json from `run`, reports/bench.json from
`bench --json`), so that no figure in the README is typed by hand.

Each block in the README stands between `<!-- figures: NAME -->` and
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

from harness.classify import POSITIONS
from harness.report.data import ALL, index_rows

ROOT = Path(__file__).resolve().parent.parent.parent
BLOCK = re.compile(r"(<!-- figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end figures -->)", re.S)


def _count(row: dict) -> str:
    return f"{row['failed']:,} of {row['stops']:,}"


def _percent(row: dict) -> str:
    return f"{100 * row['failed'] / row['stops']:.2f}%" if row["stops"] else "-"


def _unwinders(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["unwinder"] for r in results))


def generated(report: dict, bench: dict) -> list[str]:
    """Failed stops per unwinder and position over the generated corpus."""
    index = index_rows(report["results"])
    lines = ["| unwinder | " + " | ".join(POSITIONS) + " | all stops |", "|---|" + "---|" * (len(POSITIONS) + 1)]
    for name in _unwinders(report["results"]):
        cells = [_count(index[(name, ALL, p)]) for p in POSITIONS]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {_percent(index[(name, ALL, ALL)])} |")
    return lines


def compiled(report: dict, bench: dict) -> list[str]:
    """Failed stops over all stops of each compiled build, per unwinder."""
    groups = report.get("elf", [])
    names = list(dict.fromkeys(u for g in groups for u in _unwinders(g["results"])))
    lines = ["| build | stops | " + " | ".join(f"`{u}`" for u in names) + " | `v2` epilogue-only |",
             "|---|---|" + "---|" * (len(names) + 1)]
    for group in groups:
        index = index_rows(group["results"])
        cells = [_percent(index[(u, ALL, ALL)]) if (u, ALL, ALL) in index else "n/a" for u in names]
        lines.append(f"| {group['build']} | {group['stops']:,} | " + " | ".join(cells)
                     + f" | {group['v2_epilogue_only_failure_percent']:.2f}% |")
    return lines


def sizes(report: dict, bench: dict) -> list[str]:
    """Bytes per function of each format, for the same code."""
    rows = report["sizes"]["rows"]
    formats = list(rows[0]["bytes"])
    lines = ["| input | functions | " + " | ".join(formats) + " |", "|---|---|" + "---|" * len(formats)]
    for row in rows:
        cells = ["n/a" if row["bytes"][f] is None else f"{row['bytes'][f] / row['functions']:.2f}" for f in formats]
        lines.append(f"| {row['input']} | {row['functions']:,} | " + " | ".join(cells) + " |")
    return lines


def speed(report: dict, bench: dict) -> list[str]:
    """The bench's main figures (rates and ratios of one run)."""
    o, e, r = bench["overhead"], bench["encoder"], bench["reader"]
    steps = ", ".join(f"`{name}` {us:.1f}" for name, us in bench["step_us"].items())
    figures = [
        ("verified stops per second, all unwinders", f"{o['verified_stops_per_second']:,.0f}"),
        ("verifier overhead ratio (against a no-op Python hook; target 0.10)", f"{o['verifier_overhead_ratio']:.3f}"),
        ("the same against emulation with no hook", f"{o['overhead_ratio_against_no_hook']:.3f}"),
        ("Python step, microseconds a frame", steps),
        (f"v2 encoder: {e['functions']:,} functions", f"{e['encode_seconds']:.1f} s, {e['encode_peak_mb']:,.0f} MB peak"),
        ("v2 blob at that scale", f"{e['bytes_per_function']:.2f} bytes a function, "
                                  f"{e['bytes_per_address']:.2f} an address (Chrome: "
                                  f"{bench['chrome']['bytes_per_function']:.2f}, "
                                  f"{bench['chrome']['bytes_per_address']:.2f})"),
        ("v2 reader lookups per second", f"{r['lookups_per_second']:,.0f}"),
    ]
    return ["| figure | value |", "|---|---|"] + [f"| {name} | {value} |" for name, value in figures]


BLOCKS: dict[str, Callable[[dict, dict], list[str]]] = {
    "generated": generated, "compiled": compiled, "sizes": sizes, "speed": speed}


def rewritten(text: str, report: dict, bench: dict) -> str:
    """`text` with every figures block rendered anew."""
    def render(match: re.Match) -> str:
        body = "\n".join(BLOCKS[match["name"]](report, bench)) + "\n"
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(render, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the README's figures are current")
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    parser.add_argument("--report", default=str(ROOT / "reports" / "latest.json"))
    parser.add_argument("--bench", default=str(ROOT / "reports" / "bench.json"))
    args = parser.parse_args(argv)
    readme = Path(args.readme)
    text = readme.read_text()
    new = rewritten(text, json.loads(Path(args.report).read_text()), json.loads(Path(args.bench).read_text()))
    if args.check:
        if new != text:
            print(f"{readme}: figures differ from {args.report} and {args.bench}; run `make readme`", file=sys.stderr)
            return 1
        return 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
