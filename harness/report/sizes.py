"""What each unwind format costs in bytes, for the same code.

One row per input (the generated corpus, each compiled ELF): the compiler's
`.debug_frame` and `.ARM.exidx` + `.ARM.extab` as they are, and the tables
this tool builds from the same CFI: v1, v2 under each epilogue policy, and
vmkunwind (from `reference`, as the seed built it from complete CFI),
QUT (from `reference`, else the EXIDX, as Matrix builds it) and the call
sites a stack scan accepts (from the code).
v2 policies read the CFI flavours as the unwinders do:
drop: `tables` (generated: clang style, no epilogue rows), Chrome's policy;
keep: `reference` (generated: gcc style, with epilogue rows);
synthesize: `tables` plus epilogue rows synthesized from disassembly.
`addresses` counts v2 `drop` address entries (the design's unit).
"""

from __future__ import annotations

from typing import Sequence

from harness.program import Program
from harness.unwind.registry import SIZE_COLUMNS, table_formats

COUNTS = ("functions", "addresses", "v1_refused", "epilogues_inside")  # what a size row adds up besides bytes

def chrome_reference() -> dict:
    """The v2 design's own figures for Chrome on Android (rounded as it
    gives them), as a size row: n/a in the columns it gives no figure for."""
    return {"input": "Chrome for Android (design figures)", "functions": 389_694, "addresses": 816_686,
            "bytes": {**dict.fromkeys(SIZE_COLUMNS), "v1": 2_200_000, "v2 drop": 1_800_000}, "v1_refused": None}


def size_row(label: str, programs: Sequence[Program], debug_frame: int | None = None,
             layout: str = "seed") -> dict:
    """Bytes of every format over `programs` (`debug_frame`: the ELF's section
    size; None where no DWARF was emitted)."""
    totals = dict.fromkeys(SIZE_COLUMNS, 0)
    totals[".debug_frame"] = debug_frame
    counts = dict.fromkeys(COUNTS, 0)
    for program in programs:
        for table_format in table_formats():
            measured = table_format.measure(program, layout)
            for column, size in measured.bytes.items():
                totals[column] += size
            for name, count in measured.counts.items():
                counts[name] += count
        if program.exidx is None:
            totals["exidx+extab"] = None
        elif totals["exidx+extab"] is not None:
            totals["exidx+extab"] += len(program.exidx.exidx) + len(program.exidx.extab)
    return {"input": label, "functions": counts["functions"], "addresses": counts["addresses"], "bytes": totals,
            "v1_refused": counts["v1_refused"], "epilogues_inside": counts["epilogues_inside"]}


def add_size_rows(label: str, rows: Sequence[dict]) -> dict:
    """One row for the inputs of `rows` together (a format missing from one is missing)."""
    total = {"input": label, "functions": 0, "addresses": 0, "bytes": dict.fromkeys(SIZE_COLUMNS, 0), "v1_refused": 0,
             "epilogues_inside": 0}
    for row in rows:
        for key in COUNTS:
            total[key] += row[key]
        for name in SIZE_COLUMNS:
            mine, theirs = total["bytes"][name], row["bytes"][name]
            total["bytes"][name] = None if mine is None or theirs is None else mine + theirs
    return total
