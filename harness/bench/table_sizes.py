"""`unwind-harness bench`: the table-size figures (see harness.bench.suite).

6. Epilogue rows: per build, v2 bytes with synthesized epilogue rows
   (`synthesize`) against Chrome's `drop`, both in the chrome layout, the
   fewest bytes any v2 tables with those rows can take (`floor`), and the
   epilogues that have more of their function after them (each needs a
   function table entry or two list pairs, whatever the grouping).
"""

from __future__ import annotations

from collections.abc import Sequence

from generators.corpus import generate_program
from harness.elf_program import program_from_elf
from harness.formats import chrome_v2
from harness.formats.chrome_v2.floor import least_bytes
from harness.formats.elf import open_elf
from harness.linux_verify.corpus import cache as linux_cache
from harness.linux_verify.corpus import executable_with_cfi, linux_entries
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.report.sizes import size_row


def epilogue_row(label: str, programs: Sequence[Program]) -> dict:
    """v2 bytes (chrome layout) of `drop` and `synthesize` over the programs'
    `tables` CFI, and their epilogues with code after them (the run's size
    row, harness.report.sizes, in the layout Chrome ships); `floor`: the
    fewest bytes any v2 tables with the synthesized rows can take
    (chrome_v2.floor), so `floor_over_drop` above +20% proves that bound
    out of reach for that build."""
    row = size_row(label, programs, layout="chrome")
    drop, synthesize = row["bytes"]["v2 drop"], row["bytes"]["v2 synthesize"]
    floor = sum(least_bytes(chrome_v2.encode(p.cfi["tables"], p.text_base, "synthesize", code_at=p.code,
                                             layout="chrome").functions, p.text_base) for p in programs)
    return {"input": label, "functions": row["functions"], "epilogues_inside": row["epilogues_inside"],
            "drop": drop, "synthesize": synthesize, "over_drop": synthesize / drop - 1,
            "floor": floor, "floor_over_drop": floor / drop - 1}


def epilogue_rows(programs: int, linux: bool) -> list[dict]:
    """One row for the generated corpus (`programs` programs), one per
    compiled build, and with `linux` one per built Linux corpus program that
    carries CFI (our own builds; Debian's ship none)."""
    rows = [epilogue_row(f"generated corpus ({programs} programs)",
                         [generate_program(0, number) for number in range(programs)])]
    for build in elf_builds():
        path = ELF_CORPUS / build["file"]
        rows.append(epilogue_row(f"corpus/elf/{build['file']}", [program_from_elf(str(path), build["entry"])]))
    for entry in linux_entries("all") if linux else ():
        program = executable_with_cfi(open_elf(str(linux_cache() / entry["path"])))
        if program is not None:
            rows.append(epilogue_row(f"corpus/linux/{entry['name']}", [program]))
    return rows
