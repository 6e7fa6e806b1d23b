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

from harness.formats import chrome_v2
from harness.formats.call_sites import encode_call_sites
from harness.formats.chrome_v1 import encode_v1
from harness.formats.chrome_v2.grouping import epilogues_inside
from harness.formats.vmkunwind import encode_vmkunwind
from harness.program import Program
from harness.unwind import call_site_addresses, qut_tables

POLICY_SOURCES = {"drop": "tables", "keep": "reference", "synthesize": "tables"}
FORMATS = (".debug_frame", "exidx+extab", "v1", "v2 drop", "v2 keep", "v2 synthesize", "vmkunwind", "qut",
           "call sites")

# The v2 design's own figures for Chrome on Android (rounded as it gives them).
CHROME_REFERENCE = {
    "input": "Chrome for Android (design figures)",
    "functions": 389_694,
    "addresses": 816_686,
    "bytes": {".debug_frame": None, "exidx+extab": None, "v1": 2_200_000, "v2 drop": 1_800_000,
              "v2 keep": None, "v2 synthesize": None, "vmkunwind": None, "qut": None, "call sites": None},
    "v1_refused": None,
}


def size_row(label: str, programs: Sequence[Program], debug_frame: int | None = None,
             layout: str = "seed") -> dict:
    """Bytes of every format over `programs` (`debug_frame`: the ELF's section
    size; None where no DWARF was emitted)."""
    totals = dict.fromkeys(FORMATS, 0)
    totals[".debug_frame"] = debug_frame
    functions = addresses = refused = inside = 0
    for program in programs:
        for policy, flavour in POLICY_SOURCES.items():
            encoded = chrome_v2.encode(program.cfi[flavour], program.text_base, policy, code_at=program.code,
                                       layout=layout)
            totals[f"v2 {policy}"] += len(encoded.blob())
            if policy == "drop":
                functions += len(encoded.functions)
                addresses += encoded.addresses
            elif policy == "synthesize":
                inside += sum(epilogues_inside(f) for f in encoded.functions)
        v1 = encode_v1(program.cfi["tables"], program.text_base)
        totals["v1"] += len(v1.blob)
        totals["vmkunwind"] += len(encode_vmkunwind(program.cfi["reference"], program.text_base).blob)
        totals["qut"] += len(qut_tables(program).blob)
        totals["call sites"] += len(encode_call_sites(call_site_addresses(program), program.text_base))
        refused += len(v1.refused)
        if program.exidx is None:
            totals["exidx+extab"] = None
        elif totals["exidx+extab"] is not None:
            totals["exidx+extab"] += len(program.exidx.exidx) + len(program.exidx.extab)
    return {"input": label, "functions": functions, "addresses": addresses, "bytes": totals,
            "v1_refused": refused, "epilogues_inside": inside}


def add_size_rows(label: str, rows: Sequence[dict]) -> dict:
    """One row for the inputs of `rows` together (a format missing from one is missing)."""
    total = {"input": label, "functions": 0, "addresses": 0, "bytes": dict.fromkeys(FORMATS, 0), "v1_refused": 0,
             "epilogues_inside": 0}
    for row in rows:
        for key in ("functions", "addresses", "v1_refused", "epilogues_inside"):
            total[key] += row[key]
        for name in FORMATS:
            mine, theirs = total["bytes"][name], row["bytes"][name]
            total["bytes"][name] = None if mine is None or theirs is None else mine + theirs
    return total
