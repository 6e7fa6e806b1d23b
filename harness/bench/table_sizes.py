"""`unwind-harness bench`: the table-size figures (see harness.bench.suite).

5. Rows from code: synthesis time and memory on the largest binary at hand,
   and its v2 bytes per function beside the tables from the compiler's CFI.
6. Epilogue rows: per build, v2 bytes with synthesized epilogue rows
   (`synthesize`) against Chrome's `drop`, both in the chrome layout, the
   fewest bytes any v2 tables with those rows can take (`floor`), and the
   epilogues that have more of their function after them (each needs a
   function table entry or two list pairs, whatever the grouping).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from generators.corpus import generate_program
from harness.elf_program import elf_functions, program_from_elf
from harness.formats import chrome_v2
from harness.formats.chrome_v2.floor import least_bytes
from harness.formats.dwarf_cfi import read_cfi
from harness.formats.elf import open_elf
from harness.linux_verify.corpus import cache as linux_cache
from harness.linux_verify.corpus import executable_with_cfi, linux_entries
from harness.manifest import ELF_CORPUS, elf_builds
from harness.program import Program
from harness.report.sizes import size_row
from harness.thumb.discovery import GAP

SYNTHESIS_BINARY = "cjmp-gcc-O2-fp-static"  # the Linux slice's static build: glibc's Thumb code and ours


def synthesis_binary() -> Path:
    """The largest binary at hand for measuring synthesis: the Linux slice's
    static executable when built (make), else the largest compiled ELF."""
    built = linux_cache() / "bin" / SYNTHESIS_BINARY
    return built if built.exists() else max(sorted(ELF_CORPUS.glob("*.elf")), key=lambda p: p.stat().st_size)


def synthesis_at_scale(path: str) -> dict:
    """Rows from the code of every Thumb function of `path`: time, then the
    peak of Python's allocations doing it again (tracemalloc), and the v2
    bytes per function beside the tables from the compiler's CFI, for the
    functions both describe (policy keep, chrome layout)."""
    image = open_elf(path)
    started = time.perf_counter()
    synthesized = tuple(f for f in elf_functions(image, from_code=True) if f.name != GAP)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    elf_functions(image, from_code=True)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    with_cfi = {f.start: f for f in read_cfi(image)}
    same = [f for f in synthesized if f.start in with_cfi]
    per_function = lambda functions: len(chrome_v2.encode(
        functions, min(f.start for f in synthesized), "keep", layout="chrome").blob()) / max(len(functions), 1)
    return {"binary": Path(path).name, "functions": len(synthesized), "seconds": seconds,
            "seconds_per_10k_functions": seconds * 10_000 / len(synthesized), "peak_mb": peak / (1 << 20),
            "functions_with_cfi": len(same), "refusing_functions": sum(bool(f.problems) for f in synthesized),
            "bytes_per_function_from_code": per_function(same),
            "bytes_per_function_from_cfi": per_function([with_cfi[f.start] for f in same])}


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
