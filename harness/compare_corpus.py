"""`make compare`: the rows from code beside the compiler's CFI over every
compiled build (bare metal, from its manifest entry) and every built Linux
corpus program that carries CFI (as a process, with its manifest's
arguments), each run to say who was right where they disagree
(harness.compare_rows). Writes reports/compare.json, which the README's
and docs/synthesis.md's tables are rendered from (harness.report.figures).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from harness.compare_rows import compared_elf
from harness.filesystem import write_output
from harness.formats.elf import open_elf
from harness.linux_verify.corpus import ROOT, cache, executable_with_cfi, linux_entries, linux_run
from harness.manifest import ELF_CORPUS, elf_builds
from harness.runner import in_processes


def row(work: tuple[str, str, dict | None]) -> dict:
    """One build's figures (`work`: corpus, name, the Linux manifest entry or
    None for a compiled build)."""
    corpus, name, entry = work
    if entry is None:
        build = next(b for b in elf_builds() if b["file"] == name)
        found, judged, fault = compared_elf(str(ELF_CORPUS / name), build["entry"])
    else:
        found, judged, fault = compared_elf(str(cache() / entry["path"]), run=linux_run(entry))
    totals = sum(found.verdicts.values(), Counter())
    return {"corpus": corpus, "build": name, "functions": found.functions,
            "compared": found.agree + len(found.disagreements), "agree": found.agree,
            "disagree": len(found.disagreements), "refused": found.refused, "stops": judged,
            "compiler_right": totals["compiler right"], "synthesized_right": totals["synthesized right"],
            "fault": fault}


def work_items(linux: bool) -> list[tuple[str, str, dict | None]]:
    items = [("compiled", build["file"], None) for build in elf_builds()]
    for entry in linux_entries("all") if linux else ():
        if executable_with_cfi(open_elf(str(cache() / entry["path"]))) is not None:
            items.append(("linux", entry["name"], entry))
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.compare_corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(ROOT / "reports" / "compare.json"))
    parser.add_argument("--no-linux", action="store_true", help="the compiled corpus only")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    items = work_items(not args.no_linux)
    rows = in_processes(row, items, args.jobs, lambda r: print(f"compared {r['corpus']} {r['build']}",
                                                              file=sys.stderr),
                        first=lambda item: (item[0] == "compiled", item[1]))
    write_output(args.json, json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
